"""The local run record: which runs exist, where, with which plan, so that `status`, `logs`, `stop`
and `dash` find a run from any terminal, even after the `start` process died.

One JSON file per run in platformdirs' user state dir (`TFCLUSTER_STATE_DIR` overrides it; tests
always set it to a temporary directory).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError

STATE_DIR_ENV = "TFCLUSTER_STATE_DIR"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def state_dir() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        path = Path(override)
    else:
        from platformdirs import user_state_dir

        path = Path(user_state_dir("tfcluster"))
    return path / "runs"


def new_run_id(cluster: str, name: str | None = None, now: float | None = None) -> str:
    """`<cluster>-<yyyymmdd-hhmmss>-<4 hex>`, or the user's `--run NAME` (checked: it becomes a path)."""
    if name is not None:
        if not RUN_NAME.match(name):
            raise UsageError(f"--run {name!r}: a run name is letters, digits, '.', '_' and '-' (at most 100)")
        return name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe_cluster = re.sub(r"[^A-Za-z0-9_.-]", "-", cluster) or "run"
    return f"{safe_cluster}-{stamp}-{secrets.token_hex(2)}"


@dataclass
class HostRecord:
    name: str
    workdir: str  # as the config gave it (may start with ~)
    run_dir: str = ""  # absolute, resolved on the host at start
    python: str = "python3"
    supervisor_pid: int | None = None
    started: bool = False  # the supervisor was launched here (stop must visit it)


@dataclass
class RunRecord:
    run_id: str
    config_path: str
    cluster: str
    mode: str
    created: float
    plan: dict[str, Any]
    hosts: list[HostRecord]
    status: str = "starting"  # starting | started | partial | failed-to-start | stopped (last known)
    notes: list[str] = field(default_factory=list)

    def host(self, name: str) -> HostRecord:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies the plan (O(tasks)) and `start` saves the record at
        # every phase boundary; the plan is plain JSON already and is shared, not copied.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["hosts"] = [asdict(h) for h in self.hosts]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        hosts = [HostRecord(**h) for h in data.get("hosts", [])]
        return cls(**{**data, "hosts": hosts})


def _path(run_id: str) -> Path:
    return state_dir() / f"{run_id}.json"


def save(record: RunRecord) -> None:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{record.run_id}.json.tmp{os.getpid()}"
    # Compact: json uses its C encoder only without `indent` (2.5x faster for a 200-host plan, measured).
    tmp.write_text(json.dumps(record.to_json(), separators=(",", ":")))
    os.replace(tmp, _path(record.run_id))


def exists(run_id: str) -> bool:
    return _path(run_id).exists()


def load(run_id: str) -> RunRecord:
    path = _path(run_id)
    if not RUN_NAME.match(run_id) or not path.exists():
        known = ", ".join(r.run_id for r in list_runs()[-5:]) or "none"
        raise UsageError(f"unknown run {run_id!r} (known: {known}; see `tfcluster ls`)")
    try:
        return RunRecord.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path}: unreadable run record ({exc})") from exc


def list_runs() -> list[RunRecord]:
    """Every readable run record, oldest first."""
    directory = state_dir()
    if not directory.is_dir():
        return []
    records = []
    for path in directory.glob("*.json"):
        try:
            records.append(RunRecord.from_json(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue  # a damaged record must not hide the others
    return sorted(records, key=lambda r: (r.created, r.run_id))


def latest() -> RunRecord:
    records = list_runs()
    if not records:
        raise UsageError("no run yet: start one with `tfcluster start hosts.toml`")
    return records[-1]


def resolve(run_id: str | None) -> RunRecord:
    """`RUN` argument of status/logs/stop: the named run, or the latest one."""
    return load(run_id) if run_id else latest()


def remove(run_id: str) -> None:
    _path(run_id).unlink(missing_ok=True)
