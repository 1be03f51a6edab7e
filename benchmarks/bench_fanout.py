"""The whole CLI against an OpenSSH client fan-out on the same hosts (issue 15): what a user would time.

Method: real OpenSSH sshd processes on 1, 16 and 64 loopback addresses (testkit/sshd.py), each host with
its own workdir, all sessions with HOME set to a throwaway directory and SHLVL left alone, so bash (the
login shell sshd starts for every command) decides about ~/.bashrc exactly as for any user: it reads it
for every command sshd runs (non-interactive, SHLVL < 2, SSH_CLIENT set). Two variants, interleaved:
`plain` (no ~/.bashrc) and `slow-bashrc` (~/.bashrc is `sleep 0.3`, a stand-in for conda or pyenv
initialisation). Both sides pay the same rc cost per remote command; tfcluster pays it once per host
per command because it runs one remote command per host per command.

Per round, host count and variant, in a fresh process each, timed from outside (wall) with its CPU
(user + system, children included):
- `ssh`: N `ssh host python -c pass` in parallel (OpenSSH's client with its defaults: `-F /dev/null`,
  the test key, BatchMode), the reference the targets are judged against;
- `ssh-curve25519`: the same with `-o KexAlgorithms=curve25519-sha256`, the key exchange Paramiko uses
  (OpenSSH 9's default, sntrup761x25519, costs its client ~70 ms of CPU per connection);
- `tfcluster check HOSTS --json`, `tfcluster start HOSTS` (`sleep` tasks, ps+worker per host, the code
  already in every host's cache: warm), `tfcluster status RUN`, `tfcluster stop RUN`.
Rounds are interleaved (host counts, variants, and the order of ssh vs tfcluster alternate); medians.
The machine's load average is recorded before, after and at every round: this machine is shared, and
on one machine playing N hosts the hosts' own work competes for the same cores.

    python -m benchmarks.bench_fanout [--rounds 5] [--hosts 1 16 64]

Writes benchmarks/results/fanout.json and fanout.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import busy_cpu_seconds, load_note, now_utc, publish

VARIANTS = {"plain": None, "slow-bashrc": "sleep 0.3\n"}
COMMANDS = ("check", "start", "status", "stop")
REFERENCES = ("ssh", "ssh-curve25519")
TARGET_RATIO = 1.2
TARGET_HOSTS = 16
TARGET_COMMANDS = ("check", "start")
CLI = str(Path(sys.executable).parent / "tfcluster")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sshd_cpu(machines: Any) -> float:
    """CPU of every sshd and what ran under it (sessions, shells, probes), reaped or running."""
    import psutil

    total = 0.0
    for pid in machines.sshd_pids():
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _timed(fn: Callable[[], None]) -> tuple[float, float]:
    cpu0, t0 = _children_cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, _children_cpu() - cpu0


def _problems(stdout: str) -> str:
    """The not-ready hosts of a `check --json` report (or the end of the output)."""
    try:
        report = json.loads(stdout)
    except ValueError:
        return stdout[-1500:]
    return "; ".join(f"{h['host']}: {p}" for h in report.get("hosts", []) for p in h.get("problems", []))


class Bench:
    def __init__(self, machines: Any, tmp: Path) -> None:
        self.m = machines
        self.tmp = tmp
        self.env = {**os.environ, "TFCLUSTER_STATE_DIR": str(tmp / "state"), "COLUMNS": "200"}
        (tmp / "train.py").write_text("# the user's script\n")
        self.files: dict[int, Path] = {}
        self.port_conflicts: list[str] = []

    def hosts_file(self, n: int, client: str | None = None) -> Path:
        """n hosts, a ps and a worker each (`client`: their [ssh] client, else the default)."""
        if client is not None:
            path: Path = self.m.hosts_toml(self.tmp / f"hosts-{n}-{client}.toml", roles=[["ps", "worker"]] * n,
                                           training={"command": "sleep 600", "max_restarts": 0, "sync": ["train.py"]},
                                           host_extra={i: {"ssh": {"client": client}} for i in range(n)})
            return path
        if n not in self.files:
            self.files[n] = self.m.hosts_toml(self.tmp / f"hosts-{n}.toml", roles=[["ps", "worker"]] * n, training={
                "command": "sleep 600", "max_restarts": 0, "sync": ["train.py"]})
        return self.files[n]

    def ssh(self, n: int, extra: tuple[str, ...] = ()) -> None:
        m = self.m
        base = ["ssh", "-F", "/dev/null", "-i", m.identity_file, "-p", str(m.port), "-o",
                f"UserKnownHostsFile={m.known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", *extra]
        procs = [subprocess.Popen([*base, f"{m.user}@{a}", sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
                 for a in m.addresses[:n]]
        codes = [p.wait(timeout=300) for p in procs]
        if any(codes):
            raise RuntimeError(f"ssh fan-out failed: exit codes {codes}")

    def cli(self, *args: str) -> None:
        proc = subprocess.run([CLI, *args], env=self.env, cwd=self.tmp, capture_output=True, text=True,
                              timeout=600, check=False)
        problems = _problems(proc.stdout) if args[0] == "check" and proc.returncode == 1 else ""
        if problems and all(" is not free" in p for p in problems.split("; ")):
            # The task ports were free when the hosts file was written; other work on this shared machine
            # may bind one since. The check itself ran to the end on every host: counted, not fatal.
            self.port_conflicts.append(problems)
            return
        if proc.returncode != 0:
            raise RuntimeError(f"tfcluster {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-800:]}"
                               f"{_problems(proc.stdout)}")

    def one(self, n: int, run: str, ssh_first: bool) -> dict[str, tuple[float, float]]:
        hosts = str(self.hosts_file(n))
        out: dict[str, tuple[float, float]] = {}
        refs = [("ssh", lambda: self.ssh(n)),
                ("ssh-curve25519", lambda: self.ssh(n, ("-o", "KexAlgorithms=curve25519-sha256")))]
        ours = [("check", lambda: self.cli("check", hosts, "--json")), ("start", lambda: self.cli("start", hosts, "--run", run)),
                ("status", lambda: self.cli("status", run)), ("stop", lambda: self.cli("stop", run))]
        for name, fn in (refs + ours) if ssh_first else (ours + refs):
            out[name] = _timed(fn)
        return out


def run(rounds: int, counts: list[int]) -> dict[str, Any]:
    from testkit import sshd

    load_before = os.getloadavg()
    home = Path(tempfile.mkdtemp(prefix="tfcluster-bench-home-"))
    machines = sshd.start_machines(max(counts), home=str(home))
    samples: dict[str, dict[int, dict[str, list[tuple[float, float]]]]] = {v: {n: {} for n in counts} for v in VARIANTS}
    loads: list[float] = []
    other_share: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-fanout-") as d:
            bench = Bench(machines, Path(d))
            for n in counts:  # warm-up, not counted: every host's code cache, this machine's page cache
                bench.cli("start", str(bench.hosts_file(n)), "--run", f"warm-{n}")
                bench.cli("stop", f"warm-{n}", "--purge")
            for n in counts:
                bench.cli("check", str(bench.hosts_file(n)), "--json")
            for r in range(rounds):
                loads.append(os.getloadavg()[0])
                busy0, ours0, wall0 = busy_cpu_seconds(), _children_cpu() + _sshd_cpu(machines), time.monotonic()
                for n in counts:
                    variants = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
                    for variant in variants:
                        rc = VARIANTS[variant]
                        if rc is None:
                            (home / ".bashrc").unlink(missing_ok=True)
                        else:
                            (home / ".bashrc").write_text(rc)
                        got = bench.one(n, f"r{r}-{n}-{variant}", ssh_first=(r + n) % 2 == 0)
                        for name, figures in got.items():
                            samples[variant][n].setdefault(name, []).append(figures)
                ours = _children_cpu() + _sshd_cpu(machines) - ours0
                cores = os.cpu_count() or 1
                other_share.append(max(0.0, busy_cpu_seconds() - busy0 - ours) / ((time.monotonic() - wall0) * cores))
            loads.append(os.getloadavg()[0])
            port_conflicts = bench.port_conflicts
    finally:
        machines.close()
        sshd.stop_all()
        shutil.rmtree(home, ignore_errors=True)
    load_after = os.getloadavg()
    medians: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for variant, by_n in samples.items():
        for n, by_name in by_n.items():
            med: dict[str, dict[str, Any]] = {name: {"wall_s": round(statistics.median(w for w, _ in v), 3),
                          "cpu_s": round(statistics.median(c for _, c in v), 3),
                          "wall_samples_s": [round(w, 3) for w, _ in v]} for name, v in by_name.items()}
            medians.setdefault(variant, {})[str(n)] = med
            ratios.setdefault(variant, {})[str(n)] = {
                ref: {cmd: round(med[cmd]["wall_s"] / med[ref]["wall_s"], 2) for cmd in COMMANDS} for ref in REFERENCES}
    judged = {f"{variant} {cmd}": ratios[variant][str(TARGET_HOSTS)]["ssh"][cmd]
              for variant in VARIANTS for cmd in TARGET_COMMANDS} if TARGET_HOSTS in counts else {}
    judged_curve = {f"{variant} {cmd}": ratios[variant][str(TARGET_HOSTS)]["ssh-curve25519"][cmd]
                    for variant in VARIANTS for cmd in TARGET_COMMANDS} if TARGET_HOSTS in counts else {}
    ssh_version = subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False).stderr.strip()
    return {
        "benchmark": "fanout",
        "method": "whole CLI (a fresh `tfcluster` process per command) vs N parallel `ssh host python -c pass`, "
                  "real sshd per loopback host, per-host workdirs, throwaway HOME (bash reads its ~/.bashrc for "
                  "every command sshd runs), warm code cache, interleaved rounds, medians",
        "rounds": rounds,
        "hosts": counts,
        "variants": {v: rc or "no ~/.bashrc" for v, rc in VARIANTS.items()},
        "medians": medians,
        "ratios_to_reference": ratios,
        "target": f"check and start at {TARGET_HOSTS} hosts <= {TARGET_RATIO}x the OpenSSH fan-out (ssh), both variants",
        "target_ratios": judged,
        "meets_target": bool(judged) and all(x <= TARGET_RATIO for x in judged.values()),
        "ratios_vs_curve25519_ssh": judged_curve,
        "meets_target_vs_curve25519_ssh": bool(judged_curve) and all(x <= TARGET_RATIO for x in judged_curve.values()),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                    "openssh": ssh_version},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "load_average_1m_per_round": [round(x, 2) for x in loads],
        "check_runs_with_a_task_port_taken_by_other_work": port_conflicts,
        "other_work_share_of_cores_per_round": [round(x, 3) for x in other_share],
        "load_note": load_note(os.cpu_count(), load_before[0], other_share),
        "measured_at": now_utc(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    lines = [f"# fan-out: the whole CLI vs an OpenSSH client fan-out, {', '.join(map(str, r['hosts']))} hosts", "",
             r["method"] + ".", ""]
    for variant, by_n in r["medians"].items():
        lines += [f"## {variant} ({r['variants'][variant].strip()})", "",
                  "| hosts | ssh | ssh (curve25519) | check | start | status | stop | check/ssh | start/ssh | "
                  "status/ssh | stop/ssh |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for n, med in by_n.items():
            ratio = r["ratios_to_reference"][variant][n]["ssh"]
            walls = " | ".join(f"{med[k]['wall_s']:.2f} s" for k in ("ssh", "ssh-curve25519", *COMMANDS))
            lines.append(f"| {n} | {walls} | " + " | ".join(f"{ratio[c]}x" for c in COMMANDS) + " |")
        lines += ["", "CPU (user+system of the command's processes, median): " + "; ".join(
            f"{n} hosts: " + ", ".join(f"{k} {med[k]['cpu_s']:.2f} s" for k in ("ssh", "ssh-curve25519", *COMMANDS))
            for n, med in by_n.items()) + ".", ""]
    verdict = "meets" if r["meets_target"] else "MISSES"
    lines += [f"Target: {r['target']}: {verdict} it ("
              + ", ".join(f"{k} {v}x" for k, v in r["target_ratios"].items()) + ").",
              "",
              "Against OpenSSH with Paramiko's key exchange (curve25519, not OpenSSH's default): "
              + ", ".join(f"{k} {v}x" for k, v in r["ratios_vs_curve25519_ssh"].items())
              + (" (within 1.2x)" if r["meets_target_vs_curve25519_ssh"] else " (NOT within 1.2x)") + ".",
              "",
              f"Machine: {r['machine']['cpus']} CPUs, Python {r['machine']['python']}, {r['machine']['openssh']}; "
              f"load average {', '.join(map(str, r['load_average_before']))} before, "
              f"{', '.join(map(str, r['load_average_after']))} after, 1-minute load at each round "
              f"{', '.join(map(str, r['load_average_1m_per_round']))} (these count the benchmark's own hosts: 64 "
              f"hosts are ~200 processes at once); other work's share of all cores per round "
              f"{', '.join(f'{x:.0%}' for x in r['other_work_share_of_cores_per_round'])}; measured {r['measured_at']}. "
              + r["load_note"],
              ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_fanout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    result = run(args.rounds, args.hosts)
    publish("fanout", result, to_markdown(result))


if __name__ == "__main__":
    main()
