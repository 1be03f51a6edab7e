"""Shipping by content hash, through the real start conversation: orchestrator.run.start_host talking to
training/launcher.py over a LocalTransport session (a real /bin/sh and python, real files in a temp
workdir), stopped at the barrier (released: nothing is launched). No network, no TensorFlow."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.config.schema import SSHOptions
from orchestrator.errors import HostError
from orchestrator.plan.model import HostPlan
from orchestrator.run.ship import ShipFile, package_id, sync_files, training_package_files, tree_id
from orchestrator.run.start_host import HostStart, StartContext, frame, start_command
from orchestrator.transport.factory import transport_for
from orchestrator.transport.local import LocalTransport


def _host(workdir: Path) -> HostPlan:
    return HostPlan(name="local", address="127.0.0.1", transport="local", python=sys.executable,
                    workdir=str(workdir), ssh=SSHOptions(), roles=("worker",), tasks=())


def _prepare(workdir: Path, files: list[ShipFile], run_id: str, run_json: bytes = b"{}") -> HostStart:
    """Phase 1 of a start on one local host, then released at the barrier."""
    ctx = StartContext(run_id=run_id, run_file=lambda host: run_json, files=files, tree=tree_id(files), package=package_id(files),
                       op_timeout=60, timeout=60, deadline=time.monotonic() + 60, allow_partial=False,
                       progress=lambda *a: None, cancel=threading.Event())
    start = HostStart(_host(workdir), ctx, transport_for)
    try:
        start.prepare()
    finally:
        start.release()
    return start


def test_ship_uploads_only_what_changed(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("v1\n")
    (src / "same.txt").write_text("same\n")
    (src / "copy.txt").write_text("same\n")  # same bytes: one cache entry
    workdir = tmp_path / "work"

    def files() -> list[ShipFile]:
        return sync_files(["train.py", "same.txt", "copy.txt"], str(src))

    first = _prepare(workdir, files(), "r1", b'{"run": 1}')
    assert first.outcome.uploaded == 2 and first.outcome.run_dir == str(workdir / "runs/r1")
    assert (workdir / "runs/r1/code/copy.txt").read_text() == "same\n"
    assert (workdir / "runs/r1/run.json").read_text() == '{"run": 1}'
    assert {d for d in os.listdir(workdir / "runs/r1")} == {"code", "events", "logs", "state", "run.json"}
    assert _prepare(workdir, files(), "r2").outcome.uploaded == 0  # warm: not even a listing was sent
    (src / "train.py").write_text("v2\n")
    assert _prepare(workdir, files(), "r3").outcome.uploaded == 1
    assert (workdir / "runs/r3/code/train.py").read_text() == "v2\n"
    assert (workdir / "runs/r1/code/train.py").read_text() == "v1\n"  # earlier runs keep their bytes
    cached = {p for p in os.listdir(workdir / "cache") if not p.startswith(".")} - {"trees"}
    assert cached == {hashlib.sha256(b).hexdigest() for b in (b"v1\n", b"v2\n", b"same\n")}
    assert len(os.listdir(workdir / "cache" / "trees")) == 2  # one linked code tree per distinct file set
    same = workdir / "runs/r2/code/same.txt"
    assert same.stat().st_ino == (workdir / "runs/r1/code/same.txt").stat().st_ino  # links, not copies


def test_ship_compiles_the_training_package_once_for_every_code_tree(tmp_path: Path) -> None:
    """The host's python byte-compiles `training/` once, in a package tree of its own; every code tree
    (a new one per edit of the user's files) and every run's code/ link those .pyc files with the
    sources (same inodes, so same mtimes: valid), and nothing compiles them again."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("v1\n")
    workdir = tmp_path / "work"
    for run in ("r1", "r2"):
        if run == "r2":
            (src / "train.py").write_text("v2\n")  # the user's edit: a new code tree
        _prepare(workdir, training_package_files() + sync_files(["train.py"], str(src)), run)
    assert len(os.listdir(workdir / "cache" / "trees")) == 2
    assert len(os.listdir(workdir / "cache" / "packages")) == 1
    tag = sys.implementation.cache_tag
    pyc = [workdir / f"runs/{run}/code/training/supervisor/__pycache__/core.{tag}.pyc" for run in ("r1", "r2")]
    assert pyc[0].stat().st_ino == pyc[1].stat().st_ino
    assert (workdir / "runs/r2/code/train.py").read_text() == "v2\n"
    # Importing from a run's code dir uses that .pyc: it is not rewritten.
    before = pyc[1].stat().st_mtime_ns
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    subprocess.run([sys.executable, "-S", "-c", "import training.supervisor"], cwd=workdir / "runs/r2/code",
                   env=env, check=True)
    assert pyc[1].stat().st_mtime_ns == before and pyc[1].stat().st_ino == pyc[0].stat().st_ino


def test_prepare_again_into_the_same_run_dir_is_harmless(tmp_path: Path) -> None:
    """What a retry after a lost connection does: the same prepare into the same run dir."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("v1\n")
    workdir = tmp_path / "work"
    files = sync_files(["train.py"], str(src))
    assert _prepare(workdir, files, "r1", b"{}").outcome.uploaded == 1
    assert _prepare(workdir, files, "r1", b'{"again": true}').outcome.uploaded == 0
    assert (workdir / "runs/r1/code/train.py").read_text() == "v1\n"
    assert json.loads((workdir / "runs/r1/run.json").read_text()) == {"again": True}


def test_a_released_host_starts_nothing_and_its_command_ends(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("v1\n")
    workdir = tmp_path / "work"
    files = sync_files(["train.py"], str(src))
    ctx = StartContext(run_id="r1", run_file=lambda host: b"{}", files=files, tree=tree_id(files), package=None, op_timeout=60,
                       timeout=60, deadline=time.monotonic() + 60, allow_partial=False, progress=lambda *a: None)
    session = LocalTransport("local").open_session(start_command(_host(workdir), "r1"))
    head = {"host": "local", "tree": ctx.tree, "package": None, "python": sys.executable}
    session.send(frame("head", json.dumps(head).encode()) + frame("run", b"{}"))
    assert session.read_line(30).startswith("@have")  # type: ignore[union-attr]
    session.send(frame("manifest", json.dumps({"files": [[f.rel, f.sha256, f.mode] for f in files]}).encode())
                 + frame("bundle", ctx.bundle(files)))
    assert session.read_line(30) == f"@prepared {workdir}/runs/r1"
    session.send(b"abort\n")
    assert session.read_line(30) is None
    assert session.exit_code == 3 and not os.listdir(workdir / "runs/r1/state")
    session.close()


def test_an_unusable_workdir_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    files = sync_files([], str(tmp_path))
    with pytest.raises(HostError, match=r"host local: prepare: cannot create the run dir in .*Not a directory"):
        _prepare(tmp_path / "file" / "work", files, "r1")
