"""`start` fan-out: issue 4 asks that starting 16 loopback machines take less than 2x starting 1.

Method: real OpenSSH sshd processes on 16 loopback addresses (testkit/sshd.py), each with its
own workdir; the user-command path with a trivial program (`sleep`) so TensorFlow's import time does not
hide the fan-out. Each host runs a `ps` and a `worker` task (same per-host work in both cases). A trial
is one `orchestrator.run.launch.start` call, from nothing to "every task reports running" (connect, create
the run dir, link the cached code tree, write run.json, launch the supervisor and wait for it on the
host), timed in process; the run is then stopped. The first trial on fresh workdirs ships every file
("cold"); later trials find them in the content-hash cache ("warm"). Medians of the warm trials, 1 vs
16 hosts, interleaved so machine load affects both alike.

Where the time goes, measured in the same run:
- machine-wide busy CPU per trial (all processes: orchestrator, every "machine's" sshd, shells and
  supervisor): on one machine playing N hosts, wall time cannot fall below busy CPU / cores, however
  parallel the fan-out. `fan-out efficiency` = that floor / the measured wall time (1.0: the fan-out
  is as parallel as this machine's cores allow);
- the orchestrator's own CPU (this process): the one part that stays serial (the GIL) when every host
  is a separate machine;
- the least any start must do on a host: busy CPU per host of one SSH connection that starts one
  Python interpreter (`python -S -c pass`: the supervisor's start-up without its imports), on all 16
  hosts at once (sshd's fork, re-exec, key exchange and auth, the login shell, Paramiko's side, the
  interpreter).

From these, bounds for separate machines, where every host's remote work runs on its own CPU and
only the orchestrator's own CPU stays serial (Paramiko under the GIL): at best max(1-host time,
orchestrator CPU at 16 hosts), when that CPU overlaps the waiting for remote work; at worst the 1-host
time plus the orchestrator's extra CPU for the other hosts, when it does not. An estimate, not a
measurement: this machine cannot give 16 hosts their own CPUs.

    python -m benchmarks.bench_start [--trials 7] [--hosts 16]

Writes benchmarks/results/start.json and start.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import busy_cpu_seconds, footer, medians, now_utc, publish

TARGET_RATIO = 2.0


def _trial(hosts_file: Path) -> dict[str, float]:
    from orchestrator.plan.from_file import plan_file
    from orchestrator.run import launch
    from orchestrator.run.stop import stop

    plan = plan_file(hosts_file)
    busy0, own0 = busy_cpu_seconds(), time.process_time()
    t0 = time.perf_counter()
    result = launch.start(plan, str(hosts_file), launch.StartOptions(timeout=180, op_timeout=60))
    seconds = time.perf_counter() - t0
    sample = {"seconds": seconds, "orchestrator_cpu": time.process_time() - own0,
              "busy_cpu": busy_cpu_seconds() - busy0,
              "uploaded": float(sum(o.uploaded for o in result.outcomes.values()))}
    stopped = stop(result.record, grace=1.0, purge=True)
    if not all(s.ok for s in stopped.values()):
        raise RuntimeError(f"stop left processes behind: {stopped}")
    return sample


def _ssh_floor(hosts_file: Path, rounds: int = 5) -> float:
    """Busy CPU per host (s) of a connection plus one bare interpreter start, to every host at once."""
    from orchestrator.plan.from_file import plan_file
    from orchestrator.transport.factory import transport_for

    hosts = plan_file(hosts_file).hosts

    def one(host: Any) -> None:
        transport = transport_for(host)
        try:
            if not transport.run([host.python, "-S", "-c", "pass"], timeout=30).ok:
                raise RuntimeError(f"`python -S -c pass` failed on {host.name}")
        finally:
            transport.close()

    samples = []
    with ThreadPoolExecutor(len(hosts)) as pool:
        for _ in range(rounds):
            busy0 = busy_cpu_seconds()
            list(pool.map(one, hosts))
            time.sleep(0.2)  # sshd tears the sessions down after the client has gone: count that too
            samples.append((busy_cpu_seconds() - busy0) / len(hosts))
    return statistics.median(samples)


def run(trials: int, many: int) -> dict[str, Any]:
    from testkit import sshd

    machines = sshd.start_machines(many)
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-start-") as d:
            os.environ["TFCLUSTER_STATE_DIR"] = str(Path(d) / "state")
            # The user's program is `sleep`, shipped with one synced file (the "script" a user edits).
            script = Path(d) / "train.py"
            script.write_text("# v0\n")
            training = {"command": "sleep 60", "max_restarts": 0, "sync": ["train.py"]}
            files = {
                1: machines.hosts_toml(Path(d) / "one.toml", roles=[["ps", "worker"]], training=training),
                many: machines.hosts_toml(Path(d) / "many.toml", roles=[["ps", "worker"]] * many,
                                          training=training),
            }
            # Cold: the 1-host run ships m0's cache first; the many-host cold run still ships to the
            # other hosts (and finds m0's cache warm), so it is reported, not compared.
            cold = {n: _trial(files[n]) for n in (1, many)}
            warm: dict[int, list[dict[str, float]]] = {1: [], many: []}
            for _ in range(trials):
                for n in (1, many):
                    warm[n].append(_trial(files[n]))
            # Edited: the synced file changes before every start (a user's edit loop): one upload and a
            # new code tree per host, tfcluster's own package already compiled there.
            edited: dict[int, list[dict[str, float]]] = {1: [], many: []}
            for i in range(max(3, trials // 2)):
                for n in (1, many):
                    script.write_text(f"# v{i + 1}-{n}\n")
                    edited[n].append(_trial(files[n]))
            ssh_floor = _ssh_floor(files[many])
    finally:
        machines.close()
        sshd.stop_all()
    cores = os.cpu_count() or 1

    def med(n: int, key: str) -> float:
        return statistics.median(s[key] for s in warm[n])

    seconds = medians({n: [s["seconds"] for s in v] for n, v in warm.items()})
    ratio = seconds[many] / seconds[1]
    busy = {n: med(n, "busy_cpu") for n in warm}
    own = {n: med(n, "orchestrator_cpu") for n in warm}
    floor = {n: busy[n] / cores for n in warm}
    separate = (max(seconds[1], own[many]), seconds[1] + (own[many] - own[1]))  # best, worst
    per_host_busy = (busy[many] - busy[1]) / (many - 1)
    return {
        "benchmark": "start",
        "method": "orchestrator.run.launch.start to every task running, real sshd on loopback, `sleep` tasks, "
                  "ps+worker per host; warm = code already in the host's content-hash cache",
        "machine": {"cpus": cores, "python": sys.version.split()[0], "platform": platform.platform()},
        "trials": trials,
        "hosts": [1, many],
        "warm_seconds": {str(n): [round(s["seconds"], 3) for s in v] for n, v in warm.items()},
        "warm_median_seconds": {str(n): round(v, 3) for n, v in seconds.items()},
        "cold_seconds": {str(n): round(v["seconds"], 3) for n, v in cold.items()},
        "cold_files_uploaded": {str(n): int(v["uploaded"]) for n, v in cold.items()},
        "edited_median_seconds": {str(n): round(statistics.median(s["seconds"] for s in v), 3)
                                  for n, v in edited.items()},
        "edited_files_uploaded_per_host": {str(n): statistics.median(s["uploaded"] for s in v) / n
                                           for n, v in edited.items()},
        "warm_files_uploaded": int(sum(s["uploaded"] for v in warm.values() for s in v)),  # should stay 0
        "warm_median_orchestrator_cpu_seconds": {str(n): round(v, 3) for n, v in own.items()},
        "warm_median_machine_busy_cpu_seconds": {str(n): round(v, 3) for n, v in busy.items()},
        "cpu_floor_seconds": {str(n): round(v, 3) for n, v in floor.items()},
        "fanout_efficiency": {str(n): round(floor[n] / seconds[n], 2) for n in warm},
        "busy_cpu_per_extra_host_ms": round(per_host_busy * 1000, 1),
        "orchestrator_cpu_per_extra_host_ms": round((own[many] - own[1]) / (many - 1) * 1000, 1),
        "ssh_connect_and_python_busy_cpu_per_host_ms": round(ssh_floor * 1000, 1),
        "separate_machines_estimate_seconds": [round(x, 3) for x in separate],  # [best, worst]
        "separate_machines_estimate_ratio": [round(x / seconds[1], 2) for x in separate],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio < TARGET_RATIO,
        "measured_at": now_utc(),
    }


def to_markdown(result: dict[str, Any]) -> str:
    many = str(result["hosts"][1])
    cores = result["machine"]["cpus"]
    lines = [
        f"# start: 1 host vs {many} hosts",
        "",
        result["method"] + ".",
        "",
        "| hosts | warm median (s) | warm trials (s) | after an edit of the synced script, median (s) "
        "| cold (s) | cold files uploaded |",
        "|---|---|---|---|---|---|",
    ]
    for n in ("1", many):
        lines.append(f"| {n} | {result['warm_median_seconds'][n]} | "
                     f"{', '.join(str(x) for x in result['warm_seconds'][n])} | {result['edited_median_seconds'][n]} | "
                     f"{result['cold_seconds'][n]} | {result['cold_files_uploaded'][n]} |")
    lines += ["", "Warm: the code tree is on the host already. After an edit: one file uploaded per host and a "
              "new code tree linked from the cache (tfcluster's own package, byte-compiled once, is reused). "
              "Cold: fresh workdirs, every file shipped and the package compiled on each host."]
    own, busy = result["warm_median_orchestrator_cpu_seconds"], result["warm_median_machine_busy_cpu_seconds"]
    floor, eff = result["cpu_floor_seconds"], result["fanout_efficiency"]
    lines += ["", f"| hosts | orchestrator CPU (s) | machine-wide busy CPU (s) | floor: busy / {cores} cores (s) "
              "| fan-out efficiency (floor / wall) |", "|---|---|---|---|---|"]
    for n in ("1", many):
        lines.append(f"| {n} | {own[n]} | {busy[n]} | {floor[n]} | {eff[n]} |")
    verdict = "meets" if result["meets_target"] else "MISSES"
    lines += [
        "",
        f"Ratio {many}/1 (warm medians): **{result['ratio']}**, target < {result['target_ratio']}: "
        f"{verdict} the target.",
        "",
        f"Every extra host costs {result['busy_cpu_per_extra_host_ms']} ms of busy CPU, of which "
        f"{result['orchestrator_cpu_per_extra_host_ms']} ms is the orchestrator's. The least any start "
        f"must do on a host, one SSH connection that starts one bare Python interpreter, costs "
        f"{result['ssh_connect_and_python_busy_cpu_per_host_ms']} ms per host when all {many} hosts do it at "
        f"once (sshd, the login shell, Paramiko, the interpreter): on one machine playing {many} hosts on "
        f"{cores} cores, that alone is "
        f"{float(many) * result['ssh_connect_and_python_busy_cpu_per_host_ms'] / cores:.0f} ms of the "
        f"{many}-host wall time, against {result['warm_median_seconds']['1'] * 1000:.0f} ms for the whole "
        "1-host start. The remote side of every host competes for the same cores, so the ratio here is "
        "bounded by CPU, not by the fan-out (efficiency near 1.0 means the fan-out is as parallel as the "
        "cores allow).",
        "",
        "Separate machines (estimate, not measured; only the orchestrator's CPU stays serial): between "
        f"{result['separate_machines_estimate_seconds'][0]} s ({result['separate_machines_estimate_ratio'][0]}x "
        "one host: that CPU overlaps the remote work) and "
        f"{result['separate_machines_estimate_seconds'][1]} s ({result['separate_machines_estimate_ratio'][1]}x: "
        "it does not).",
        "",
        footer(cores, result["load_average_at_end"], result["measured_at"], python=result["machine"]["python"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_start")
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--hosts", type=int, default=16)
    args = parser.parse_args()
    result = run(args.trials, args.hosts)
    publish("start", result, to_markdown(result))


if __name__ == "__main__":
    main()
