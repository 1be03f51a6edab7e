"""Shipping large files with `start`, side by side with `scp` of the same file to the same hosts (issue 20).

Method: real OpenSSH sshd on 3 loopback addresses (testkit/sshd.py), each machine with its OWN workdir
(per-host workdirs, as machines with local disks: each host receives its own copy, as each scp does). A
file of random bytes (64 MB, 400 MB, 2 GB) is the only entry of `[training] sync`; the tasks are `sleep`.
Per size, interleaved rounds of:
- `scp`: `scp -q` of the file to the 3 hosts in parallel (OpenSSH's client, the test key), timed from
  outside; each scp's peak memory (`/usr/bin/time -f %M`);
- `start-cold`: `tfcluster start` with the file not yet in any host's cache (the host caches keep
  tfcluster's own package: only the file travels), then `tfcluster stop` (its files kept: a purge would
  clean the cache of the file, which no run would then use, and the warm start would ship it again);
- `start-warm`: the same start again right after (the file cached on every host: nothing travels).
Shipping time = start-cold minus start-warm of the same round: what the file adds to a start. Memory:
the `start` process's peak RSS (`/usr/bin/time -f %M`) and every host launcher's peak (VmHWM of the
`python -S -c <launcher>` processes, sampled every 20 ms until they exec the supervisor), cold minus warm.
The local content hashes are remembered between starts (orchestrator/run/file_hashes.py), so rounds after
the first do not hash the file again; the first round's figures, which do, are kept too.

Also measured (`verify`): what a warm start costs more with 10,000 small files or one 1 GB file in `sync`
(the host checks every cached file's fixed mtime and hard-links it into the run) than with none; and
(`interrupt`) SIGINT, SIGTERM and SIGHUP sent to `start` while it ships 400 MB: the time to its exit, its
exit code, and what is left in the hosts' workdirs a second later.

    python -m benchmarks.bench_ship [--rounds 3] [--sizes 64 400 2048] [--hosts 3]

Writes benchmarks/results/ship.json and ship.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import footer, now_utc, publish, require_quiet
from testkit import sshd

TARGET_RATIO = 1.1
TARGET_MEMORY_MB = 64
LAUNCHER_MARK = "The per-host start program"


def _make_file(path: Path, mb: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS in kB from /usr/bin/time, stderr) of one command; raises when it fails."""
    t0 = time.perf_counter()
    res = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({res.returncode}): {res.stderr[-500:]}")
    return seconds, int(res.stderr.strip().splitlines()[-1]), res.stderr


class LauncherPeaks(threading.Thread):
    """The highest VmHWM of any launcher process seen while it runs (sampled every 20 ms)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kb = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []
                if len(cmd) >= 3 and cmd[-2] == "-c" and LAUNCHER_MARK in cmd[-1][:300]:
                    try:
                        for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                            if line.startswith("VmHWM:"):
                                self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                    except OSError:
                        pass
            time.sleep(0.02)


class Rig:
    def __init__(self, hosts: int, root: Path) -> None:
        self.machines = sshd.start_machines(hosts, shared_workdir=False)
        self.root = root
        self.env = {**os.environ, "TFCLUSTER_STATE_DIR": str(root / "state"), "COLUMNS": "200"}
        self.runs = 0
        self.kept: list[str] = []  # stopped runs whose files stay until `purge`

    def hosts_toml(self, sync: list[str], client: str | None = None) -> Path:
        """`client`: the hosts' [ssh] client (else the default)."""
        roles = [["worker"] for _ in self.machines.addresses]
        extra = {i: {"ssh": {"client": client}} for i in range(len(roles))} if client else None
        return self.machines.hosts_toml(self.root / f"hosts{'-' + client if client else ''}.toml", roles=roles,
                                        mode="multi-worker-mirrored", training={"command": "sleep 600", "sync": sync},
                                        host_extra=extra)

    def start_and_stop(self, hosts: Path) -> tuple[float, int, int]:
        """(seconds, start's peak kB, the launchers' peak kB) of one start, then a stop that keeps the run's
        files: the cache keeps what they use, so the next start of the same files finds them cached."""
        self.runs += 1
        run = f"ship-{self.runs}"
        peaks = LauncherPeaks()
        peaks.start()
        try:
            seconds, rss, _ = _timed([sys.executable, "-m", "tfcluster", "start", str(hosts), "--run", run,
                                      "--timeout", "600"], self.env)
        finally:
            peaks.done.set()
            peaks.join()
        _timed([sys.executable, "-m", "tfcluster", "stop", run, "--grace", "1"], self.env)
        self.kept.append(run)
        return seconds, rss, peaks.peak_kb

    def purge(self) -> None:
        """Remove the stopped runs' files (and, by stop's cache clean-up, what only they used)."""
        for run in self.kept:
            _timed([sys.executable, "-m", "tfcluster", "stop", run, "--purge", "--grace", "1"], self.env)
        self.kept.clear()

    def forget(self) -> None:
        """Every host's cache without the user's files (their blobs and trees); tfcluster's package stays."""
        self.purge()
        for i in range(len(self.machines.addresses)):
            cache = Path(self.machines.workdir(i)) / "cache"
            if not cache.is_dir():
                continue
            shutil.rmtree(cache / "trees", ignore_errors=True)
            package = {p.stat().st_ino for p in (cache / "packages").rglob("*") if p.is_file()}
            for blob in cache.iterdir():
                if blob.is_file() and len(blob.name) == 64 and blob.stat().st_ino not in package:
                    blob.unlink()

    def scp(self, path: Path) -> tuple[float, int]:
        m = self.machines
        t0 = time.perf_counter()
        procs = [subprocess.Popen(["/usr/bin/time", "-f", "%M", "scp", "-q", "-P", str(m.port), "-i", m.identity_file,
                                   "-o", f"UserKnownHostsFile={m.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                                   "-o", "BatchMode=yes", str(path), f"{m.user}@{a}:{m.workdir(i)}/scp-copy"],
                                  stderr=subprocess.PIPE, text=True)
                 for i, a in enumerate(m.addresses)]
        peaks = []
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"scp failed: {err[-300:]}")
            peaks.append(int(err.strip().splitlines()[-1]))
        seconds = time.perf_counter() - t0
        for i in range(len(m.addresses)):
            Path(m.workdir(i), "scp-copy").unlink()
        return seconds, max(peaks)


def measure_size(rig: Rig, mb: int, rounds: int) -> dict[str, Any]:
    big = rig.root / f"data-{mb}mb.bin"
    _make_file(big, mb)
    hosts = rig.hosts_toml([big.name])
    samples: list[dict[str, Any]] = []
    try:
        for r in range(rounds):
            require_quiet(f"bench_ship {mb} MB round {r + 1}")
            rig.forget()
            order = ["scp", "start"] if r % 2 == 0 else ["start", "scp"]
            sample: dict[str, Any] = {"round": r + 1}
            for what in order:
                if what == "scp":
                    sample["scp_s"], sample["scp_peak_kb"] = rig.scp(big)
                else:
                    sample["cold_s"], sample["cold_start_kb"], sample["cold_launcher_kb"] = rig.start_and_stop(hosts)
                    sample["warm_s"], sample["warm_start_kb"], sample["warm_launcher_kb"] = rig.start_and_stop(hosts)
            sample["ship_s"] = sample["cold_s"] - sample["warm_s"]
            sample["ratio"] = sample["ship_s"] / sample["scp_s"]
            samples.append(sample)
            print(f"{mb} MB round {r + 1}: {sample}", flush=True)
    finally:
        rig.purge()
        big.unlink()
    later = samples[1:] or samples
    med = {k: statistics.median(s[k] for s in later) for k in samples[0] if k != "round"}
    return {"mb": mb, "samples": samples, "medians_after_first_round": med,
            "start_extra_mb": (med["cold_start_kb"] - med["warm_start_kb"]) / 1024,
            "launcher_extra_mb": (med["cold_launcher_kb"] - med["warm_launcher_kb"]) / 1024}


def measure_interrupt(rig: Rig, rounds: int, mb: int = 400) -> dict[str, Any]:
    """Seconds from a signal to `start`'s exit while it ships (a `.tmp-` file in a host's cache), the exit
    code, and whether anything of the run is left in any host's workdir."""
    big = rig.root / "interrupted.bin"
    _make_file(big, mb)
    hosts = rig.hosts_toml([big.name])
    caches = [Path(rig.machines.workdir(i)) / "cache" for i in range(len(rig.machines.addresses))]
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for r in range(rounds):
            require_quiet(f"bench_ship interrupt round {r + 1}")
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                rig.forget()
                rig.runs += 1
                run = f"ship-{rig.runs}"
                proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "start", str(hosts), "--run", run],
                                        env=rig.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 120
                while not any(c.is_dir() and any(f.name.startswith(".tmp-") for f in c.iterdir()) for c in caches):
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("start never shipped (or ended before the signal)")
                    time.sleep(0.01)
                sent = time.perf_counter()
                proc.send_signal(sig)
                code = proc.wait(timeout=120)
                seconds = time.perf_counter() - sent
                time.sleep(1.0)  # the launchers' clean-up may end just after start does: looked at a second later
                left = [str(p) for i in range(len(caches)) for p in Path(rig.machines.workdir(i), "runs").glob(f"{run}*")]
                left += [str(p) for c in caches for p in c.iterdir() if p.name.startswith(".tmp-")]
                out.setdefault(sig.name, []).append({"seconds": seconds, "exit": code, "left": left})
                print(f"interrupt {sig.name}: {seconds:.2f} s, exit {code}, left {left}", flush=True)
    finally:
        big.unlink()
    return {"mb": mb, "samples": out,
            "median_s": {k: statistics.median(x["seconds"] for x in v) for k, v in out.items()},
            "max_s": {k: max(x["seconds"] for x in v) for k, v in out.items()},
            "exit_codes": sorted({x["exit"] for v in out.values() for x in v}),
            "anything_left": any(x["left"] for v in out.values() for x in v)}


def measure_verify(rig: Rig, rounds: int) -> dict[str, Any]:
    """Warm starts with no sync, 10,000 small files, one 1 GB file: what the host's check costs."""
    small = rig.root / "many"
    small.mkdir()
    for i in range(10_000):
        (small / f"f{i:05d}.txt").write_text(f"{i}\n")
    big = rig.root / "one-gb.bin"
    _make_file(big, 1024)
    variants = {"none": [], "10000 small files": [small.name], "1 GB file": [big.name]}
    out: dict[str, list[float]] = {k: [] for k in variants}
    for sync in variants.values():  # warm every host once
        rig.start_and_stop(rig.hosts_toml(sync))
    for r in range(rounds):
        require_quiet(f"bench_ship verify round {r + 1}")
        for name, sync in (variants.items() if r % 2 == 0 else reversed(list(variants.items()))):
            out[name].append(rig.start_and_stop(rig.hosts_toml(sync))[0])
    rig.purge()
    shutil.rmtree(small)
    big.unlink()
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"samples_s": out, "median_s": med, "extra_s": {k: med[k] - med["none"] for k in med}}


def markdown(sizes: list[dict[str, Any]], verify: dict[str, Any], interrupt: dict[str, Any], hosts: int,
             rounds: int) -> str:
    lines = [f"# Shipping large files: `tfcluster start` beside `scp` to the same {hosts} hosts in parallel",
             "", f"Interleaved rounds per size: {rounds}; medians of the rounds after the first (the first hashes the "
             "file locally: its figures are in ship.json). Per-host workdirs (each host its own disk).", "",
             "| size | scp (parallel) | start cold | start warm | shipping = cold - warm | shipping / scp | "
             "start peak extra | launcher peak extra | scp peak |", "|---|---|---|---|---|---|---|---|---|"]
    for s in sizes:
        m = s["medians_after_first_round"]
        lines.append(f"| {s['mb']} MB | {m['scp_s']:.2f} s | {m['cold_s']:.2f} s | {m['warm_s']:.2f} s | "
                     f"{m['ship_s']:.2f} s | **{m['ratio']:.2f}x** | {s['start_extra_mb']:.1f} MB | "
                     f"{s['launcher_extra_mb']:.1f} MB | {m['scp_peak_kb'] / 1024:.1f} MB |")
    lines += ["", f"Targets: shipping at most {TARGET_RATIO}x parallel scp; start and launchers under {TARGET_MEMORY_MB} MB "
              "above their idle size (the warm start's peak).", "",
              "## What the host's check of its cache costs a warm start", "",
              "| sync | warm start (median) | more than no sync |", "|---|---|---|"]
    for name, sec in verify["median_s"].items():
        lines.append(f"| {name} | {sec:.2f} s | {verify['extra_s'][name]:+.2f} s |")
    lines += ["", f"## A signal while `start` ships {interrupt['mb']} MB to {hosts} hosts", "",
              "| signal | to exit (median) | slowest | exit codes | anything left on a host |", "|---|---|---|---|---|"]
    for name, med in interrupt["median_s"].items():
        lines.append(f"| {name} | {med:.2f} s | {interrupt['max_s'][name]:.2f} s | "
                     f"{sorted({x['exit'] for x in interrupt['samples'][name]})} | "
                     f"{'yes' if any(x['left'] for x in interrupt['samples'][name]) else 'nothing'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_ship")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 400, 2048])
    ap.add_argument("--hosts", type=int, default=3)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tfcluster-bench-ship-"))
    rig = Rig(args.hosts, root)
    try:
        sizes = [measure_size(rig, mb, args.rounds) for mb in args.sizes]
        verify = measure_verify(rig, args.rounds)
        interrupt = measure_interrupt(rig, args.rounds)
    finally:
        rig.machines.close()
        shutil.rmtree(root, ignore_errors=True)
    data = {"hosts": args.hosts, "rounds": args.rounds, "sizes": sizes, "verify": verify, "interrupt": interrupt,
            "measured_at": now_utc()}
    md = markdown(sizes, verify, interrupt, args.hosts, args.rounds)
    md += "\n" + footer(os.cpu_count(), [round(x, 2) for x in os.getloadavg()], now_utc(), sys.version.split()[0]) + "\n"
    publish("ship", data, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
