"""A run as the cluster side sees it: the run dir's paths (`layout`, shared with the orchestrator), a task's
context (`context`: its plan entry, run dir and role, from its environment) and the jobs' roles per mode
(`roles`: which tasks finish a run and which serve it). Stdlib only."""
