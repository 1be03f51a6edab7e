"""The orchestrator's own cost at 256 and 1024 hosts, simulated (issue 15): CPU per host and wall time.

One machine cannot run 1024 sshd hosts, so the hosts are scripted (testkit/scripted_transport.py): the
real orchestrator code (`launch.start` with its two phases, sharding, run records and progress; `status`,
`stop`, `check`) talks to in-memory hosts that answer as the real host programs do, over a simulated
network: 20 ms per round trip, a connection costs 4 round trips (TCP, SSH version and key exchange,
authentication, the session) and each step a fixed remote cost (time.sleep: not the orchestrator's CPU):
prepare 30 ms (a warm run dir), launch 50 ms (the supervisor and its tasks), read (status) 30 ms, stop 60 ms,
check 40 ms. Every host is a `ps` and a `worker` task; the code tree is warm on every host.

Measured per command: wall time, and the orchestrator's CPU: this process's (every thread) plus its
shard workers' (forked processes, counted when reaped). It includes the scripted hosts' own bookkeeping
(they live in the orchestrator's process), so it is an upper bound for the orchestrator; it excludes
the SSH cryptography a real transport adds (measured on real sshd by bench_fanout: the CLI's CPU).
Each command runs sharded as it would by default (hosts beyond 64 per process over the usable cores)
and in one process (TFCLUSTER_HOSTS_PER_PROCESS=100000) for comparison. Medians of `--rounds`.

    python -m benchmarks.bench_scale [--rounds 3] [--hosts 256 1024]

Writes benchmarks/results/scale.json and scale.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import busy_cpu_seconds, load_note, now_utc, publish

RTT_S = 0.020
CONNECT_RTTS = 4
COST_S = {"prepare": 0.030, "launch": 0.050, "read": 0.030, "stop": 0.060, "check": 0.040}
TARGET_CPU_MS_PER_HOST = 3.0  # at 256 hosts
TARGET_START_WALL_S = 3.0  # at 1024 hosts
MODES = {"sharded": None, "one process": "100000"}


def _plan(hosts: int) -> Any:
    from orchestrator.config.schema import Config
    from orchestrator.plan.from_file import plan_config

    return plan_config(Config.model_validate({
        "cluster": {"name": "sim", "base_port": 30000},
        "hosts": [{"name": f"h{i:04d}", "address": f"10.{i // 250}.{i % 250}.1", "roles": ["ps", "worker"],
                   "workdir": "/scratch/tfcluster"} for i in range(hosts)],
        "training": {"command": "python train.py --job {job} --task {task}"},
    }))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _measure(fn: Callable[[], object]) -> dict[str, float]:
    cpu0, kids0, t0 = time.process_time(), _children_cpu(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu0 + _children_cpu() - kids0}


def _set_mode(per_process: str | None) -> None:
    from orchestrator.transport.shards import HOSTS_PER_PROCESS_ENV

    if per_process is None:
        os.environ.pop(HOSTS_PER_PROCESS_ENV, None)
    else:
        os.environ[HOSTS_PER_PROCESS_ENV] = per_process


def _one_round(n: int, plan: Any, tmp: Path, r: int, per_process: str | None) -> dict[str, dict[str, float]]:
    from orchestrator.monitor.status import read_run
    from orchestrator.run import launch
    from orchestrator.run.check import run_check
    from orchestrator.run.stop import stop
    from testkit.scripted_transport import ScriptedCluster

    cluster = ScriptedCluster(rtt=RTT_S, connect_rtts=CONNECT_RTTS, cost=COST_S, plan=plan)
    for h in plan.hosts:  # a warm host: the code tree is in its cache
        cluster.host(h.name)
    _set_mode("100000")
    warm = launch.start(plan, str(tmp / "hosts.toml"), launch.StartOptions(timeout=300, run_name=f"warm-{n}-{r}"),
                        opener=cluster.opener)
    stop(warm.record, grace=0, timeout=60, purge=True, opener=cluster.opener)
    _set_mode(per_process)
    steps = [0]

    def progress(host: str, phase: str, done: int, total: int) -> None:
        steps[0] += 1

    out: dict[str, dict[str, float]] = {}
    opts = launch.StartOptions(timeout=300, run_name=f"sim-{n}-{r}-{per_process or 'sharded'}")
    result: list[Any] = []
    out["start"] = _measure(lambda: result.append(launch.start(plan, str(tmp / "hosts.toml"), opts,
                                                               opener=cluster.opener, progress=progress)))
    outcomes = result[0].outcomes
    if not all(o.ok for o in outcomes.values()):
        raise RuntimeError(f"simulated start failed: {[str(o.error) for o in outcomes.values() if o.error][:3]}")
    out["start"]["progress_steps"] = float(steps[0])
    record = result[0].record
    if per_process is None:  # the workers' hosts started the run; put it where this process's hosts see it
        _set_mode("100000")
        record = launch.start(plan, str(tmp / "hosts.toml"), launch.StartOptions(timeout=300, run_name=f"seen-{n}-{r}"),
                              opener=cluster.opener).record
        _set_mode(per_process)
    out["status"] = _measure(lambda: read_run(record, timeout=60, opener=cluster.opener))
    out["check"] = _measure(lambda: run_check(plan, cluster.opener, timeout=60))
    out["stop"] = _measure(lambda: stop(record, grace=0, timeout=60, purge=True, opener=cluster.opener))
    return out


def run(rounds: int, counts: list[int]) -> dict[str, Any]:
    from orchestrator.transport.shards import shard_count, usable_cores

    load_before = os.getloadavg()
    busy0, own0, wall0 = busy_cpu_seconds(), time.process_time() + _children_cpu(), time.monotonic()
    samples: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {}
    shard_counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-scale-") as d:
        os.environ["TFCLUSTER_STATE_DIR"] = str(Path(d) / "state")
        plans = {n: _plan(n) for n in counts}
        for r in range(rounds):
            for n in counts:
                for mode, per_process in MODES.items():
                    _set_mode(per_process)
                    shard_counts.setdefault(mode, {})[str(n)] = shard_count(n)
                    got = _one_round(n, plans[n], Path(d), r, per_process)
                    for step, figures in got.items():
                        samples.setdefault(mode, {}).setdefault(str(n), {}).setdefault(step, []).append(figures)
        _set_mode(None)
    load_after = os.getloadavg()
    own = time.process_time() + _children_cpu() - own0
    other_share = max(0.0, busy_cpu_seconds() - busy0 - own) / ((time.monotonic() - wall0) * usable_cores())
    medians: dict[str, Any] = {}
    for mode, by_count in samples.items():
        for count, by_command in by_count.items():
            for command, runs in by_command.items():
                wall = statistics.median(s["wall_s"] for s in runs)
                cpu = statistics.median(s["cpu_s"] for s in runs)
                medians.setdefault(mode, {}).setdefault(count, {})[command] = {
                    "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cpu_ms_per_host": round(cpu / int(count) * 1000, 2),
                    "wall_samples_s": [round(s["wall_s"], 3) for s in runs]}
    cpu_256 = medians["sharded"].get("256", {}).get("start", {}).get("cpu_ms_per_host")
    wall_1024 = medians["sharded"].get("1024", {}).get("start", {}).get("wall_s")
    return {
        "benchmark": "scale",
        "method": "launch.start/status/stop/run_check against scripted hosts (testkit/scripted_transport.py): "
                  f"{RTT_S * 1000:g} ms per round trip, {CONNECT_RTTS} round trips per connection, fixed remote "
                  f"cost per step {COST_S} s; ps+worker per host, warm code tree; CPU = this process + its "
                  "shard workers",
        "rounds": rounds,
        "hosts": counts,
        "usable_cores": usable_cores(),
        "shards": shard_counts,
        "medians": medians,
        "target_cpu_ms_per_host_at_256": TARGET_CPU_MS_PER_HOST,
        "target_start_wall_s_at_1024": TARGET_START_WALL_S,
        "start_cpu_ms_per_host_256": cpu_256,
        "start_wall_s_1024": wall_1024,
        "meets_target": bool(cpu_256 is not None and wall_1024 is not None and cpu_256 <= TARGET_CPU_MS_PER_HOST
                             and wall_1024 <= TARGET_START_WALL_S),
        "python": sys.version.split()[0],
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "other_work_share_of_cores": round(other_share, 3),
        "load_note": load_note(usable_cores(), load_before[0], [other_share]),
        "measured_at": now_utc(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    lines = [
        "# scale: the orchestrator at 256 and 1024 simulated hosts",
        "",
        r["method"] + ".",
        "",
        "| mode | hosts | shards | command | wall median (s) | orchestrator CPU (s) | CPU per host (ms) | wall samples (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, by_n in r["medians"].items():
        for n, by_command in by_n.items():
            for command, m in by_command.items():
                lines.append(f"| {mode} | {n} | {r['shards'][mode][n]} | {command} | {m['wall_s']} | {m['cpu_s']} | "
                             f"{m['cpu_ms_per_host']} | {', '.join(str(x) for x in m['wall_samples_s'])} |")
    verdict = "meets" if r["meets_target"] else "MISSES"
    lines += [
        "",
        f"Targets: start's CPU per host at 256 hosts <= {r['target_cpu_ms_per_host_at_256']} ms (measured "
        f"{r['start_cpu_ms_per_host_256']} ms, sharded as by default), 1024-host start <= "
        f"{r['target_start_wall_s_at_1024']} s wall (measured {r['start_wall_s_1024']} s): {verdict} them.",
        "",
        f"Machine: {r['usable_cores']} usable cores, Python {r['python']}, load average "
        f"{', '.join(map(str, r['load_average_before']))} before and {', '.join(map(str, r['load_average_after']))} "
        f"after (a shared machine: CPU figures include other work's contention), measured {r['measured_at']}. "
        + r["load_note"],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, nargs="+", default=[256, 1024])
    args = parser.parse_args()
    result = run(args.rounds, args.hosts)
    publish("scale", result, to_markdown(result))


if __name__ == "__main__":
    main()
