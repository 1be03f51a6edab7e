"""Measured vs accounted parameter-server traffic on the `wide` model (issue 5: agree within 10 %).

Method: a real between-graph TensorFlow cluster on this machine (1 ps, 2 CPU workers, model `wide`
with `params` parameters, so variable traffic dominates gRPC overhead), started as plain processes
(testkit/local_cluster.py). What the PS host's supervisor does is done here: its facts writer measures
the PS's bytes in/out from the kernel's TCP counters once a second (training/telemetry/traffic.py,
netlink); one telemetry agent runs for the PS's host through the real collector over the
LocalTransport and sends them, and the workers' `progress` events carry the bytes they account from
the variables' sizes and placement. After a warm-up, both rates are sampled once a second; the figure is
the ratio of the mean measured rate to the mean accounted rate, per direction.

    python -m benchmarks.bench_ps_traffic [--seconds 20] [--params 2000000]

Writes benchmarks/results/ps_traffic.json and ps_traffic.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import publish
from orchestrator.monitor.collect import Collector
from orchestrator.monitor.reducer import ClusterState
from testkit.local_cluster import local_plan, running_cluster
from training.run.layout import RunLayout
from training.telemetry.host_facts import FactsWriter
from training.telemetry.traffic import TaskTraffic


def _every_second(work: Callable[[], None], stop: threading.Event) -> None:
    """The supervisor's facts pace (training/supervisor/core.py: FACTS_EVERY_S)."""
    while not stop.wait(1.0):
        work()


def run(seconds: float, params: int, warmup_timeout: float = 180.0) -> dict[str, Any]:
    training = {"model": "wide", "model_args": {"params": params, "shards": 4}, "batch_size": 32,
                "steps": 10_000_000, "progress_interval": 1.0, "checkpoint_every_secs": 3600.0}
    plan = local_plan("between-graph", ps=1, workers=2, training=training)
    samples: list[tuple[float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as d, running_cluster(plan, Path(d)) as cluster:
        ps_host = next(h for h in plan.hosts if "ps" in h.roles)
        facts = FactsWriter(RunLayout(str(cluster.run_dir)), ps_host.name, {}, find_gpus=False,
                            traffic=TaskTraffic.for_plan(plan.to_json(), ps_host.name))
        measuring = threading.Event()
        threading.Thread(target=_every_second, args=(facts.update, measuring), daemon=True).start()
        state = ClusterState.from_plan(plan, "bench", 1.0)
        collector = Collector(state, [ps_host], {ps_host.name: str(cluster.run_dir)},
                              {ps_host.name: sys.executable}, 1.0).start()
        try:
            deadline = time.monotonic() + warmup_timeout
            while time.monotonic() < deadline:  # both workers training and both rates present
                st = collector.poll()
                p = st.ps.get("ps:0")
                if (p and p.measured_in and p.accounted_in
                        and all(st.tasks[f"worker:{i}"].steps_per_s for i in (0, 1))):
                    break
                time.sleep(0.5)
            else:
                raise RuntimeError("cluster did not start training:\n" + cluster.logs_tail())
            time.sleep(5.0)  # past start-up
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(1.0)
                p = collector.poll().ps["ps:0"]
                if None not in (p.measured_in, p.measured_out, p.accounted_in, p.accounted_out):
                    samples.append((p.measured_in, p.measured_out, p.accounted_in, p.accounted_out))  # type: ignore[arg-type]
            steps = {f"worker:{i}": collector.poll().tasks[f"worker:{i}"].steps_per_s for i in (0, 1)}
        finally:
            measuring.set()
            collector.close()
    m_in, m_out, a_in, a_out = (statistics.mean(s[i] for s in samples) for i in range(4))
    r_in, r_out = m_in / a_in, m_out / a_out
    return {
        "benchmark": "ps_traffic", "model": "wide", "params": params, "seconds": seconds, "samples": len(samples),
        "measured_in_Bps": round(m_in), "accounted_in_Bps": round(a_in), "ratio_in": round(r_in, 4),
        "measured_out_Bps": round(m_out), "accounted_out_Bps": round(a_out), "ratio_out": round(r_out, 4),
        "target": "measured/accounted within 1 ± 0.10",
        "meets_target": abs(r_in - 1) <= 0.10 and abs(r_out - 1) <= 0.10,
        "worker_steps_per_s": {k: round(v or 0, 2) for k, v in steps.items()},
    }


def to_markdown(result: dict[str, Any]) -> str:
    return (
        "# PS traffic: measured (kernel TCP counters) vs accounted (variable sizes)\n\n"
        f"Model `wide`, {result['params']:,} parameters, 1 ps + 2 workers between-graph on this machine, "
        f"{result['samples']} one-second samples.\n\n"
        "| direction (PS side) | measured B/s | accounted B/s | measured/accounted |\n|---|---|---|---|\n"
        f"| in (pushed by workers) | {result['measured_in_Bps']:,} | {result['accounted_in_Bps']:,} | "
        f"{result['ratio_in']} |\n"
        f"| out (pulled by workers) | {result['measured_out_Bps']:,} | {result['accounted_out_Bps']:,} | "
        f"{result['ratio_out']} |\n\n"
        f"Target: within 10 %: {'met' if result['meets_target'] else 'NOT met'}.\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--params", type=int, default=2_000_000)
    args = ap.parse_args()
    result = run(args.seconds, args.params)
    publish("ps_traffic", result, to_markdown(result), show_json=True)


if __name__ == "__main__":
    main()
