"""Shipping by content hash, through the real start conversation: orchestrator.run.start_host talking to
training/launcher.py over a LocalTransport session (tests/helpers/local_start.py), held at the barrier
while the test looks, then released. No network, no TensorFlow."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.run.start_host import HostStart, frame, start_command
from orchestrator.transport.factory import transport_for
from orchestrator.transport.local import LocalTransport
from tests.helpers.local_start import file_sets, local_host, prepared, release, start_context
from tests.helpers.waiting import wait_for
from training.run.layout import HOST_PACKAGE


def _src(tmp_path: Path, **files: str) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for name, text in files.items():
        (src / name).write_text(text)
    return src


def test_ship_uploads_only_what_changed(tmp_path: Path) -> None:
    src = _src(tmp_path, **{"train.py": "v1\n", "same.txt": "same\n", "copy.txt": "same\n"})  # copy: one entry
    workdir = tmp_path / "work"
    names = ["train.py", "same.txt", "copy.txt"]
    with prepared(workdir, file_sets(src, names), "r1", b'{"run": 1}') as first:
        host_dir = workdir / "runs/r1/local"
        assert first.outcome.uploaded == 2 and first.outcome.run_dir == str(host_dir)
        assert (host_dir / "code/copy.txt").read_text() == "same\n"
        assert (host_dir / "run.json").read_text() == '{"run": 1}'
        assert set(os.listdir(host_dir)) == {"code", "lib", "events", "logs", "state", "run.json", ".start-lock",
                                                "cache-uses.json"}
        with prepared(workdir, file_sets(src, names), "r2") as warm:
            assert warm.outcome.uploaded == 0  # warm: not even a manifest was sent
            same = workdir / "runs/r2/local/code/same.txt"
            assert same.read_text() == "same\n"
            assert same.stat().st_ino != (host_dir / "code/same.txt").stat().st_ino  # each run's code/ is its own
        (src / "train.py").write_text("v2\n")
        with prepared(workdir, file_sets(src, names), "r3") as changed:
            assert changed.outcome.uploaded == 1
            assert (workdir / "runs/r3/local/code/train.py").read_text() == "v2\n"
        assert (host_dir / "code/train.py").read_text() == "v1\n"  # earlier runs keep their bytes
    cached = {p for p in os.listdir(workdir / "cache") if not p.startswith(".")} - {"trees", "packages"}
    assert cached == {hashlib.sha256(b).hexdigest() for b in (b"v1\n", b"v2\n", b"same\n")}
    assert os.listdir(workdir / "runs") == []  # every released start left nothing, not even runs/<id>/


def test_the_package_lives_apart_and_is_compiled_once(tmp_path: Path) -> None:
    """tfcluster's package is the run's lib/ (under its host name), byte-compiled once per version: every
    run links the same .pyc files, which stay valid (the sources keep their fixed mtime)."""
    src = _src(tmp_path, **{"train.py": "v1\n"})
    workdir = tmp_path / "work"
    tag = sys.implementation.cache_tag
    with prepared(workdir, file_sets(src, ["train.py"], package=True), "r1"):
        (src / "train.py").write_text("v2\n")  # the user's edit: a new code tree, the same package
        with prepared(workdir, file_sets(src, ["train.py"], package=True), "r2"):
            lib = [workdir / f"runs/{run}/local/lib" for run in ("r1", "r2")]
            pyc = [d / HOST_PACKAGE / f"supervisor/__pycache__/core.{tag}.pyc" for d in lib]
            assert pyc[0].stat().st_ino == pyc[1].stat().st_ino
            assert (lib[0] / "tfcluster_report.py").is_file()
            assert len(os.listdir(workdir / "cache/trees")) == 2 and len(os.listdir(workdir / "cache/packages")) == 1
            before = pyc[1].stat().st_mtime_ns
            subprocess.run([sys.executable, "-S", "-c", f"import {HOST_PACKAGE}.supervisor"], cwd=lib[1],
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=True)
            assert pyc[1].stat().st_mtime_ns == before  # imported from the .pyc, not recompiled


def test_a_users_own_training_package_and_report_module_ship_as_theirs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "training").mkdir(parents=True)
    (src / "training/__init__.py").write_text("MINE = True\n")
    (src / "tfcluster_report.py").write_text("OWN = True\n")
    workdir = tmp_path / "work"
    with prepared(workdir, file_sets(src, ["."], package=True), "r1"):
        code, lib = workdir / "runs/r1/local/code", workdir / "runs/r1/local/lib"
        assert (code / "training/__init__.py").read_text() == "MINE = True\n"
        probe = ("import training, tfcluster_report, importlib; assert training.MINE and tfcluster_report.OWN; "
                 f"importlib.import_module('{HOST_PACKAGE}.run.layout')")
        subprocess.run([sys.executable, "-c", probe], cwd=code, env={**os.environ, "PYTHONPATH": str(lib)}, check=True)


def test_a_file_changed_in_place_by_a_run_changes_only_that_runs_copy(tmp_path: Path) -> None:
    """A run's code/ is its own copy of the cached tree: a program that rewrites a synced file in place
    changes neither the cache nor the next run, which gets the shipped bytes with nothing sent again."""
    src = _src(tmp_path, **{"config.yaml": "lr: 0.1\n", "train.py": "x\n"})
    workdir = tmp_path / "work"
    names = ["config.yaml", "train.py"]
    with prepared(workdir, file_sets(src, names), "r1"):
        with open(workdir / "runs/r1/local/code/config.yaml", "r+") as f:  # the program updates its config
            f.write("lr: 9.9\n")
        with prepared(workdir, file_sets(src, names), "r2") as second:
            assert second.outcome.uploaded == 0
            assert (workdir / "runs/r2/local/code/config.yaml").read_text() == "lr: 0.1\n"
            assert (workdir / "runs/r1/local/code/config.yaml").read_text() == "lr: 9.9\n"  # its own copy


def test_hosts_sharing_one_workdir_each_have_their_own_run_dir(tmp_path: Path) -> None:
    src = _src(tmp_path, **{"train.py": "v1\n"})
    workdir = tmp_path / "nfs-home"
    files = file_sets(src, ["train.py"])
    with prepared(workdir, files, "r1", b'{"h": 1}', host="m0"), prepared(workdir, files, "r1", b'{"h": 2}', host="m1"):
        assert json.loads((workdir / "runs/r1/m0/run.json").read_text()) == {"h": 1}
        assert json.loads((workdir / "runs/r1/m1/run.json").read_text()) == {"h": 2}
    assert not (workdir / "runs/r1").exists()


def test_every_file_of_a_start_is_private(tmp_path: Path) -> None:
    src = _src(tmp_path, **{"train.py": "v1\n", "run.sh": "#!/bin/sh\n"})
    (src / "run.sh").chmod(0o755)
    workdir = tmp_path / "work"
    with prepared(workdir, file_sets(src, ["train.py", "run.sh"]), "r1"):
        for path in [workdir, *workdir.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
        assert os.access(workdir / "runs/r1/local/code/run.sh", os.X_OK)


def _session(workdir: Path, files_sha: list[str]) -> tuple[object, str]:
    session = LocalTransport("local").open_session(start_command(local_host(workdir), "r1"))
    head = {"host": "local", "tree": "t" * 32, "package": "p" * 32, "supervisor": "x", "python": sys.executable}
    session.send(frame("head", json.dumps(head).encode()) + frame("run", b"{}"))
    assert session.read_line(30) == "@send"
    manifest = {"tree": [[f"f{i}", sha, 0o644] for i, sha in enumerate(files_sha)], "package": []}
    session.send(frame("manifest", json.dumps(manifest).encode()))
    need = session.read_line(30)
    assert need is not None
    return session, need


def test_a_start_that_ends_in_the_middle_of_a_file_leaves_nothing(tmp_path: Path) -> None:
    """The orchestrator goes away (Ctrl-C, a lost connection: the command's stdin ends) while a file is
    half sent; and a start command killed outright leaves temporary files that the next start removes."""
    workdir = tmp_path / "work"
    sha = hashlib.sha256(b"x" * 1000).hexdigest()
    session, need = _session(workdir, [sha])
    assert need == f"@need {sha}"
    session.send(f"blob {sha} 644 1000\n".encode() + b"x" * 400)  # type: ignore[attr-defined]
    session.close_input()  # type: ignore[attr-defined]
    assert session.read_line(30) is None  # type: ignore[attr-defined]
    assert session.exit_code == 3  # type: ignore[attr-defined]
    assert os.listdir(workdir / "runs") == [] and os.listdir(workdir / "cache") == [".lock"]  # the cache's lock
    killed, _need = _session(workdir, [sha])
    killed.send(f"blob {sha} 644 1000\n".encode() + b"x" * 400)  # type: ignore[attr-defined]
    wait_for(lambda: any(n.startswith(".tmp-") and not n.endswith(".lock") for n in os.listdir(workdir / "cache")), 30, "a half-written file")
    killed.close()  # type: ignore[attr-defined]  # SIGKILL: no time to clean up
    src = _src(tmp_path, **{"train.py": "v1\n"})
    with prepared(workdir, file_sets(src, ["train.py"]), "r2"):
        temps = [n for n in os.listdir(workdir / "cache") if n.startswith(".tmp-")]
        assert len(temps) == 1 and temps[0].endswith(".lock")  # only r2's own, held until it launches


def test_a_file_that_changed_while_it_was_sent_is_not_kept(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    sha = hashlib.sha256(b"y" * 10).hexdigest()
    session, _need = _session(workdir, [sha])
    session.send(f"blob {sha} 644 10\n".encode() + b"z" * 10 + b"changed\n")  # type: ignore[attr-defined]
    assert "changed while it was shipped" in (session.read_line(30) or "")  # type: ignore[attr-defined]
    assert session.read_line(30) is None  # type: ignore[attr-defined]
    assert os.listdir(workdir / "runs") == [] and os.listdir(workdir / "cache") == [".lock"]  # the cache's lock


def test_prepare_again_into_the_same_run_dir_is_harmless(tmp_path: Path) -> None:
    """What a retry after a lost connection does: the same prepare into the same run dir, once the first
    attempt's command is gone (here killed outright, so it removed nothing)."""
    src = _src(tmp_path, **{"train.py": "v1\n"})
    workdir = tmp_path / "work"
    files = file_sets(src, ["train.py"])
    first = HostStart(local_host(workdir), start_context(files), transport_for)
    first.prepare()
    assert first.outcome.uploaded == 1
    first.close()
    with prepared(workdir, files, "r1", b'{"again": true}') as again:
        assert again.outcome.uploaded == 0
        assert json.loads((workdir / "runs/r1/local/run.json").read_text()) == {"again": True}


def test_an_unusable_workdir_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(HostError, match=r"host local: prepare: cannot create the run dir in .*Not a directory"), \
            prepared(tmp_path / "file" / "work", file_sets(tmp_path, []), "r1"):
        pass


def test_release_is_what_a_refused_start_does(tmp_path: Path) -> None:
    src = _src(tmp_path, **{"train.py": "v1\n"})
    with prepared(tmp_path / "work", file_sets(src, ["train.py"]), "r1") as start:
        assert start.session is not None
        release(start)
        assert start.session is None
    assert os.listdir(tmp_path / "work/runs") == []
