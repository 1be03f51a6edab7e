"""The per-host supervisor: starts this host's tasks, restarts them by policy, stops them on SIGTERM.

Shipped to every host (stdlib only). It leads its own session and process group and every task it
spawns stays in that group: `stop` can always kill the whole group even when the supervisor itself
is gone.

    python -S -m training.supervisor --detach --run-dir R --host NAME   # what `start` runs (see below)
    python -m training.supervisor --run-dir R --host NAME              # supervise in the foreground

`--detach` forks the supervisor into its own session (stdio on its log file, away from the SSH
channel), waits until it has spawned every task, prints `PID <pid>`, the state files (one JSON line
each) and `ALIVE` if it still runs, and exits: one process and one round trip per host, no polling. A
lock file makes it idempotent: when this run's supervisor already runs on the host (a launch retried
after a lost connection), it reports that one instead of starting a second.

Every process of a run carries `TFCLUSTER_RUN_DIR=<run dir>` in its environment; `stop` and `status`
find the run's processes by that marker in /proc (in sh, orchestrator/run/sh_procs.py), so orphans
cannot hide. Neither starts a Python on the host: they read what the supervisor keeps in the run dir
(its state files and facts) and signal it.

Start-up cost matters (`start` pays it on every host, and on loopback test machines all hosts share
the same cores): no `subprocess`, `dataclasses` or `typing` at run time, tasks are started with
`os.posix_spawnp`.
"""
