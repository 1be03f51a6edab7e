"""Slurm: a job's first step once a node of the job was flagged not responding, as `tfcluster start` makes it
(slurm_start.make_first_step: `srun --immediate`, asked again every few seconds) next to a plain `srun` of
the same step (what start did before, and what a user's own step would do), on the real test cluster
(testkit/slurm.py).

Slurm 22.05 refuses a job's first step while one of its nodes is flagged not responding ("Requested nodes
are busy"); srun then waits (pid % 10) + 60 s before asking again unless slurmctld calls it back. One round
is each way in each of two moments, the ways one after the other (which first alternates). Each: a job on
n2 (`sleep`), RUNNING; n2's slurmd stopped until slurmctld flags it (SlurmCluster.not_responding: its ping
timed out, as a loaded slurmd's may); then either
- while-flagged: the step asked for, refused (seen: srun -v says "step creation temporarily disabled",
  make_first_step reports the reason), and n2's slurmd let run again (SIGCONT); or
- on-resume: n2's slurmd let run again and the step asked for at once, before slurmctld has heard from it
  (what a start meets when a loaded node answered one RPC late just as its job began).
Timed: from the SIGCONT to the step done (or srun giving up). Medians over the rounds; the load before
and after.

    python -m benchmarks.bench_slurm_first_step [--rounds 3]

Writes benchmarks/results/slurm_first_step.json and .md.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import footer, load_now, now_utc, publish, require_quiet
from orchestrator.run.slurm_job import SlurmClient
from orchestrator.run.slurm_start import make_first_step
from orchestrator.transport.local import LocalTransport
from testkit import slurm

REFUSED_WITHIN_S = 60.0


def _plain(cluster: slurm.SlurmCluster, job: str, refused: queue.Queue[str]) -> tuple[float, str]:
    """`srun --overlap` of `true` into the job: (time.monotonic() when it ended, srun's error or "")."""
    proc = subprocess.Popen([slurm.tool("srun"), f"--jobid={job}", "--overlap", "-N1", "-n1", "-v", "true"],
                            env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:
        said.append(line.strip())
        if "step creation temporarily disabled" in line:
            refused.put(line.strip())
    failed = proc.wait() != 0
    return time.monotonic(), (said[-1].removeprefix("srun: error: ") if failed and said else "")


def _tfcluster(cluster: slurm.SlurmCluster, job: str, refused: queue.Queue[str]) -> tuple[float, str]:
    client = SlurmClient(LocalTransport("slurm"))
    try:
        make_first_step(client, job, 1, lambda job_id, said: refused.put(said), timeout=300, poll=0.5)
    finally:
        client.close()
    return time.monotonic(), ""


WAYS = {"srun": _plain, "tfcluster": _tfcluster}
ASKED = ("while-flagged", "on-resume")  # the step asked for while the node is flagged, or just after it runs again


def _round(cluster: slurm.SlurmCluster, way: str, asked: str, script: Path) -> dict[str, Any]:
    job = cluster.submit(script, "--nodelist=n2", "--output=/dev/null")
    try:
        deadline = time.monotonic() + 60
        while cluster.job(job).get("JobState") != "RUNNING":
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job} did not run")
            time.sleep(0.1)
        refused: queue.Queue[str] = queue.Queue()
        done: list[tuple[float, str]] = []
        thread = threading.Thread(target=lambda: done.append(WAYS[way](cluster, job, refused)), daemon=True)
        with cluster.not_responding("n2") as resume:
            if asked == "while-flagged":
                thread.start()
                said = refused.get(timeout=REFUSED_WITHIN_S)
                resumed = time.monotonic()
                resume()
            else:  # on-resume: the slurmd runs again, and the step is asked for before slurmctld hears from it
                resumed = time.monotonic()
                resume()
                thread.start()
        thread.join(timeout=300)
        if asked == "on-resume":
            said = refused.get_nowait() if not refused.empty() else "(not refused)"
        if not done:
            raise RuntimeError(f"{way}: the first step of job {job} did not end")
        ended, error = done[0]
        return {"way": way, "asked": asked, "job": job, "refused": said, "s_after_resume": round(ended - resumed, 2),
                "step_ran": not error, "srun_error": error}
    finally:
        cluster.run("scancel", job)
        cluster.wait_job(job, 60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    require_quiet("bench_slurm_first_step")
    rounds: list[dict[str, Any]] = []
    cluster = slurm.start_cluster()
    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("SLURM_")]}
    os.environ["SLURM_CONF"] = str(cluster.conf)  # make_first_step's srun, as the CLI's, talks to this cluster
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-first-step-") as tmp:
            script = Path(tmp) / "hold.sh"
            script.write_text("#!/bin/sh\nsleep 600\n")
            for r in range(args.rounds):
                order = list(WAYS) if r % 2 == 0 else list(reversed(WAYS))
                for asked in ASKED:
                    for way in order:
                        rounds.append({"round": r + 1, **_round(cluster, way, asked, script)})
                        print(rounds[-1], flush=True)
    finally:
        os.environ.pop("SLURM_CONF", None)
        os.environ.update(saved)
        slurm.remove(cluster)
    cells = [(asked, way) for asked in ASKED for way in WAYS]
    of = {cell: [x for x in rounds if (x["asked"], x["way"]) == cell] for cell in cells}
    medians = {f"{asked}/{way}": statistics.median(x["s_after_resume"] for x in of[(asked, way)]) for asked, way in cells}
    data = {"measured_at": now_utc(), "rounds": rounds, "median_s_after_resume": medians}
    lines = [
        "# A job's first step after a node was flagged not responding",
        "",
        "From resuming n2's slurmd to the job's first step done (or srun giving up), the step asked for while n2 "
        "was flagged or just after its slurmd ran again; medians of interleaved rounds "
        "(benchmarks/bench_slurm_first_step.py says how).",
        "",
        "| asked | way | median s | each round (s) | the step ran | refused with | srun's error |",
        "|---|---|---|---|---|---|---|",
    ]
    for asked, way in cells:
        xs = of[(asked, way)]
        errors = "; ".join(sorted({x["srun_error"] for x in xs if x["srun_error"]})) or "-"
        lines.append(f"| {asked} | {way} | {medians[f'{asked}/{way}']:.2f} | "
                     f"{', '.join(str(x['s_after_resume']) for x in xs)} | {sum(x['step_ran'] for x in xs)} of "
                     f"{len(xs)} | {'; '.join(sorted({x['refused'] for x in xs}))} | {errors} |")
    lines.append("")
    lines.append(footer(os.cpu_count(), load_now(), data["measured_at"]))
    publish("slurm_first_step", data, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
