"""Slurm (issue 25): `tfcluster start` of a [slurm] file next to `sbatch` of the script `tfcluster export slurm`
writes for the same file, on the real three-node test cluster (testkit/slurm.py: munged, slurmctld, three
slurmd on this machine).

The job: 1 ps and 2 workers on 3 nodes, each task a user command (`sleep`), so TensorFlow's import time hides
nothing of what each way adds around it. One round is both, one after the other (which one first
alternates), each from nothing to:
- start: the whole CLI, `tfcluster start HOSTS` (plan, sbatch, wait for the nodes, plan on them, one
  step per node to prepare it, the supervisors' step, their pushed readiness) until it returns: every task
  `running` (its process spawned by its supervisor), when it exits 0; then `tfcluster stop --purge` (the
  tasks, verified, then scancel), not timed;
- sbatch: `sbatch --parsable` of the exported script until `squeue -s` lists its rank step (step 0: a step
  is listed once it runs; looked at every POLL_S), i.e. the first step running; then scancel, until squeue
  drops it.
Both also report when the job itself went RUNNING (squeue or `scontrol show job`, every POLL_S), which is
Slurm's own share (scheduling, the batch script's start). The first round is cold for `start` (every file
shipped into the nodes' content cache); the medians are over the others. The 1-minute load is recorded
before each round (benchmarks/common.py waits for a quiet one) and after the run.

    python -m benchmarks.bench_slurm [--rounds 5]

Writes benchmarks/results/slurm.json and slurm.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import footer, load_now, now_utc, publish, require_quiet

POLL_S = 0.05
SLURM = {"nodes": 3, "workers": 2, "ps": 1}
TRAINING = {"command": "sleep 600"}


def _until(predicate: Callable[[], bool], timeout: float = 120.0) -> float:
    """time.monotonic() when `predicate` first holds (looked at every POLL_S)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(POLL_S)
    return time.monotonic()


def _start_round(cluster: Any, hosts: Path, run_id: str) -> dict[str, float]:
    """The whole CLI, as a user runs it: `tfcluster start` (it returns once every task runs), then
    `tfcluster stop --purge` (not timed). The job's RUNNING is looked at meanwhile, as for sbatch."""
    cli = [sys.executable, "-m", "tfcluster"]
    t0 = time.monotonic()
    start = subprocess.Popen([*cli, "start", str(hosts), "--run", run_id], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    running: list[float] = []
    while start.poll() is None:
        if not running and "RUNNING" in cluster.run("squeue", "-h", "-o", "%T").stdout:
            running.append(time.monotonic())
        time.sleep(POLL_S)
    t_tasks = time.monotonic()
    assert start.stderr is not None
    said = start.stderr.read()
    if start.returncode != 0:
        raise RuntimeError(f"tfcluster start exited {start.returncode}: {said}")
    stopped = subprocess.run([*cli, "stop", run_id, "--purge"], capture_output=True, text=True, check=False)
    if stopped.returncode != 0:
        raise RuntimeError(f"tfcluster stop exited {stopped.returncode}: {stopped.stdout}{stopped.stderr}")
    return {"job_running_s": (running[0] if running else t_tasks) - t0, "ready_s": t_tasks - t0}


def _sbatch_round(cluster: Any, script: Path) -> dict[str, float]:
    t0 = time.monotonic()
    job = cluster.submit(script, cwd=script.parent)
    t_job = _until(lambda: cluster.job(job).get("JobState") == "RUNNING")
    t_step = _until(lambda: f"{job}.0" in cluster.run("squeue", "-h", "-s", "-j", job, "-o", "%i").stdout.split())
    cluster.run("scancel", job)
    _until(lambda: not cluster.run("squeue", "-h", "-j", job).stdout.strip(), timeout=60)
    return {"job_running_s": t_job - t0, "ready_s": t_step - t0}


def run(rounds: int) -> dict[str, Any]:
    from testkit import slurm

    os.environ.update({"TFCLUSTER_STATE_DIR": tempfile.mkdtemp(prefix="tfcluster-bench-slurm-state-")})
    cluster = slurm.start_cluster()
    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("SLURM_")]}
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        work = Path(tempfile.mkdtemp(prefix="tfcluster-bench-slurm-"))
        hosts = cluster.hosts_toml(work / "hosts.toml", slurm=SLURM, training=TRAINING)
        script = work / "job.sbatch"
        from orchestrator.plan.from_file import slurm_plan_file
        from orchestrator.plan.sbatch import export_script

        script.write_text(export_script(slurm_plan_file(hosts), str(hosts)))
        samples: dict[str, list[dict[str, float]]] = {"start": [], "sbatch": []}
        loads: list[list[float]] = []
        for r in range(rounds):
            loads.append(require_quiet(f"bench_slurm round {r + 1}")["load_before"])
            order = ("start", "sbatch") if r % 2 == 0 else ("sbatch", "start")
            for way in order:
                got = _start_round(cluster, hosts, f"bench-slurm-{r + 1}") if way == "start" else _sbatch_round(cluster, script)
                samples[way].append(got)
                print(f"round {r + 1} {way}: {got}", flush=True)
    finally:
        os.environ.pop("SLURM_CONF", None)
        os.environ.update(saved)
        slurm.remove(cluster)
    return summarize(samples, loads)


def summarize(samples: dict[str, list[dict[str, float]]], loads: list[list[float]]) -> dict[str, Any]:
    warm = {way: rows[1:] or rows for way, rows in samples.items()}

    def med(way: str, key: str) -> float:
        return round(statistics.median(row[key] for row in warm[way]), 3)

    return {
        "benchmark": "slurm",
        "method": "tfcluster start of a [slurm] file (to every task running) vs sbatch of `tfcluster export slurm`'s "
                  "script (to its rank step running), 1 ps + 2 workers of `sleep` on the three-node test cluster "
                  "on this machine; rounds interleaved, the order alternating; medians over rounds 2..",
        "job": {"slurm": SLURM, "training": TRAINING},
        "rounds": len(samples["start"]),
        "seconds": {way: [{k: round(v, 3) for k, v in row.items()} for row in rows] for way, rows in samples.items()},
        "median_ready_s": {way: med(way, "ready_s") for way in samples},
        "median_job_running_s": {way: med(way, "job_running_s") for way in samples},
        "cold_start_ready_s": round(samples["start"][0]["ready_s"], 3),
        "load_before_each_round": loads,
        "load_average_at_end": load_now(),
        "measured_at": now_utc(),
    }


def to_markdown(result: dict[str, Any]) -> str:
    ready, job = result["median_ready_s"], result["median_job_running_s"]
    lines = [
        "# Slurm: `tfcluster start` vs `sbatch` of the exported script",
        "",
        result["method"] + ".",
        "",
        "| | submission to the job RUNNING (s) | submission to ready (s) | after the job runs (s) |",
        "|---|---|---|---|",
        f"| tfcluster start (every task running) | {job['start']} | {ready['start']} | "
        f"{round(ready['start'] - job['start'], 3)} |",
        f"| sbatch of the exported script (first step running) | {job['sbatch']} | {ready['sbatch']} | "
        f"{round(ready['sbatch'] - job['sbatch'], 3)} |",
        "",
        f"Every round (s): start {[r['ready_s'] for r in result['seconds']['start']]}, sbatch "
        f"{[r['ready_s'] for r in result['seconds']['sbatch']]}. The first start shipped tfcluster's code into "
        f"the nodes' content cache (cold: {result['cold_start_ready_s']} s).",
        "",
        "What `start` adds after the job runs: the nodes and their NodeAddr (scontrol), the job's first step "
        "(`srun --immediate`, asked again while a node is not responding), a plan on them, one step per node that prepares its run dir (code from the content cache) and checks its ports, `go`, the "
        "supervisors' step, and every supervisor's readiness pushed back; the exported script only looks up "
        "the nodes and starts its step. Load average before each round (1/5/15 min): "
        f"{result['load_before_each_round']}.",
        "",
        footer(os.cpu_count(), result["load_average_at_end"], result["measured_at"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_slurm")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = run(args.rounds)
    publish("slurm", result, to_markdown(result))


if __name__ == "__main__":
    main()
