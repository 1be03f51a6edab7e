"""One SSH connection and its first command, with and without TCP_QUICKACK on the orchestrator's socket.

Why: sshd leaves Nagle on for sessions without a pty and sends two small messages right after
authentication; a delayed ACK of the second held sshd's answer to the first channel open for ~40 ms
(Linux's delayed-ACK timer). Every command that opens a connection (start, status, stop, logs, dash,
check) pays that once per host. `orchestrator.transport.ssh_channel.QuickAckSocket` acknowledges at once.

Method: one real sshd on loopback (testkit/sshd.py). A round opens a fresh SSHTransport,
times the handshake (`connect`), then the first command (`true`: channel open, exec, exit status),
then a second command on the same connection, and closes. Rounds alternate the two variants (the
"without" variant replaces the socket wrapper by the plain socket), so both see the same machine load.

    python -m benchmarks.bench_connect [--rounds 20]

Writes benchmarks/results/connect.json and connect.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks.common import footer, now_utc, publish

VARIANTS = ("quickack", "plain")


def _round(settings: Any, variant: str) -> dict[str, float]:
    from orchestrator.transport import ssh as ssh_transport
    from orchestrator.transport.ssh_channel import QuickAckSocket

    original = QuickAckSocket.wrap
    if variant == "plain":
        QuickAckSocket.wrap = staticmethod(lambda sock: sock)  # type: ignore[method-assign]
    try:
        transport = ssh_transport.SSHTransport("m0", settings)
        t0 = time.perf_counter()
        transport.connect()
        t1 = time.perf_counter()
        first = transport.run_shell("true", timeout=30)
        t2 = time.perf_counter()
        second = transport.run_shell("true", timeout=30)
        t3 = time.perf_counter()
        transport.close()
    finally:
        QuickAckSocket.wrap = original  # type: ignore[method-assign]
    if not (first.ok and second.ok):
        raise RuntimeError("`true` failed")
    return {"connect": t1 - t0, "first_command": t2 - t1, "second_command": t3 - t2, "total": t2 - t0}


def run(rounds: int) -> dict[str, Any]:
    from orchestrator.config.schema import SSHOptions
    from orchestrator.config.ssh_config import resolve_ssh
    from testkit import sshd

    machines = sshd.start_machines(1)
    try:
        options = SSHOptions(user=machines.user, port=machines.port, identity_file=machines.identity_file,
                             known_hosts=machines.known_hosts, config_file="none", use_agent=False)
        settings = resolve_ssh(machines.addresses[0], options)
        for variant in VARIANTS:  # warm-up: imports, sshd's first fork, page cache
            _round(settings, variant)
        samples: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for i in range(rounds):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                samples[variant].append(_round(settings, variant))
    finally:
        machines.close()
        sshd.stop_all()
    med = {v: {k: statistics.median(s[k] for s in samples[v]) for k in samples[v][0]} for v in VARIANTS}
    return {
        "benchmark": "connect",
        "rounds": rounds,
        "median_ms": {v: {k: round(x * 1000, 2) for k, x in med[v].items()} for v in VARIANTS},
        "first_command_ratio_plain_over_quickack": round(med["plain"]["first_command"] / med["quickack"]["first_command"], 1),
        "total_saved_ms": round((med["plain"]["total"] - med["quickack"]["total"]) * 1000, 1),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "measured_at": now_utc(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["median_ms"]
    lines = [
        "# connect: one SSH connection and its first command, TCP_QUICKACK on vs off",
        "",
        f"Real sshd on loopback, {r['rounds']} alternating rounds per variant, medians (ms).",
        "",
        "| variant | handshake | first command | second command | handshake + first command |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {m[v]['connect']} | {m[v]['first_command']} | {m[v]['second_command']} | "
                     f"{m[v]['total']} |")
    lines += [
        "",
        f"The first command takes **{r['first_command_ratio_plain_over_quickack']}x** as long without "
        f"TCP_QUICKACK; every fresh connection saves {r['total_saved_ms']} ms with it.",
        "",
        footer(r["cpus"], r["load_average_at_end"], r["measured_at"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_connect")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    result = run(args.rounds)
    publish("connect", result, to_markdown(result))


if __name__ == "__main__":
    main()
