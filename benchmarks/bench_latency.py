"""Reading a run at the speed of one SSH round trip (issue 24): the whole CLI, as a user or a script calls
it, next to one OpenSSH round trip to the same machines.

Method: real OpenSSH sshd processes on loopback addresses (testkit/sshd.py), one per host, each host with
its own workdir. Two runs are started through the CLI: a 3-host and a 16-host run whose tasks are `sleep`
(a user `command`). Each round times, in a fresh process each, from outside (wall):
- `ssh host true` (OpenSSH's client, `-F /dev/null`, the test key, BatchMode) to the first machine: the
  reference;
- `tfcluster status RUN --json` and `tfcluster dash RUN --once --json` of each run;
- `python -c pass` (this venv's interpreter), the start-up reference, and `tfcluster --help`, `tfcluster
  ls` and `tfcluster plan HOSTS` (idle rounds only).
Within a round the order alternates (reference first, then last); a warm-up round is not counted (it
also writes the bytecode caches an installed package has). Idle rounds first; then a 3-host
TensorFlow run (the built-in `mlp`, between-graph, 1 ps and 2 workers, on the first 3 machines) trains
and the same rounds are taken under its load: the status of that TensorFlow run itself and of the
16-host run beside it (the machines are one kernel: the load is every host's). The share of the cores
busy during the load rounds is recorded, as is the machine's load average. Medians.

    python -m benchmarks.bench_latency [--rounds 5] [--hosts 3 16] [--out DIR]

Writes benchmarks/results/latency.json and latency.md (or into --out, for a trial run).
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

from benchmarks.common import load_record, now_utc, publish, write_results

CLI = str(Path(sys.executable).parent / "tfcluster")
TARGETS = {"idle": 1.5, "load": 2.0}  # status and dash --once, over one `ssh host true`
STARTUP_TARGET = 6.0  # --help, ls and plan over `python -c pass`
READS = ("status", "dash --once")
STARTUP = ("--help", "ls", "plan")
TF_TRAINING = {"model": "mlp", "batch_size": 32, "steps": 100_000_000, "progress_interval": 1.0,
               "checkpoint_every_secs": 3600.0}


def _wall(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Latency:
    def __init__(self, machines: Any, tmp: Path) -> None:
        self.m = machines
        self.tmp = tmp
        # As an installed package runs: its bytecode cached (written by the warm-up round if missing).
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env |= {"TFCLUSTER_STATE_DIR": str(tmp / "state"), "COLUMNS": "200"}

    def hosts_file(self, name: str, n: int, training: dict[str, object], client: str | None = None) -> Path:
        """The first n machines: a ps on the first, a worker on each of the others (`client`: their [ssh]
        client, else the default)."""
        roles = [["ps"]] + [["worker"]] * (n - 1)
        extra = {i: {"ssh": {"client": client}} for i in range(n)} if client else None
        return self.m.hosts_toml(self.tmp / f"hosts-{name}.toml", roles=roles, training=training, host_extra=extra)

    def ssh_true(self) -> None:
        m = self.m
        subprocess.run(["ssh", "-F", "/dev/null", "-i", m.identity_file, "-p", str(m.port), "-o",
                        f"UserKnownHostsFile={m.known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o",
                        "BatchMode=yes", f"{m.user}@{m.addresses[0]}", "true"], stdin=subprocess.DEVNULL,
                       check=True, timeout=60)

    def cli(self, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        proc = subprocess.run([CLI, *args], env=self.env, cwd=self.tmp, capture_output=True, text=True,
                              timeout=600, check=False)
        if proc.returncode not in ok:
            raise RuntimeError(f"tfcluster {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-800:]}")
        return proc.stdout

    def python_pass(self) -> None:
        subprocess.run([sys.executable, "-c", "pass"], env=self.env, check=True, timeout=60)


def _round(bench: Latency, runs: dict[str, str], plan_file: Path | None, first: bool) -> dict[str, float]:
    """One round: the references and every command once, references first or last."""
    refs: list[tuple[str, Callable[[], None]]] = [("ssh host true", bench.ssh_true)]
    ours: list[tuple[str, Callable[[], None]]] = []
    for label, run_id in runs.items():
        ours.append((f"{label} status", lambda r=run_id: bench.cli("status", r, "--json")))
        ours.append((f"{label} dash --once", lambda r=run_id: bench.cli("dash", r, "--once", "--json")))
    if plan_file is not None:
        refs.append(("python -c pass", bench.python_pass))
        ours += [("--help", lambda: bench.cli("--help")), ("ls", lambda: bench.cli("ls")),
                 ("plan", lambda: bench.cli("plan", str(plan_file)))]
    order = refs + ours if first else ours + refs
    return {name: _wall(fn) for name, fn in order}


def _rounds(bench: Latency, runs: dict[str, str], plan_file: Path | None, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, seconds in _round(bench, runs, plan_file, first=r % 2 == 0).items():
            out.setdefault(name, []).append(seconds)
    return out


def _busy_share() -> Callable[[], float]:
    """The share of all cores busy from now to the call of the returned function."""
    import psutil

    psutil.cpu_percent(interval=None)
    return lambda: round(psutil.cpu_percent(interval=None) / 100.0, 3)


def _training(bench: Latency, run_id: str, timeout: float = 600.0) -> None:
    """Until every worker of the TensorFlow run reports a rate (it trains: the load is on)."""
    import json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = json.loads(bench.cli("status", run_id, "--json", ok=(0, 1, 3)))
        if all(t["steps_per_s"] for t in st["tasks"] if t["job"] == "worker"):
            return
        time.sleep(2.0)
    raise RuntimeError(f"the TensorFlow run {run_id} did not train within {timeout:g}s")


def run(rounds: int, counts: list[int]) -> dict[str, Any]:
    from testkit import sshd

    machines = sshd.start_machines(max(counts))
    samples: dict[str, dict[str, list[float]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-latency-") as d:
            bench = Latency(machines, Path(d))
            started: list[str] = []
            try:
                idle: dict[str, str] = {}
                for n in counts:
                    hosts = bench.hosts_file(f"sleep-{n}", n, {"command": "sleep 3600", "max_restarts": 0})
                    bench.cli("start", str(hosts), "--run", f"sleep-{n}")
                    started.append(f"sleep-{n}")
                    idle[f"{n} hosts"] = f"sleep-{n}"
                plan_file = bench.hosts_file("plan", counts[-1], {"command": "sleep 3600"})
                _rounds(bench, idle, plan_file, 1)  # warm-up, not counted: page cache, host keys, sshd
                before_idle = load_record()["load_after"]
                samples["idle"] = _rounds(bench, idle, plan_file, rounds)
                bench.cli("start", str(bench.hosts_file("tf", 3, TF_TRAINING)), "--run", "tf-3")
                started.append("tf-3")
                _training(bench, "tf-3")
                under = {"3 hosts": "tf-3", **{label: r for label, r in idle.items() if not label.startswith("3 ")}}
                busy = _busy_share()
                before_load = load_record()["load_after"]
                samples["load"] = _rounds(bench, under, None, rounds)
                busy_share = busy()
            finally:
                for run_id in started:
                    bench.cli("stop", run_id, "--grace", "2", ok=(0, 1))
    finally:
        machines.close()
        sshd.stop_all()
    return _figures(samples, rounds, counts, before_idle, before_load, busy_share)


def _figures(samples: dict[str, dict[str, list[float]]], rounds: int, counts: list[int], before_idle: list[float],
             before_load: list[float], busy_share: float) -> dict[str, Any]:
    medians = {phase: {name: round(statistics.median(v), 3) for name, v in by_name.items()}
               for phase, by_name in samples.items()}
    ratios: dict[str, dict[str, float]] = {}
    for phase, med in medians.items():
        ssh = med["ssh host true"]
        ratios[phase] = {name: round(v / ssh, 2) for name, v in med.items()
                         if any(name.endswith(r) for r in READS)}
    startup = {name: round(medians["idle"][name] / medians["idle"]["python -c pass"], 2) for name in STARTUP}
    meets = {phase: all(x <= TARGETS[phase] for x in ratios[phase].values()) for phase in ratios}
    return {
        "benchmark": "latency",
        "method": "whole CLI (a fresh `tfcluster` process per command) next to one `ssh host true` to the same "
                  "machines (real sshd per loopback host); --help, ls and plan next to `python -c pass`; a 3-host "
                  "and a 16-host run of sleep tasks; under load, a 3-host TensorFlow run (mlp, between-graph) "
                  "training on the same cores, its own status read and the 16-host run's; interleaved rounds "
                  "(the references first, then last), medians",
        "rounds": rounds, "hosts": counts,
        "medians_s": medians,
        "samples_s": {phase: {k: [round(x, 3) for x in v] for k, v in by_name.items()} for phase, by_name in samples.items()},
        "ratios_to_ssh_true": ratios,
        "startup_ratios_to_python_pass": startup,
        "targets": {"idle": f"status and dash --once <= {TARGETS['idle']}x one ssh host true",
                    "load": f"<= {TARGETS['load']}x under a training load",
                    "startup": f"--help, ls, plan <= {STARTUP_TARGET}x python -c pass"},
        "meets": {**meets, "startup": all(x <= STARTUP_TARGET for x in startup.values())},
        "load_average_before_idle_rounds": before_idle,
        "load_average_before_load_rounds": before_load,
        "cores_busy_share_during_load_rounds": busy_share,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "openssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False).stderr.strip()},
        "measured_at": now_utc(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    lines = [f"# latency: reading a run next to one SSH round trip ({', '.join(map(str, r['hosts']))} hosts)", "",
             r["method"] + ".", ""]
    for phase, med in r["medians_s"].items():
        title = "idle" if phase == "idle" else f"under a training load ({r['cores_busy_share_during_load_rounds']:.0%} " \
                                                "of the cores busy)"
        lines += [f"## {title}", "", "| command | median | / ssh host true |", "|---|---|---|"]
        for name, v in med.items():
            ratio = r["ratios_to_ssh_true"][phase].get(name)
            lines.append(f"| {name} | {v:.3f} s | {'' if ratio is None else f'{ratio}x'} |")
        target = TARGETS[phase]
        lines += ["", f"Target <= {target}x: {'meets' if r['meets'][phase] else 'MISSES'} it.", ""]
    lines += ["## start-up", "", "| command | / python -c pass |", "|---|---|"]
    lines += [f"| tfcluster {name} | {v}x |" for name, v in r["startup_ratios_to_python_pass"].items()]
    lines += ["", f"Target <= {STARTUP_TARGET}x: {'meets' if r['meets']['startup'] else 'MISSES'} it.", "",
              f"Machine: {r['machine']['cpus']} CPUs, Python {r['machine']['python']}, {r['machine']['openssh']}; "
              f"load average before the idle rounds {r['load_average_before_idle_rounds']}, before the load rounds "
              f"{r['load_average_before_load_rounds']}; measured {r['measured_at']}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_latency")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--out", type=Path, help="write here instead of benchmarks/results (a trial run)")
    args = parser.parse_args()
    result = run(args.rounds, sorted(args.hosts))
    if args.out is not None:
        for path in write_results("latency", result, to_markdown(result), args.out):
            print(f"wrote {path}")
    else:
        publish("latency", result, to_markdown(result))


if __name__ == "__main__":
    main()
