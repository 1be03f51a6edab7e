"""The local run record: which runs exist, where, with which plan, so that `status`, `logs`, `stop`
and `dash` find a run from any terminal, even after the `start` process died.

One JSON file per run in platformdirs' user state dir (`TFCLUSTER_STATE_DIR` overrides it; tests
always set it to a temporary directory); the directory is 0700 and every file 0600 (a record holds
host names, users and paths). `RunRecord.from_json` is the one typed decoder: a record that is not
what `to_json` writes raises RecordError, and listings skip such a file with a one-line warning
naming it instead of failing (`RunSummary.from_json` reads only what `ls` shows and which run is
the latest: the same checks, but the plan is not decoded, which needs the schema); but a command given
no RUN refuses (naming the file) when a damaged record may be the newest: it never silently acts on an
older run instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, get_args

from orchestrator.errors import UsageError
from orchestrator.run import run_names
from orchestrator.run.run_names import RUN_NAME

if TYPE_CHECKING:
    from orchestrator.plan.model import ClusterPlan



new_run_id = run_names.new_run_id  # a run's name, where callers always found it


class _Listed(Protocol):
    @property
    def run_id(self) -> str: ...

    @property
    def created(self) -> float: ...


R = TypeVar("R", bound=_Listed)

STATE_DIR_ENV = "TFCLUSTER_STATE_DIR"
RecordStatus = Literal["starting", "started", "partial", "failed-to-start", "interrupted", "stopped", "purged",
                       "finished", "failed"]  # the last two: as `status` last found the run


class RecordError(ValueError):
    """A run record file that cannot be used (not JSON, or not a tfcluster record)."""


def state_dir() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        path = Path(override)
    else:
        from platformdirs import user_state_dir

        path = Path(user_state_dir("tfcluster"))
    return path / "runs"


@dataclass
class HostRecord:
    name: str
    workdir: str  # as the config gave it (may start with ~)
    run_dir: str = ""  # absolute, resolved on the host at start
    python: str = "python3"
    supervisor_pid: int | None = None
    started: bool = False  # the supervisor was launched here (stop must visit it)


@dataclass
class SlurmJob:
    """A run whose machines are a Slurm job's nodes (orchestrator.run.slurm_start)."""

    job_id: str
    submit_host: str = ""  # where sbatch, squeue, scontrol and srun run: "" = this machine, else [slurm] login
    state: str = ""  # Slurm's JobState when tfcluster last looked (PENDING, RUNNING, COMPLETED, TIMEOUT, ...)
    reason: str = ""  # what ended or holds the job, as tfcluster says it from Slurm's words ("time limit")


@dataclass
class RunRecord:
    run_id: str
    config_path: str
    cluster: str
    mode: str
    created: float
    plan: ClusterPlan
    hosts: list[HostRecord]
    status: RecordStatus = "starting"  # last known
    notes: list[str] = field(default_factory=list)
    # The `start` process that wrote "starting": when it is gone, the start was interrupted.
    start_pid: int | None = None
    start_machine: str = ""
    slurm: SlurmJob | None = None  # the run's Slurm job, if its machines are one
    # `tfcluster resize` history, oldest first: {"at": unix time, "added": [...], "removed": [...], "moved":
    # [...], "hosts_added": [...], "hosts_removed": [...], "restarted": [...]} (orchestrator/run/resize.py)
    resizes: list[dict[str, Any]] = field(default_factory=list)
    # A resize under way (or killed half-way): its new hosts, so that `stop` finds them (run/resize_pending.py)
    pending_resize: dict[str, Any] | None = None

    def host(self, name: str) -> HostRecord:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def replace_plan(self, plan: ClusterPlan) -> None:
        """The plan changed: before anything ran (`start --auto-ports` re-planned its ports), or by a resize."""
        self.plan = plan
        self.__dict__.pop("plan_json", None)

    @cached_property
    def plan_json(self) -> dict[str, Any]:
        """The plan as the record keeps it (compact: TF_CONFIG derived on load), encoded once: a record is
        saved at every phase of a start and the plan never changes."""
        return self.plan.to_json(compact=True)

    @property
    def shown_status(self) -> str:
        return shown_status(self.status, self.start_pid, self.start_machine)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "config_path": self.config_path, "cluster": self.cluster, "mode": self.mode,
            "created": self.created, "plan": self.plan_json, "hosts": [vars(h).copy() for h in self.hosts],  # flat: no asdict deep copy
            "status": self.status, "notes": list(self.notes), "start_pid": self.start_pid,
            "start_machine": self.start_machine, **({"slurm": vars(self.slurm).copy()} if self.slurm else {}),
            **({"resizes": [dict(r) for r in self.resizes]} if self.resizes else {}),
            **({"pending_resize": dict(self.pending_resize)} if self.pending_resize else {}),
        }

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """The inverse of to_json; RecordError (one line) for anything else."""
        from orchestrator.plan.model import ClusterPlan, PlanDecodeError

        summary = RunSummary.from_json(data)
        assert isinstance(data, dict)
        try:
            return cls(
                run_id=summary.run_id, config_path=_text(data["config_path"], "config_path"),
                cluster=summary.cluster, mode=summary.mode, created=summary.created,
                plan=ClusterPlan.from_json(data["plan"]), hosts=[decode_host(h) for h in data["hosts"]],
                status=summary.status, notes=[str(n) for n in data.get("notes", [])],
                start_pid=summary.start_pid, start_machine=summary.start_machine, slurm=_slurm_job(data.get("slurm")),
                resizes=_resizes(data.get("resizes", [])), pending_resize=_pending(data.get("pending_resize")),
            )
        except PlanDecodeError as exc:
            raise RecordError(f"its plan: {exc}") from None
        except KeyError as exc:
            raise RecordError(f"no {exc.args[0]!r} key") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{type(exc).__name__}: {str(exc)[:120]}") from None


def shown_status(status: str, start_pid: int | None, start_machine: str) -> str:
    """`status`, except a start whose process died half-way: `interrupted`, not `starting` forever."""
    if status == "starting" and start_pid is not None and start_machine == socket.gethostname():
        try:
            os.kill(start_pid, 0)
        except ProcessLookupError:
            return "interrupted"
        except PermissionError:
            pass
    return status


@dataclass(frozen=True)
class RunSummary:
    """What `ls` shows of a record, and what picks the latest run: its plan is checked, not decoded."""

    run_id: str
    cluster: str
    mode: str
    created: float
    hosts: tuple[str, ...]
    status: RecordStatus
    start_pid: int | None
    start_machine: str
    slurm: SlurmJob | None = None

    @property
    def shown_status(self) -> str:
        return shown_status(self.status, self.start_pid, self.start_machine)

    @classmethod
    def from_json(cls, data: object) -> RunSummary:
        if not isinstance(data, dict):
            raise RecordError(f"a record is a JSON object, not {type(data).__name__}")
        try:
            status = data.get("status", "starting")
            if status not in get_args(RecordStatus):
                raise RecordError(f"unknown status {status!r}")
            created = data["created"]
            if isinstance(created, bool) or not isinstance(created, int | float):
                raise RecordError(f"`created` is {type(created).__name__}, not a time")
            hosts, plan = data["hosts"], data["plan"]
            if not isinstance(hosts, list) or not all(isinstance(h, dict) for h in hosts):
                raise RecordError("`hosts` is not a list of objects")
            if not isinstance(plan, dict) or not isinstance(plan.get("tasks"), list):
                raise RecordError("its plan: not a tfcluster plan")
            start_pid = data.get("start_pid")
            _text(data["config_path"], "config_path")
            return cls(
                run_id=_text(data["run_id"], "run_id"), cluster=_text(data["cluster"], "cluster"),
                mode=_text(data["mode"], "mode"), created=float(created),
                hosts=tuple(_text(h.get("name"), "hosts.name") for h in hosts), status=cast(RecordStatus, status),
                start_pid=start_pid if isinstance(start_pid, int) else None,
                start_machine=str(data.get("start_machine", "")), slurm=_slurm_job(data.get("slurm")),
            )
        except KeyError as exc:
            raise RecordError(f"no {exc.args[0]!r} key") from None


def _text(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"`{key}` is {type(value).__name__}, not a string")
    return value


def _slurm_job(raw: object) -> SlurmJob | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecordError("`slurm` is not an object")
    return SlurmJob(job_id=_text(raw["job_id"], "slurm.job_id"), submit_host=_text(raw.get("submit_host", ""), "slurm"),
                    state=_text(raw.get("state", ""), "slurm.state"), reason=_text(raw.get("reason", ""), "slurm.reason"))


def _resizes(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise RecordError("`resizes` is not a list of objects")
    return [dict(r) for r in raw]


def _pending(raw: object) -> dict[str, Any] | None:
    if raw is not None and not isinstance(raw, dict):
        raise RecordError("`pending_resize` is not an object")
    return dict(raw) if raw else None


def decode_host(raw: object) -> HostRecord:
    if not isinstance(raw, dict):
        raise RecordError("a host entry is not an object")
    pid = raw.get("supervisor_pid")
    return HostRecord(
        name=_text(raw["name"], "hosts.name"), workdir=_text(raw["workdir"], "hosts.workdir"),
        run_dir=_text(raw.get("run_dir", ""), "hosts.run_dir"), python=_text(raw.get("python", "python3"), "python"),
        supervisor_pid=pid if isinstance(pid, int) else None, started=bool(raw.get("started", False)),
    )


def record_path(run_id: str) -> Path:
    return state_dir() / f"{run_id}.json"


class StateDirError(UsageError):
    """The run records cannot be written: the state directory cannot be made or written (read-only, a
    file where it goes). One line naming the directory, exit 2."""


def _unwritable(path: Path, exc: OSError) -> StateDirError:
    why = "a file is there, not a directory" if path.exists() and not path.is_dir() else exc.strerror or str(exc)
    return StateDirError(f"state directory {path}: cannot write run records there ({why}); "
                         f"make it writable or set {STATE_DIR_ENV} to a directory that is")


def _private_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)  # made by an older version, or by a umask we do not trust
    except OSError as exc:  # a file where a directory goes, a read-only parent
        raise _unwritable(path, exc) from None
    return path


def writable_state_dir() -> Path:
    """The records' directory, made if need be and proven writable (a file written and removed there), or
    StateDirError: `start` asks before anything reaches a host, so a run it could not record never starts."""
    directory = _private_dir(state_dir())
    probe = directory / f".writable.tmp{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        probe.unlink()
    except OSError as exc:
        raise _unwritable(directory, exc) from None
    return directory


def save(record: RunRecord) -> None:
    directory = _private_dir(state_dir())
    tmp = directory / f".{record.run_id}.json.tmp{os.getpid()}"
    try:
        # Compact: json uses its C encoder only without `indent` (2.5x faster for a 200-host plan, measured).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record.to_json(), separators=(",", ":")))
        os.replace(tmp, record_path(record.run_id))
    except OSError as exc:
        raise _unwritable(directory, exc) from None


def exists(run_id: str) -> bool:
    return record_path(run_id).exists()


def read(path: Path) -> RunRecord:
    """One record file; RecordError naming the file when it is unreadable or not a record."""
    return _read(path, RunRecord.from_json)


def _read(path: Path, decode: Callable[[object], R]) -> R:
    try:
        return decode(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc if isinstance(exc, RecordError) else f"not JSON ({type(exc).__name__})"
        raise RecordError(f"{path}: unreadable run record: {why}") from None


def load(run_id: str) -> RunRecord:
    path = record_path(run_id)
    if not RUN_NAME.match(run_id) or not path.exists():
        known = ", ".join(r.run_id for r in list_summaries()[0][-5:]) or "none"
        raise UsageError(f"unknown run {run_id!r} (known: {known}; see `tfcluster ls`)")
    try:
        return read(path)
    except RecordError as exc:
        raise UsageError(str(exc)) from None


def _listed(decode: Callable[[object], R]) -> tuple[list[R], list[tuple[Path, RecordError]]]:
    """Every readable record, oldest first, and each file that is not one, with why (a damaged record
    must not hide the others)."""
    directory = state_dir()
    if not directory.is_dir():
        return [], []
    found, damaged = [], []
    for path in sorted(directory.glob("*.json")):
        try:
            found.append(_read(path, decode))
        except RecordError as exc:
            damaged.append((path, exc))
    return sorted(found, key=lambda r: (r.created, r.run_id)), damaged


def list_runs() -> tuple[list[RunRecord], list[str]]:
    runs, damaged = _listed(RunRecord.from_json)
    return runs, [f"skipped {exc}" for _, exc in damaged]


def list_summaries() -> tuple[list[RunSummary], list[str]]:
    """As list_runs, without decoding any plan (`ls`, and which run is the latest)."""
    summaries, damaged = _listed(RunSummary.from_json)
    return summaries, [f"skipped {exc}" for _, exc in damaged]


def latest() -> RunRecord:
    """The newest run, for a command given no RUN. A damaged record written after that run was created
    may be the newest one: then refuse (naming it) rather than act on an older run the user did not mean."""
    summaries, damaged = _listed(RunSummary.from_json)
    newest_created = summaries[-1].created if summaries else float("-inf")
    for path, exc in damaged:
        with contextlib.suppress(OSError):
            if path.stat().st_mtime >= newest_created:
                raise UsageError(f"{exc}; it may be the newest run: name the run (`tfcluster ls`), or remove "
                                 f"{path.name} from {path.parent}")
    if not summaries:
        raise UsageError("no run yet: start one with `tfcluster start hosts.toml`")
    return load(summaries[-1].run_id)


def resolve(run_id: str | None) -> RunRecord:
    """`RUN` argument of status/logs/stop: the named run, or the latest one."""
    return load(run_id) if run_id else latest()


def local_dir(run_id: str) -> Path:
    """Where this machine keeps files of one run beside its record (what `tensorboard` follows, its state
    file); whoever creates it makes it 0700. Removed with the record."""
    return state_dir() / f"{run_id}.d"  # never *.json: listings read those


def remove(run_id: str) -> None:
    record_path(run_id).unlink(missing_ok=True)
    shutil.rmtree(local_dir(run_id), ignore_errors=True)
