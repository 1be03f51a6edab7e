"""A resize's pending new hosts in the run record (orchestrator/run/resize_pending.py): an old record (no
such key) loads and saves byte for byte; marked, the record still says the run as it was and names the new
hosts under the new plan; undone, only unverified hosts stay; `stop` visits a pending host (the local
transport, a run dir that was never made: reached and found absent); a run with a resize pending is not
resized again, before any host is reached."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.plan.from_file import plan_file
from orchestrator.plan.model import HostPlan
from orchestrator.plan.resize_diff import plan_resize
from orchestrator.run import records, resize_pending
from orchestrator.run.resize import resize
from orchestrator.run.stop import stop
from orchestrator.transport.base import Transport


def _hosts(path: Path, workers: int) -> Path:
    out = ["[cluster]", 'name = "demo"', "base_port = 23000", "", "[training]",
           'command = "{python} prog.py {job} {task}"', ""]
    for i, roles in enumerate([["ps"]] + [["worker"]] * workers):
        out += ["[[hosts]]", f'name = "m{i}"', f'address = "127.0.0.{i + 2}"', 'transport = "local"',
                f'workdir = "{path.parent}/m{i}"', f"roles = {json.dumps(roles)}", ""]
    path.write_text("\n".join(out))
    return path


@pytest.fixture
def recorded(tmp_path: Path, state_dir: Path) -> records.RunRecord:
    plan = plan_file(_hosts(tmp_path / "one.toml", 1))
    record = records.RunRecord(
        run_id="r1", config_path=str(tmp_path / "one.toml"), cluster=plan.cluster_name, mode=plan.mode,
        created=time.time(), plan=plan, status="started",
        hosts=[records.HostRecord(name=h.name, workdir=h.workdir, run_dir=f"{h.workdir}/runs/r1/{h.name}",
                                  started=True) for h in plan.hosts])
    assert records.STATE_DIR_ENV in os.environ  # never the user's own state dir
    records.save(record)
    return record


def _file(record: records.RunRecord) -> Path:
    return records.state_dir() / f"{record.run_id}.json"


def test_an_old_record_loads_and_saves_as_it_was(recorded: records.RunRecord) -> None:
    before = _file(recorded).read_bytes()
    assert "pending_resize" not in json.loads(before)
    loaded = records.load("r1")
    assert loaded.pending_resize is None and resize_pending.probe(loaded) is None
    assert resize_pending.under_way(loaded) == "" and resize_pending.pending_hosts(loaded) == []
    records.save(loaded)
    assert _file(recorded).read_bytes() == before


def test_marked_undone_and_kept_unverified(recorded: records.RunRecord, tmp_path: Path) -> None:
    grown = plan_file(_hosts(tmp_path / "three.toml", 3))
    change = plan_resize(recorded.plan, grown)
    dirs = {n: f"{change.new.host(n).workdir}/runs/r1/{n}" for n in change.hosts_added}
    resize_pending.mark(recorded, change.new, dirs)
    records.save(recorded)
    assert stat.S_IMODE(_file(recorded).stat().st_mode) == 0o600  # written as every record: private
    loaded = records.load("r1")
    assert [h.name for h in loaded.hosts] == ["m0", "m1"] and loaded.plan == recorded.plan  # the run as it was
    assert resize_pending.pending_hosts(loaded) == ["m2", "m3"]
    probe = resize_pending.probe(loaded)
    assert probe is not None and probe.plan.host("m3").address == "127.0.0.5"
    assert {h.name: h.run_dir for h in probe.hosts} == dirs and probe.pending_resize is None
    assert "is under way (process" in resize_pending.under_way(loaded)  # this process marked it

    loaded.pending_resize = {**(loaded.pending_resize or {}), "pid": 2**22 + 1}  # above pid_max: gone
    assert "is interrupted" in resize_pending.under_way(loaded)
    resize_pending.keep_only(loaded, ["m3"])  # m2 verified stopped, m3 not
    assert resize_pending.pending_hosts(loaded) == ["m3"]
    resize_pending.keep_only(loaded, [])
    assert loaded.pending_resize is None and "pending_resize" not in loaded.to_json()


def test_stop_visits_the_pending_hosts(recorded: records.RunRecord, tmp_path: Path) -> None:
    change = plan_resize(recorded.plan, plan_file(_hosts(tmp_path / "two.toml", 2)))
    resize_pending.mark(recorded, change.new, {"m2": str(tmp_path / "m2" / "runs" / "r1" / "m2")})
    result = stop(recorded, grace=0.0, timeout=10.0)
    assert set(result) == {"m0", "m1", "m2"} and result["m2"].ok and result["m2"].absent, result
    assert records.load("r1").status == "stopped" and records.load("r1").pending_resize is not None


def test_a_run_with_a_resize_pending_is_not_resized_again(recorded: records.RunRecord, tmp_path: Path) -> None:
    change = plan_resize(recorded.plan, plan_file(_hosts(tmp_path / "two.toml", 2)))
    resize_pending.mark(recorded, change.new, {"m2": "/nowhere/runs/r1/m2"})
    records.save(recorded)
    before = _file(recorded).read_bytes()

    def unreachable(host: HostPlan) -> Transport:
        raise AssertionError(f"{host.name} reached")

    with pytest.raises(UsageError, match=r"a resize of run r1 is under way .*hosts m2 .*nothing changed"):
        resize(recorded, change, str(tmp_path / "two.toml"), opener=unreachable)
    assert _file(recorded).read_bytes() == before
