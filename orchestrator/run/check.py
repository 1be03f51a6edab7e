"""`check`: is every host of a plan ready to run it? One connection and one probe per host, in parallel.

Each host gets its own thread: it connects (the host's connect timeout), then runs ONE command, a
Python probe given to the host's `python` with `-c` (all values shell-quoted by the transport). The
command first prints the remote clock (`date`) on a line of its own (orchestrator/run/probe_stream.py reads
it, and gives a first import of TensorFlow a budget of its own), then the probe prints one JSON report: Python and
TensorFlow versions (and, for the built-in trainers and the TF2 modes, whether TensorFlow imports:
cached on the host), GPUs (`nvidia-smi -L`; for the built-in trainers also whether TensorFlow sees the
GPUs the plan gives the host's tasks: orchestrator/run/check_gpus.py), whether each planned port can be
bound, free disk (not ready when less than what `start` ships: the sync and tfcluster's package), whether
the workdir can be created and written as `start` will (a file is written there and removed), and the
workdir's id: hosts reporting the same id share it (orchestrator/run/shared_dirs.py). A slow or dead host
only delays its own row, never the others'.

The probe itself is training/probes/host_probe.py, sent as source (nothing is shipped to the host yet).
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from orchestrator.errors import HostError
from orchestrator.plan.checkpoints import checkpoint_hosts, shards_into_shared_dir
from orchestrator.plan.model import ClusterPlan, HostPlan, TaskPlan
from orchestrator.run.check_gpus import gpu_shortfall_problem, planned_gpu_indexes, tf_gpu_check
from orchestrator.run.inline_source import standalone_source
from orchestrator.run.probe_stream import DATE_COMMAND, read_probe
from orchestrator.run.shared_dirs import shared_workdirs, sharing_notes
from orchestrator.transport.base import Transport
from orchestrator.transport.fan_out import fan_out

TF_DISTRIBUTIONS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
    "tf-nightly", "tf-nightly-cpu",
)
LOW_DISK_BYTES = 1 << 30  # below this, warn: checkpoints and logs go to the workdir
CLOCK_WARN_S = 1.0  # telemetry ages and liveness compare remote timestamps with the local clock
_CONNECT_REASONS = ("refused", "timeout", "unreachable")
TF2_MODES = ("multi-worker-mirrored", "parameter-server-strategy")
ImportTf = Literal["always", "cached", "never"]

# The probe runs on the host as `python -c <its source>`: it is a real module, linted and tested here.
PROBE_SCRIPT = standalone_source("training.probes.host_probe")


def _major_minor(version: str | None) -> str | None:
    if not version:
        return None
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version


def local_tf_version() -> str | None:
    """The orchestrator's own TensorFlow version (from package metadata: no import), None if absent."""
    for dist in TF_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@dataclass
class HostCheck:
    host: str
    address: str
    python: str
    workdir: str
    reachable: bool = False
    auth: bool = False  # host key accepted and user authenticated
    failure: str | None = None  # HostError reason when connecting/probing failed
    python_found: bool = False
    python_version: str | None = None
    tf_version: str | None = None
    tf_matches: bool | None = None
    gpus_found: int | None = None
    gpus_planned: list[int] = field(default_factory=list)
    tf_gpus_checked: str = ""  # the CUDA_VISIBLE_DEVICES TensorFlow's GPUs were listed under ("" = not listed)
    tf_gpus_seen: int | None = None  # how many of them TensorFlow saw
    tf_gpu_cause: str | None = None  # why fewer, from TensorFlow's build and its own stderr
    ports: dict[int, str | None] = field(default_factory=dict)  # planned port -> None if free, else why not
    disk_free_bytes: int | None = None
    workdir_writable: bool | None = None
    workdir_id: str | None = None  # the same id on two hosts: they share the workdir (run/shared_dirs.py)
    machine_id: str | None = None
    checkpoint_dir_id: str | None = None  # shared_checkpoint_dir = true: the same on every writer
    clock_offset_s: float | None = None  # remote minus local
    clock_bounds_s: tuple[float, float] | None = None  # the true offset lies in this interval
    duration_s: float = 0.0
    problems: list[str] = field(default_factory=list)  # each makes the host not ready
    warnings: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ports"] = {str(p): v for p, v in self.ports.items()}
        data["ready"] = self.ready
        return data


@dataclass
class CheckReport:
    cluster: str
    orchestrator_tf: str | None
    tf_reference: str | None  # major.minor every host must have
    hosts: list[HostCheck]
    warnings: list[str]
    duration_s: float
    notes: list[str] = field(default_factory=list)  # shared workdirs, where checkpoints go

    @property
    def ready(self) -> bool:
        return all(h.ready for h in self.hosts)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "ready": self.ready,
            "orchestrator_tf": self.orchestrator_tf,
            "tf_reference": self.tf_reference,
            "warnings": self.warnings,
            "notes": self.notes,
            "shared_workdirs": [asdict(g) for g in shared_workdirs(self.hosts)],
            "duration_s": round(self.duration_s, 3),
            "hosts": [h.to_json() for h in self.hosts],
        }


def probe_argv(host: HostPlan, ports: Sequence[tuple[int, str]], *, import_tf: ImportTf = "never",
               checkpoint_dir: str | None = None, gpus: str = "", skip_keras: bool = False) -> list[str]:
    """The one command run on a host: remote clock first, then the probe under the host's python.
    `ports`: (port, address to bind, "" = every interface), as training/probes/port_probe.py tests them.
    `gpus`: the CUDA_VISIBLE_DEVICES to list TensorFlow's GPUs under when it is imported ("" = none).
    `skip_keras`: import it as a built-in model's task does, without Keras' eager load (training/task.py).
    `~/` in the python path means the remote home; a missing python exits 127 with a marker line."""
    args = json.dumps({
        "ports": [list(p) for p in ports], "workdir": host.workdir, "import_tf": import_tf,
        "tf_distributions": list(TF_DISTRIBUTIONS), "checkpoint_dir": checkpoint_dir, "gpus": gpus,
        "skip_keras": skip_keras,
    })
    script = (
        DATE_COMMAND + '\np=$1; shift\ncase $p in "~/"*) p="$HOME/${p#"~/"}";; esac\n'
        'command -v "$p" >/dev/null 2>&1 || { echo "tfcluster-probe: python not found: $p"; exit 127; }\n'
        'exec "$p" "$@"\n'
    )
    return ["/bin/sh", "-c", script, "sh", host.python, "-c", PROBE_SCRIPT, args]


def host_ports(host: HostPlan, tasks: Sequence[TaskPlan]) -> list[tuple[int, str]]:
    """What `check` tries to bind on a host: each TF task's port on every interface (TensorFlow listens
    there) and the supervisor's control port on the address it listens on."""
    ports = [(port, "") for port in sorted({t.port for t in tasks if t.in_cluster})]
    if host.control_port:
        ports.append((host.control_port, host.dial_address or host.address))
    return ports


def import_tf_mode(plan: ClusterPlan, force: bool) -> ImportTf:
    """`--import-tf` always imports; the built-in trainers and the TF2 modes need TensorFlow to import,
    so their check imports it (once per host, python and TensorFlow install: the probe caches it)."""
    if force:
        return "always"
    return "cached" if not plan.uses_user_command or plan.mode in TF2_MODES else "never"


def check_host(
    host: HostPlan, plan: ClusterPlan, transport: Transport, *, timeout: float, import_tf: bool = False,
    clock: Callable[[], float] = time.time, ship_bytes: int | None = None,
) -> HostCheck:
    """Connect and probe one host. Never raises for host faults: they become the row's problems.
    `ship_bytes`: what `start` writes into a workdir that has nothing cached (ship.shipped_bytes)."""
    tasks = plan.tasks_on(host.name)
    shared_ckpt = plan.training.checkpoint_dir if (shards_into_shared_dir(plan)
                                                   and host.name in checkpoint_hosts(plan)) else None
    result = HostCheck(
        host=host.name, address=host.address, python=host.python, workdir=host.workdir,
        gpus_planned=planned_gpu_indexes(tasks),
    )
    result.tf_gpus_checked, gpu_tasks = tf_gpu_check(plan, tasks)
    ports = host_ports(host, tasks)
    start = time.monotonic()
    try:
        connect = getattr(transport, "connect", None)
        if connect is not None:
            connect()
        result.reachable = result.auth = True
        argv = probe_argv(host, ports, import_tf=import_tf_mode(plan, import_tf), checkpoint_dir=shared_ckpt,
                          gpus=result.tf_gpus_checked,
                          skip_keras=not plan.uses_user_command and ":" not in plan.training.model)
        _probe(result, host, transport, argv, timeout=timeout, clock=clock)
        result.problems.extend(gpu_shortfall_problem(result, gpu_tasks))
        _compare_disk(result, ship_bytes)
    except HostError as exc:
        result.failure = exc.reason
        if exc.reason not in _CONNECT_REASONS:
            result.reachable = True
        result.problems.append(f"{exc.reason}: {exc.detail}" if exc.detail else exc.reason)
    finally:
        result.warnings.extend(getattr(transport, "warnings", []))
        result.duration_s = time.monotonic() - start
    return result


def _probe(
    result: HostCheck, host: HostPlan, transport: Transport, argv: list[str], *, timeout: float,
    clock: Callable[[], float],
) -> None:
    out = read_probe(host.name, transport, argv, timeout=timeout, clock=clock)
    if out.remote_clock > 0:
        # The remote clock was read between `sent` and `clock_line_at`: the offset lies in that
        # window; the output's one-way trip is short, so the late end is the estimate.
        result.clock_offset_s = out.remote_clock - out.clock_line_at
        result.clock_bounds_s = (out.remote_clock - out.clock_line_at, out.remote_clock - out.sent)
    body = [line for line in out.lines if line.strip()]
    if any(line.startswith("tfcluster-probe: python not found") for line in body):
        result.problems.append(f"python not found: {host.python}")
        return
    report: dict[str, Any] | None = None
    for line in reversed(body):
        try:
            report = json.loads(line)
            break
        except ValueError:
            continue
    if report is None:
        tail = (out.stderr_tail or "\n".join(body)).strip().splitlines()[-3:]
        result.problems.append(f"probe failed under {host.python}: " + " | ".join(tail) if tail else "no output")
        return
    _apply_report(result, report, host.control_port)


def _compare_disk(result: HostCheck, ship_bytes: int | None) -> None:
    """A workdir with less room than the files `start` ships: its start fails with "No space left on device"
    (unless the host holds them from an earlier start, and then the run's own files still need the room)."""
    free = result.disk_free_bytes
    if free is None:
        return
    if ship_bytes is not None and free < ship_bytes:
        result.problems.append(f"only {free / (1 << 20):.0f} MiB free in the workdir: start ships "
                               f"{ship_bytes / (1 << 20):.0f} MiB (the sync and tfcluster's package) to a host "
                               "that has none of it yet")
    elif free < LOW_DISK_BYTES:
        result.warnings.append(f"only {free / (1 << 20):.0f} MiB free in the workdir")


def _apply_report(result: HostCheck, report: dict[str, Any], control_port: int = 0) -> None:
    result.python_found = True
    result.python_version = report.get("python_version")
    if report.get("tf_found") and report.get("tf_version"):
        result.tf_version = report["tf_version"]
    elif report.get("tf_found"):
        result.tf_version = "unknown"
    else:
        detail = report.get("tf_error") or "not installed"
        result.problems.append(f"tensorflow not importable by {result.python}: {detail}")
    result.gpus_found = int(report.get("gpus") or 0)
    if report.get("tf_gpus_seen") is not None:
        result.tf_gpus_seen = int(report["tf_gpus_seen"])
        result.tf_gpu_cause = report.get("tf_gpu_cause")
    if report.get("gpu_error"):
        result.warnings.append(str(report["gpu_error"]))
    if result.gpus_planned and max(result.gpus_planned) >= result.gpus_found:
        result.problems.append(
            f"plan uses GPU {', '.join(map(str, result.gpus_planned))} but nvidia-smi lists {result.gpus_found}"
        )
    result.ports = {int(p): why for p, why in (report.get("ports") or {}).items()}
    for port, why in result.ports.items():
        if why:
            whose = " (this host's supervisor)" if port == control_port else ""
            result.problems.append(f"port {port}{whose} is not free: {why}")
    result.disk_free_bytes = report.get("disk_free_bytes")
    result.workdir_writable = report.get("workdir_writable")
    result.workdir_id, result.machine_id = report.get("workdir_id"), report.get("machine_id")
    if not result.workdir_writable:
        why = report.get("workdir_problem") or "not writable"
        result.problems.append(f"workdir {report.get('workdir', result.workdir)}: {why} (start could not use it)")
    result.checkpoint_dir_id = report.get("checkpoint_dir_id")
    if report.get("checkpoint_dir_problem"):
        result.problems.append(f"shared checkpoint_dir: {report['checkpoint_dir_problem']}")
    if result.clock_offset_s is not None and abs(result.clock_offset_s) > CLOCK_WARN_S:
        result.warnings.append(f"clock is {result.clock_offset_s:+.2f}s off the orchestrator's (run NTP)")


def _compare_tf(hosts: list[HostCheck], orchestrator_tf: str | None) -> str | None:
    """Set tf_matches on each host; returns the major.minor all must share."""
    versions = [_major_minor(h.tf_version) for h in hosts if h.tf_version and h.tf_version != "unknown"]
    reference = _major_minor(orchestrator_tf)
    if reference is None and versions:
        reference = Counter(versions).most_common(1)[0][0]
    for h in hosts:
        if h.tf_version is None or h.tf_version == "unknown" or reference is None:
            continue
        h.tf_matches = _major_minor(h.tf_version) == reference
        if not h.tf_matches:
            whose = "the orchestrator's" if orchestrator_tf else "the other hosts'"
            h.problems.append(f"TensorFlow {h.tf_version} does not match {whose} {reference}")
    return reference


def port_exposure_warning(plan: ClusterPlan) -> str:
    ports = sorted(t.port for t in plan.tasks)
    span = f"{ports[0]}-{ports[-1]}" if len(ports) > 1 else str(ports[0])
    return (
        f"TensorFlow task ports ({span}) listen unauthenticated on EVERY interface of each machine, "
        "whatever address the plan names: keep them firewalled from untrusted networks"
    )


def run_check(
    plan: ClusterPlan,
    transport_factory: Callable[[HostPlan], Transport],
    *,
    timeout: float = 30.0,
    import_tf: bool = False,
    orchestrator_tf: str | None = None,
    on_result: Callable[[HostCheck], None] | None = None,
    ship_bytes: int | None = None,
) -> CheckReport:
    """Check every host in parallel (transport.fan_out; sharded over processes beyond what one handles
    well). `on_result` sees each row as soon as it is done, in this process. `ship_bytes`: see check_host."""
    start = time.monotonic()

    def one(host: HostPlan) -> HostCheck:
        try:
            transport = transport_factory(host)
        except HostError as exc:
            return _failed_row(host, exc)
        try:
            return check_host(host, plan, transport, timeout=timeout, import_tf=import_tf, ship_bytes=ship_bytes)
        finally:
            transport.close()

    def done(name: str, row: HostCheck | HostError) -> None:
        if on_result is not None:
            on_result(row if isinstance(row, HostCheck) else _failed_row(by_name[name], row))

    by_name = {h.name: h for h in plan.hosts}
    results = fan_out(list(by_name), lambda name: one(by_name[name]), on_done=done, thread_name="check",
                      shardable=True)
    rows = [r if isinstance(r, HostCheck) else _failed_row(by_name[name], r) for name, r in results.items()]
    reference = _compare_tf(rows, orchestrator_tf)
    warnings = [port_exposure_warning(plan), *plan.warnings]
    notes = sharing_notes(plan, rows)
    return CheckReport(
        cluster=plan.cluster_name, orchestrator_tf=orchestrator_tf, tf_reference=reference, hosts=rows,
        warnings=warnings, duration_s=time.monotonic() - start, notes=notes,
    )


def _failed_row(host: HostPlan, exc: HostError) -> HostCheck:
    """The row of a host whose check could not even start."""
    row = HostCheck(host=host.name, address=host.address, python=host.python, workdir=host.workdir)
    row.failure = exc.reason
    row.problems.append(exc.one_line())
    return row
