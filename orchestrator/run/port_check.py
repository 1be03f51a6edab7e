"""`start`'s port check: the plan's ports are tried on their hosts while they prepare (training/launcher.py,
training/probes/port_probe.py), before the barrier, so a start whose ports another run (or program) holds is
refused before anything runs anywhere; with `start --auto-ports` the ports are re-planned from the free
ones the hosts offered in the same answer, and each host gets its new run.json with its `go`.

What is tried on a host: each of its tasks' TF ports on every interface (TensorFlow's gRPC server listens
on `*:port`) and its supervisor's control port on the address the supervisor listens on.
Re-planning keeps ports unique across the whole cluster (the plan rule: loopback machines share one
network stack), so each host offers as many free ports as the whole plan needs, from `[cluster]
base_port` up, and hosts take theirs in plan order, skipping what an earlier host took.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.errors import TfclusterError
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.repin import with_ports

MAX_OFFER = 4096  # free ports a host offers at most (the plan's count, up to this)


class PortsTaken(TfclusterError):
    """A port of the plan is in use on a host: nothing was started (exit 2, like any input that cannot run
    as written: the fix is `--auto-ports` or another `[cluster] base_port`)."""

    exit_code = 2


def ports_to_try(plan: ClusterPlan) -> dict[str, list[list[object]]]:
    """host -> [[label, address ("" = every interface), port], ...], as training/launcher.py takes them."""
    wanted: dict[str, list[list[object]]] = {h.name: [] for h in plan.hosts}
    for t in plan.tasks:
        if t.in_cluster:
            wanted[t.host].append([t.name, "", t.port])
    for h in plan.hosts:
        if h.control_port:
            wanted[h.name].append(["supervisor", h.dial_address or h.address, h.control_port])
    return wanted


def offer_count(plan: ClusterPlan) -> int:
    """How many free ports each host offers for a re-plan: enough for every port of the plan."""
    return min(MAX_OFFER, len(plan.tasks) + sum(1 for h in plan.hosts if h.control_port))


def refusal(taken: Mapping[str, list[tuple[str, int, str]]]) -> PortsTaken:
    """One line: the first taken port (host, port, whose), and how many more."""
    hosts = [name for name, ports in taken.items() if ports]
    host = hosts[0]
    label, port, _why = taken[host][0]
    more = sum(len(taken[h]) for h in hosts) - 1
    whose = "its supervisor" if label == "supervisor" else label
    also = f" (and {more} more port{'s' if more > 1 else ''} on {len(hosts)} host{'s' if len(hosts) > 1 else ''})" \
        if more else ""
    return PortsTaken(f"host {host}: port {port} ({whose}) is in use by another process{also}; nothing was started "
                      "(another run on these hosts? use `tfcluster start --auto-ports` or another [cluster] base_port)")


def replan(plan: ClusterPlan, offers: Mapping[str, list[int]]) -> ClusterPlan:
    """The plan with every port taken from its host's offer, unique across the cluster; a host without an
    offer (it failed to prepare, and the start goes on without it) keeps its ports."""
    used: set[int] = set()
    task_ports: dict[str, int] = {}
    control_ports: dict[str, int] = {}
    kept = [h for h in plan.hosts if h.name not in offers]  # not prepared (--allow-partial): not launched
    used.update(t.port for h in kept for t in plan.tasks_on(h.name))
    used.update(h.control_port for h in kept)
    for h in plan.hosts:
        if h.name not in offers:
            continue
        free = iter(p for p in offers[h.name] if p not in used)
        names = [t.name for t in plan.tasks_on(h.name)] + (["@control"] if h.control_port else [])
        for name in names:
            port = next(free, None)
            if port is None:
                raise PortsTaken(f"host {h.name}: not enough free ports from {plan_base(plan)} up for --auto-ports")
            used.add(port)
            if name == "@control":
                control_ports[h.name] = port
            else:
                task_ports[name] = port
    return with_ports(plan, task_ports, control_ports)


def plan_base(plan: ClusterPlan) -> int:
    """Where the plan's ports start (`[cluster] base_port`, as allocated): offers start there too."""
    ports = [t.port for t in plan.tasks] + [h.control_port for h in plan.hosts if h.control_port]
    return min(ports) if ports else 1024
