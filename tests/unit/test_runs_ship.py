"""The local run record, what is shipped (sync entries, the package without bytecode) and task selection.
No network, no TensorFlow. (Shipping itself: test_ship_launcher.py; the run-state rules:
test_task_state.py.)"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, UsageError
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import records as runs
from orchestrator.run.file_hashes import FileHashes
from orchestrator.run.logs import select_tasks
from orchestrator.run.ship import sync_files, training_package_files
from tests.plans import tiny_plan
from training.run.layout import HOST_PACKAGE


def _record(run_id: str, created: float, plan: ClusterPlan | None = None) -> runs.RunRecord:
    return runs.RunRecord(run_id=run_id, config_path="/x/hosts.toml", cluster="demo", mode="between-graph",
                          created=created, plan=plan or tiny_plan(),
                          hosts=[runs.HostRecord(name="m0", workdir="~/.tfcluster")])


def test_run_ids_and_names() -> None:
    assert re.fullmatch(r"my-cluster-\d{8}-\d{6}-[0-9a-f]{4}", runs.new_run_id("my cluster"))
    assert runs.new_run_id("demo", "exp-1") == "exp-1"
    with pytest.raises(UsageError, match=r"--run '../x'"):
        runs.new_run_id("demo", "../x")


def test_record_save_load_list_latest(state_dir: Path) -> None:
    with pytest.raises(UsageError, match="no run yet"):
        runs.latest()
    runs.save(_record("b", 2.0))
    runs.save(_record("a", 1.0))
    (state_dir / "runs" / "broken.json").write_text("{not json")
    os.utime(state_dir / "runs" / "broken.json", (1.5, 1.5))  # damaged before run b was created
    known, skipped = runs.list_runs()
    assert [r.run_id for r in known] == ["a", "b"]  # oldest first, the broken one skipped with a warning
    assert len(skipped) == 1 and "broken.json: unreadable run record: not JSON" in skipped[0]
    assert runs.latest().run_id == "b" and runs.resolve(None).run_id == "b"
    loaded = runs.load("a")
    assert loaded.hosts[0].workdir == "~/.tfcluster" and loaded.config_path == "/x/hosts.toml"
    with pytest.raises(UsageError, match=r"unknown run 'zzz'.*known: a, b"):
        runs.load("zzz")
    runs.remove("a")
    assert not runs.exists("a")


def test_sync_files_errors_and_paths(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "sub" / "x.csv").write_text("1,2\n")
    (tmp_path / "data" / "__pycache__").mkdir()
    (tmp_path / "data" / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    files = sync_files(["train.py", "data/"], str(tmp_path), FileHashes())
    assert sorted(f.rel for f in files) == ["data/sub/x.csv", "train.py"]
    with pytest.raises(ConfigError, match=r"hosts.toml: training.sync: 'nope.py' does not exist"):
        sync_files(["nope.py"], str(tmp_path), FileHashes())
    (tmp_path / "training").mkdir()  # a user's own `training/` ships as theirs (tfcluster's goes to lib/)
    (tmp_path / "training" / "a.py").write_text("")
    assert [f.rel for f in sync_files(["training"], str(tmp_path), FileHashes())] == ["training/a.py"]
    assert {f.rel for f in sync_files(["."], str(tmp_path), FileHashes())} >= {"train.py", "training/a.py"}


def test_record_round_trips_compactly(state_dir: Path) -> None:
    record = _record("big", 1.0, tiny_plan([("ps",), *[("worker",)] * 200]))
    runs.save(record)
    assert "\n" not in (state_dir / "runs" / "big.json").read_text()  # compact (json's C encoder)
    loaded = runs.load("big")
    assert loaded == record


def test_training_package_is_shipped_under_its_host_name_without_bytecode() -> None:
    rels = {f.rel for f in training_package_files(FileHashes())}
    assert {f"{HOST_PACKAGE}/__init__.py", f"{HOST_PACKAGE}/supervisor/__main__.py", "tfcluster_report.py"} <= rels
    assert not any(r.startswith("training/") for r in rels)
    assert not any("__pycache__" in r or r.endswith(".pyc") for r in rels)


def test_select_tasks() -> None:
    record = _record("r", 1.0)
    tasks = list(record.plan.tasks)  # ps:0@m0, worker:0@m1, worker:1@m2
    assert select_tasks(record, []) == tasks
    assert select_tasks(record, ["worker"]) == tasks[1:]
    assert select_tasks(record, ["worker:1"]) == [tasks[2]]
    assert select_tasks(record, ["worker-0", "ps:0@m0"]) == [tasks[1], tasks[0]]
    with pytest.raises(UsageError, match="no task 'chief:0' in run r"):
        select_tasks(record, ["chief:0"])


@pytest.mark.parametrize("content", [
    "[]", "null", '"text"', "{}",
    '{"run_id": "x", "config_path": "h", "cluster": "c", "mode": "m", "created": 1.0, "plan": "oops", "hosts": []}',
    '{"run_id": "x", "config_path": "h", "cluster": "c", "mode": "m", "created": "yesterday", "plan": {}, "hosts": []}',
])
def test_a_stray_record_is_skipped_with_a_warning_naming_it(state_dir: Path, content: str) -> None:
    runs.save(_record("good", 1.0))
    (state_dir / "runs" / "stray.json").write_text(content)
    os.utime(state_dir / "runs" / "stray.json", (0.5, 0.5))  # older than the good run
    known, skipped = runs.list_runs()
    assert [r.run_id for r in known] == ["good"]
    assert len(skipped) == 1 and "stray.json" in skipped[0] and "\n" not in skipped[0]
    assert runs.latest().run_id == "good"
    with pytest.raises(UsageError, match=r"stray.json: unreadable run record"):
        runs.load("stray")


def test_a_damaged_record_newer_than_the_latest_run_stops_a_command_without_run(state_dir: Path) -> None:
    """Issue 21 point 3: the newest record unreadable must never redirect `stop` (or any command without
    RUN) to the run before it: refuse in one line naming the damaged file."""
    runs.save(_record("older-live-run", time.time() - 60))
    (state_dir / "runs" / "newest.json").write_text('{"run_id": "newest", "crea')  # cut short mid-write
    with pytest.raises(UsageError) as refused:
        runs.resolve(None)
    assert "newest.json: unreadable run record" in str(refused.value) and "\n" not in str(refused.value)
    assert runs.resolve("older-live-run").run_id == "older-live-run"  # named, it still works
    assert [r.run_id for r in runs.list_runs()[0]] == ["older-live-run"]  # `ls` lists it and warns


def test_records_are_private(state_dir: Path) -> None:
    runs.save(_record("p", 1.0))
    assert (state_dir / "runs").stat().st_mode & 0o777 == 0o700
    assert (state_dir / "runs" / "p.json").stat().st_mode & 0o777 == 0o600
