"""Per-host telemetry agent: `python -m training.agent --run-dir R --host NAME --interval 1`.

Streams JSON lines on stdout for the orchestrator's collector (one SSH channel per host):
- every new line of the run's `events/*.jsonl` files (tailed; files that appear later are picked up,
  a partial last line waits until it is complete),
- a `host_sample` every interval: CPU and memory (psutil, else /proc), and what the supervisor's facts
  file says (training/telemetry/host_facts.py): each task's processes, the GPUs (else nvidia-smi where
  present), and `ps_tcp` (or `allreduce_tcp`): each local PS task's traffic in/out, counters and rates,
  per peer too, as the supervisor measured it from the kernel's TCP counters (telemetry/traffic.py),
- a `heartbeat` every interval (first thing at start, so the collector learns the clock offset).

A task_state line is written as soon as it is tailed (every 0.25 s); the others wait for the next
sample, so a host sends one SSH packet per interval whatever its number of tasks.

It stops on SIGTERM/SIGHUP/SIGINT, when stdout is closed (the SSH channel went away: the next write
fails), or, with --exit-on-stdin-eof, when stdin reaches EOF. Stdlib only; psutil is optional.
"""
