"""The one JSON document of a run's state: `status --json`, `dash --once --json`, `status --watch --json`.

Built from what the reducer's last tick handed out (ClusterState: its TaskStates, hosts, PS traffic,
totals), so every command that prints a run as JSON prints the same fields with the same values.
"""

from __future__ import annotations

from typing import Any

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.task_state import task_sort_key
from orchestrator.monitor.views import HostView, PsTraffic


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def _host(h: HostView, now: float) -> dict[str, Any]:
    return {
        "name": h.name, "reachable": h.reachable, "error": h.error, "supervisor": h.supervisor_state,
        "supervisor_alive": h.supervisor_alive, "supervisor_pid": h.supervisor_pid, "processes": h.processes,
        "outcome": h.outcome, "cpu_pct": _r(h.cpu_pct, 1), "mem_pct": _r(h.mem_pct, 1),
        "gpus": [{"index": g.index, "uuid": g.uuid, "util_pct": g.util_pct, "mem_used_mb": g.mem_used_mb,
                  "mem_total_mb": g.mem_total_mb, "temp_c": g.temp_c, "power_w": _r(g.power_w, 1)} for g in h.gpus],
        "age_s": None if h.t_heard is None else _r(now - h.t_heard, 2),
    }


def _traffic(p: PsTraffic, accounted: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": p.name, "host": p.host, "port": p.port, "measured_in_Bps": _r(p.measured_in, 1),
           "measured_out_Bps": _r(p.measured_out, 1)}
    if accounted:
        out |= {"accounted_in_Bps": _r(p.accounted_in, 1), "accounted_out_Bps": _r(p.accounted_out, 1),
                "peers": {ip: {"in_Bps": round(a, 1), "out_Bps": round(b, 1)} for ip, (a, b) in p.peers.items()}}
    return out


def state_json(st: ClusterState) -> dict[str, Any]:
    tasks = sorted(st.tasks.values(), key=task_sort_key)
    return {
        "run_id": st.run_id, "mode": st.mode, "cluster": st.cluster_name, "now": st.now,
        "interval_s": st.interval_s, "state": st.run_state, "failed": st.run_state == "failed",
        "malformed_lines": st.malformed,
        "totals": {"global_step": st.global_step, "loss": _r(st.loss, 6), "steps_per_s": _r(st.steps_per_s),
                   "examples_per_s": _r(st.examples_per_s), "counts": st.counts},
        "tasks": [t.to_json() for t in tasks],
        "hosts": [_host(h, st.now) for h in sorted(st.hosts.values(), key=lambda h: h.name)],
        "ps": [_traffic(p, True) for p in sorted(st.ps.values(), key=lambda p: p.name)],
        "allreduce": [_traffic(p, False) for p in sorted(st.allreduce.values(), key=lambda p: p.name)],
        "log": [{"t": e.t, "kind": e.kind, "text": e.text} for e in list(st.log)[-50:]],
        **({"slurm": st.slurm} if st.slurm else {}),
    }
