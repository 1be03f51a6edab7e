"""The two SSH clients side by side (issue 36): `[ssh] client = "paramiko"` and `client = "openssh"` (the
system's ssh, shared connections), each next to what a user would time with OpenSSH itself.

It drives the existing benchmarks' rigs with the client as a parameter (benchmarks/bench_latency.py
Latency, bench_fanout.py Bench, bench_ship.py Rig): real sshd per loopback host (testkit/sshd.py), the
whole CLI in a fresh process per command, interleaved rounds (the order alternates), medians.
- reads: `status RUN --json` and `dash RUN --once --json` of a 3-host and a 16-host run of `sleep` tasks
  per client, next to one `ssh host true`; for openssh with a warm master (the previous command's) and
  cold (every master closed just before); idle, then under a training load (a 3-host TensorFlow run of
  the built-in mlp on the same cores, as bench_latency).
- start: `start` of 16 hosts (ps+worker each, code cached: warm) per client, next to the OpenSSH fan-out
  (16 parallel `ssh host python -c pass`, bench_fanout's reference); openssh with the masters opened by a
  `check` just before (warm) and without (cold).
- channel: one command's SSH part in this process (no CLI start-up): a new transport's first command per
  client (openssh through its warm master), next to `ssh host true`.
- ship: a file of 64 MB, 400 MB, 2 GB as the only `sync` entry to 3 hosts with their own disks: start
  with the file not cached minus start with it cached (bench_ship's method), per client, next to 3
  parallel `scp` of the file.
The machine's load is recorded before and after every section and the share of the cores other work
used; this machine is shared (2 cores).

    python -m benchmarks.bench_openssh [--rounds 3] [--hosts 3 16] [--sizes 64 400 2048] [--provisional]

Writes benchmarks/results/openssh.json and openssh.md (publish(): refused on a busy machine; with
--provisional they are written anyway, marked so, with the load they were measured under).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_fanout import Bench
from benchmarks.bench_latency import TF_TRAINING, Latency, _busy_share, _training
from benchmarks.bench_ship import Rig, _make_file
from benchmarks.common import now_utc, publish, write_results
from benchmarks.openssh_report import CLIENTS, to_markdown
from orchestrator.transport.openssh_args import CONTROL_DIR_ENV
from testkit import sshd
from testkit.ssh_masters import close_ssh_masters

READ_TARGET = {"idle": 0.75, "load": 1.0}  # openssh, warm master: status and dash --once of 3 hosts / ssh true
START_TARGET = 1.2  # openssh, warm masters: start of 16 hosts / the OpenSSH fan-out
SHIP_TARGET = 1.1  # openssh: shipping 2 GB / parallel scp


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _med(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _wall(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _close_masters() -> None:
    close_ssh_masters(os.environ[CONTROL_DIR_ENV])


# --- reads ---------------------------------------------------------------------------------------------
def _read_args(cmd: str, run_id: str) -> list[str]:
    return ["status", run_id, "--json"] if cmd == "status" else ["dash", run_id, "--once", "--json"]


def _read_round(bench: Latency, runs: dict[tuple[int, str], str], first: bool) -> dict[str, float]:
    """Every read once with warm masters (the references first or last), then openssh's reads cold."""
    for (_, client), run_id in runs.items():  # not timed: every openssh host's master alive (warm)
        if client == "openssh":
            bench.cli("status", run_id, "--json", ok=(0, 1, 3))
    warm: list[tuple[str, Callable[[], object]]] = [("ssh host true", bench.ssh_true)]
    for (n, client), run_id in runs.items():
        for cmd in ("status", "dash --once"):
            name = f"{n} hosts {client} {cmd}" + (" (warm)" if client == "openssh" else "")
            warm.append((name, functools.partial(bench.cli, *_read_args(cmd, run_id), ok=(0, 1, 3))))
    out = {name: _wall(fn) for name, fn in (warm if first else warm[1:] + warm[:1])}
    for (n, client), run_id in runs.items():
        if client != "openssh":
            continue
        for cmd in ("status", "dash --once"):
            _close_masters()  # not timed: the command opens its masters itself
            out[f"{n} hosts openssh {cmd} (cold)"] = _wall(functools.partial(bench.cli, *_read_args(cmd, run_id),
                                                                             ok=(0, 1, 3)))
    return out


def measure_reads(rounds: int, counts: list[int], load: bool) -> dict[str, Any]:
    machines = sshd.start_machines(max(counts))
    samples: dict[str, dict[str, list[float]]] = {}
    loads: dict[str, list[float]] = {"before_idle": _load()}
    busy_share = None
    started: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-openssh-") as d:
            bench = Latency(machines, Path(d))
            runs: dict[tuple[int, str], str] = {}
            for n in counts:
                for client in CLIENTS:
                    hosts = bench.hosts_file(f"sleep-{n}-{client}", n, {"command": "sleep 3600", "max_restarts": 0},
                                             client=client)
                    run_id = f"sleep-{n}-{client}"
                    bench.cli("start", str(hosts), "--run", run_id)
                    started.append(run_id)
                    runs[(n, client)] = run_id
            _read_round(bench, runs, True)  # warm-up, not counted
            for r in range(rounds):
                for name, s in _read_round(bench, runs, r % 2 == 0).items():
                    samples.setdefault("idle", {}).setdefault(name, []).append(s)
            loads["after_idle"] = _load()
            if load:
                bench.cli("start", str(bench.hosts_file("tf", 3, TF_TRAINING)), "--run", "tf-3")
                started.append("tf-3")
                _training(bench, "tf-3")
                busy = _busy_share()
                loads["before_load"] = _load()
                for r in range(rounds):
                    for name, s in _read_round(bench, runs, r % 2 == 0).items():
                        samples.setdefault("load", {}).setdefault(name, []).append(s)
                busy_share = busy()
                loads["after_load"] = _load()
            for run_id in started:
                bench.cli("stop", run_id, "--grace", "2", ok=(0, 1, 3))
    finally:
        _close_masters()
        machines.close()
    medians = {phase: {k: _med(v) for k, v in by.items()} for phase, by in samples.items()}
    ratios = {phase: {k: round(v / med["ssh host true"], 2) for k, v in med.items() if k != "ssh host true"}
              for phase, med in medians.items()}
    judged = {phase: {k: v for k, v in r.items() if k.startswith(f"{min(counts)} hosts openssh") and "(warm)" in k}
              for phase, r in ratios.items()}
    return {"medians_s": medians, "ratios_to_ssh_true": ratios, "samples_s": samples, "loads": loads,
            "cores_busy_share_during_load_rounds": busy_share,
            "target": {p: f"openssh, warm master, {min(counts)} hosts: status and dash --once <= {t}x ssh host true"
                       for p, t in READ_TARGET.items()},
            "judged": judged, "meets": {p: all(v <= READ_TARGET[p] for v in j.values()) for p, j in judged.items()}}


# --- the SSH part alone ------------------------------------------------------------------------------
def measure_channel(rounds: int, samples_per_round: int = 5) -> dict[str, Any]:
    """One command's SSH part, in this process (no CLI start-up): a new transport's first `true` per
    client (openssh: through the warm master, its `-O check` included; paramiko: a new connection), next
    to `ssh host true`."""
    from orchestrator.config.schema import SSHOptions
    from orchestrator.transport.factory import SSH_CLIENT_BUILDERS

    machines = sshd.start_machines(1)
    m = machines
    opts = SSHOptions(user=m.user, port=m.port, identity_file=m.identity_file, known_hosts=m.known_hosts,
                      config_file="none", use_agent=False)
    samples: dict[str, list[float]] = {}
    loads = {"before": _load()}
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-openssh-channel-") as d:
            bench = Latency(machines, Path(d))

            def first_command(client: str) -> None:
                transport = SSH_CLIENT_BUILDERS[client]("m0", m.addresses[0], opts, False)
                try:
                    transport.run(["true"], check=True)
                finally:
                    transport.close()

            first_command("openssh")  # the master, warm from here on
            steps: list[tuple[str, Callable[[], object]]] = [
                ("ssh host true", bench.ssh_true),
                ("paramiko: new connection, one command", lambda: first_command("paramiko")),
                ("openssh: warm master, one command", lambda: first_command("openssh")),
            ]
            for r in range(rounds):
                for name, fn in steps if r % 2 == 0 else steps[::-1]:
                    for _ in range(samples_per_round):
                        samples.setdefault(name, []).append(_wall(fn))
    finally:
        _close_masters()
        machines.close()
    loads["after"] = _load()
    med = {k: _med(v) for k, v in samples.items()}
    return {"medians_s": med, "ratios_to_ssh_true": {k: round(v / med["ssh host true"], 2) for k, v in med.items()
                                                     if k != "ssh host true"},
            "samples_s": samples, "loads": loads}


# --- start ---------------------------------------------------------------------------------------------
def measure_start(rounds: int, n: int) -> dict[str, Any]:
    machines = sshd.start_machines(n, shared_workdir=False)
    samples: dict[str, list[float]] = {}
    loads = {"before": _load()}
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-openssh-start-") as d:
            bench = Bench(machines, Path(d))
            files = {c: str(bench.hosts_file(n, c)) for c in CLIENTS}
            for c in CLIENTS:  # warm-up: every host's code cache
                bench.cli("start", files[c], "--run", f"warm-{c}")
                bench.cli("stop", f"warm-{c}", "--purge")

            def start(client: str, run_id: str, warm: bool) -> float:
                if warm:
                    bench.cli("check", files[client], "--json")  # not timed: opens the masters
                seconds = _wall(lambda: bench.cli("start", files[client], "--run", run_id))
                bench.cli("stop", run_id)  # closes the masters too
                return seconds

            for r in range(rounds):
                steps: list[tuple[str, Callable[[], float]]] = [
                    ("ssh fan-out", lambda: _wall(lambda: bench.ssh(n))),
                    ("paramiko start", lambda r=r: start("paramiko", f"p{r}", False)),  # type: ignore[misc]
                    ("openssh start (warm)", lambda r=r: start("openssh", f"ow{r}", True)),  # type: ignore[misc]
                    ("openssh start (cold)", lambda r=r: start("openssh", f"oc{r}", False)),  # type: ignore[misc]
                ]
                for name, fn in steps if r % 2 == 0 else steps[::-1]:
                    samples.setdefault(name, []).append(fn())
    finally:
        _close_masters()
        machines.close()
    loads["after"] = _load()
    med = {k: _med(v) for k, v in samples.items()}
    ratios = {k: round(v / med["ssh fan-out"], 2) for k, v in med.items() if k != "ssh fan-out"}
    return {"hosts": n, "medians_s": med, "ratios_to_ssh_fan_out": ratios, "samples_s": samples, "loads": loads,
            "target": f"openssh, warm masters: start of {n} hosts <= {START_TARGET}x the OpenSSH fan-out",
            "meets": ratios["openssh start (warm)"] <= START_TARGET}


# --- ship ----------------------------------------------------------------------------------------------
def measure_ship(rounds: int, sizes: list[int], hosts: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {"hosts": hosts, "sizes": {}, "loads": {"before": _load()}}
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-openssh-ship-") as d:
        rig = Rig(hosts, Path(d))
        try:
            for mb in sizes:
                big = Path(d) / f"data-{mb}mb.bin"
                _make_file(big, mb)
                files = {c: rig.hosts_toml([big.name], client=c) for c in CLIENTS}
                samples: dict[str, list[float]] = {}
                for r in range(rounds):
                    steps = ["scp", *CLIENTS] if r % 2 == 0 else [*CLIENTS[::-1], "scp"]
                    for what in steps:
                        if what == "scp":
                            samples.setdefault("scp", []).append(rig.scp(big)[0])
                            continue
                        rig.forget()
                        cold = rig.start_and_stop(files[what])[0]
                        warm = rig.start_and_stop(files[what])[0]
                        samples.setdefault(f"{what} ship", []).append(cold - warm)
                    print(f"ship {mb} MB round {r + 1}: { {k: round(v[-1], 2) for k, v in samples.items()} }",
                          flush=True)
                rig.purge()
                big.unlink()
                med = {k: _med(v) for k, v in samples.items()}
                out["sizes"][str(mb)] = {"medians_s": med, "samples_s": samples,
                                         "ratios_to_scp": {c: round(med[f"{c} ship"] / med["scp"], 2) for c in CLIENTS}}
        finally:
            _close_masters()
            rig.machines.close()
    out["loads"]["after"] = _load()
    biggest = out["sizes"].get(str(max(sizes)), {})
    out["target"] = f"openssh: shipping {max(sizes)} MB <= {SHIP_TARGET}x parallel scp"
    out["meets"] = bool(biggest) and biggest["ratios_to_scp"]["openssh"] <= SHIP_TARGET
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_openssh")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 400, 2048])
    parser.add_argument("--sections", nargs="+", default=["reads", "channel", "start", "ship"])
    parser.add_argument("--merge", action="store_true", help="keep the other sections of the results file")
    parser.add_argument("--no-load", action="store_true", help="skip the reads under a TensorFlow training load")
    parser.add_argument("--provisional", action="store_true",
                        help="write the results even on a busy machine, marked provisional with the load")
    parser.add_argument("--out", type=Path, help="write here instead of benchmarks/results (a trial run)")
    args = parser.parse_args()
    os.environ[CONTROL_DIR_ENV] = tempfile.mkdtemp(prefix="tfc-bench-", dir="/tmp")  # short: Unix sockets
    loads_at_start = _load()
    result: dict[str, Any] = {
        "benchmark": "openssh",
        "method": "Whole CLI (a fresh `tfcluster` process per command), both `[ssh] client`s, real sshd per loopback "
                  "host, interleaved rounds (the order alternates), medians; references: one `ssh host true`, "
                  "the OpenSSH fan-out (N parallel `ssh host python -c pass`), N parallel `scp`. Cold openssh: "
                  "every shared connection closed just before the command.",
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "openssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False).stderr.strip()},
        "load_average_at_start": loads_at_start,
    }
    if args.merge:
        previous = (args.out or Path(__file__).parent / "results") / "openssh.json"
        if previous.exists():
            kept = json.loads(previous.read_text())
            result.update({k: v for k, v in kept.items() if k in ("reads", "channel", "start", "ship")})
    if args.provisional:
        result["provisional"] = (f"measured while the shared 2-core machine was loaded by other work (load average "
                                 f"{loads_at_start} at the start, each section's load below): ratios come from "
                                 "interleaved rounds, absolute times are inflated; rerun on a quiet machine")

    def save() -> None:
        result["measured_at"] = now_utc()
        if args.out is not None or args.provisional:
            for path in write_results("openssh", result, to_markdown(result), args.out or Path(__file__).parent / "results"):
                print(f"wrote {path}", flush=True)

    try:
        if "reads" in args.sections:
            result["reads"] = measure_reads(args.rounds, sorted(args.hosts), load=not args.no_load)
            save()
        if "channel" in args.sections:
            result["channel"] = measure_channel(args.rounds)
            save()
        if "start" in args.sections:
            result["start"] = measure_start(args.rounds, max(args.hosts))
            save()
        if "ship" in args.sections:
            result["ship"] = measure_ship(max(2, args.rounds - 1), sorted(args.sizes))
            save()
    finally:
        sshd.stop_all()
        shutil.rmtree(os.environ[CONTROL_DIR_ENV], ignore_errors=True)
    if args.out is None and not args.provisional:
        result["measured_at"] = now_utc()
        publish("openssh", result, to_markdown(result))


if __name__ == "__main__":
    main()
