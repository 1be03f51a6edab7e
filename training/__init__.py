"""tfcluster's cluster side: everything that runs on the cluster's machines, shipped there by `start`.

Stdlib + TensorFlow only (import-linter keeps it so). Every import inside the package is relative, so the
package runs under whatever name it is shipped as (on the hosts it lives outside the user's code, under a
private name: a user's own `training/` package never collides with it).

What runs where:
- `launcher` (entry point): sent by `start` as the source of `python -S -c`; prepares the run dir,
  receives the files, then becomes the supervisor's launcher. Stdlib only.
- `task` (entry point): `python -m <package>.task`, every built-in TF task (ps, worker, chief, client).
- rooms a host runs without TensorFlow (stdlib only): `supervisor/` (one per host: starts, restarts and
  ends the tasks), `agent/` (the dashboard's telemetry stream), `telemetry/` (event and state files),
  `progress/` (progress read from a user program's log), `run/` (the run dir's paths, a task's context,
  the jobs' roles), `probes/` (what `check` and `bench` run on a host; link_probe_tf is the one with TF);
- rooms a TF task imports: `graph/` (the TF1 graph trainers: between-graph, in-graph, checkpoints),
  `tf2/` (multi-worker-mirrored and parameter-server-strategy), `cluster/` (what both use: the servers and
  done queues, device strings, greedy PS placement, the straggler's sleep, optimizers), `models/`;
- `public/`: what a user's program may import (`tfcluster_report` and the report API behind it).
"""
