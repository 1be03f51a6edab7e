"""The Markdown of benchmarks/bench_openssh.py's figures (benchmarks/results/openssh.md): each section's
table and its target's verdict, a shipping figure that cannot be one flagged INVALID, and what the figures
decide about the Paramiko path's scaffolding (issue 36 item 5)."""

from __future__ import annotations

from typing import Any

CLIENTS = ("paramiko", "openssh")

# --- report --------------------------------------------------------------------------------------------
# What the figures decide about the Paramiko path's scaffolding (issue 36 item 5): kept in the results file.
VERDICT = """\
## What the figures decide

- With `client = "openssh"` and a warm master one command's SSH part costs about a tenth of a plain `ssh host
  true` (the channel rows). The rest of a `status` or `dash --once` is the CLI's own start-up (`tfcluster ls`
  alone costs about one `ssh host true`: benchmarks/results/latency.md): no SSH client meets the 0.75x read
  target; the read path's imports must shrink (orchestrator.monitor.status imports pydantic), outside this issue.
- Cold, openssh pays OpenSSH's own connection (a dearer default key exchange than Paramiko's) and a master's start:
  a cold 16-host read costs more than Paramiko's; `check` (or any first command) warms the masters.
- The Paramiko scaffolding stays: the Paramiko path is the default and keeps its figures, and shards.py /
  start_shards.py (its crypto under one GIL), ssh_wire.py (the dashboard's streams at 128 hosts), QuickAckSocket
  and deferred_invoke.py pay for themselves there. The openssh path uses none of them but the sharding, which it
  does not need (ssh works in its own processes): a candidate to skip, to be measured on a quiet machine. Nothing
  is removed on figures taken on a loaded 2-core machine.
"""


def _ship_is_valid(ship: dict[str, Any]) -> bool:
    """Shipping = start with the file not cached minus start with it cached: a figure far below scp's means
    the cold start did not ship the file (a method or tree problem), not a fast client."""
    return all(s["medians_s"][f"{c} ship"] >= 0.2 * s["medians_s"]["scp"]
               for s in ship["sizes"].values() for c in CLIENTS)


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("meets" if ok else "MISSES")


def to_markdown(r: dict[str, Any]) -> str:
    lines = ["# openssh: the system's ssh (shared connections) beside Paramiko", "", r["method"], ""]
    if r.get("provisional"):
        lines += [f"**Provisional**: {r['provisional']}", ""]
    reads = r.get("reads")
    if reads:
        for phase, med in reads["medians_s"].items():
            busy = reads.get("cores_busy_share_during_load_rounds")
            title = "idle" if phase == "idle" else f"under a training load ({busy:.0%} of the cores busy)"
            lines += [f"## reads, {title}", "", "| command | median | / ssh host true |", "|---|---|---|"]
            for name, v in med.items():
                ratio = reads["ratios_to_ssh_true"][phase].get(name)
                lines.append(f"| {name} | {v:.3f} s | {'' if ratio is None else f'{ratio}x'} |")
            lines += ["", f"Target ({reads['target'][phase]}): {_verdict(reads['meets'][phase])} "
                      f"({', '.join(f'{k} {v}x' for k, v in reads['judged'][phase].items())}).", ""]
        lines += [f"Load average: {reads['loads']}.", ""]
    channel = r.get("channel")
    if channel:
        lines += ["## the SSH part alone (in process, no CLI start-up)", "", "| what | median | / ssh host true |",
                  "|---|---|---|"]
        lines += _median_rows(channel["medians_s"], channel["ratios_to_ssh_true"])
        lines += ["", f"Load average: {channel['loads']}.", ""]
    start = r.get("start")
    if start:
        lines += [f"## start of {start['hosts']} hosts", "", "| what | median | / ssh fan-out |", "|---|---|---|"]
        lines += _median_rows(start["medians_s"], start["ratios_to_ssh_fan_out"])
        lines += ["", f"Target ({start['target']}): {_verdict(start['meets'])}. Load average: {start['loads']}.", ""]
    ship = r.get("ship")
    if ship:
        lines += [f"## shipping to {ship['hosts']} hosts", "", "| size | scp | paramiko | openssh | paramiko/scp | "
                  "openssh/scp |", "|---|---|---|---|---|---|"]
        for mb, s in ship["sizes"].items():
            m = s["medians_s"]
            lines.append(f"| {mb} MB | {m['scp']:.2f} s | {m['paramiko ship']:.2f} s | {m['openssh ship']:.2f} s | "
                         f"{s['ratios_to_scp']['paramiko']}x | {s['ratios_to_scp']['openssh']}x |")
        if _ship_is_valid(ship):
            lines += ["", f"Target ({ship['target']}): {_verdict(ship['meets'])}. Load average: {ship['loads']}.", ""]
        else:
            lines += ["", f"**INVALID**: a start with the file not cached took about as long as one with it cached, "
                      "for both clients (shipping far below scp's time): the cold start did not ship the file as "
                      "measured (in the tree measured, a warm `start` too reported 93 of 94 files uploaded, so cold "
                      "and warm did comparable work; the cause was not investigated). No verdict on the target "
                      f"({ship['target']}). Load average: {ship['loads']}.", ""]
    lines += [VERDICT]
    lines += [f"Machine: {r['machine']['cpus']} CPUs, Python {r['machine']['python']}, {r['machine']['openssh']}; "
              f"measured {r['measured_at']}.", ""]
    return "\n".join(lines)


def _median_rows(medians: dict[str, float], ratios: dict[str, float]) -> list[str]:
    """`| what | median | ratio |` rows: each median with its ratio to the reference ("" where none)."""
    return [f"| {name} | {v:.3f} s | {'' if ratios.get(name) is None else f'{ratios[name]}x'} |"
            for name, v in medians.items()]
