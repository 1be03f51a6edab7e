"""`check`'s workdir probe (training/probes/workdir_probe.py) on real directories, and what `check` makes
of several hosts' answers (orchestrator/run/shared_dirs.py, orchestrator/plan/checkpoints.py): issue 21
point 4 (a workdir `start` cannot create fails `check`) and issue 20's shared-workdir marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.plan.checkpoints import checkpoint_note
from orchestrator.run.check import PROBE_SCRIPT, import_tf_mode
from orchestrator.run.shared_dirs import shared_workdirs, sharing_notes
from tests.plans import tiny_plan
from training.probes import host_probe
from training.probes.workdir_probe import WORKDIR_ID_FILE, try_write, workdir_id, workdir_report


def test_a_workdir_start_can_create_is_created_written_and_left_empty(tmp_path: Path) -> None:
    wd = tmp_path / "a" / "b" / "work"
    report = workdir_report(str(wd))
    assert report["workdir_writable"] and report["workdir_problem"] is None
    assert sorted(os.listdir(wd)) == [WORKDIR_ID_FILE]  # the probe file was removed; the id stays
    assert wd.stat().st_mode & 0o777 == 0o700


def test_a_workdir_start_cannot_create_is_a_problem_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    report = workdir_report(str(blocker / "work"))  # ENOTDIR, for root too
    assert not report["workdir_writable"] and report["workdir_id"] is None
    assert report["workdir_problem"].startswith("cannot create it: Not a directory"), report


def test_a_workdir_that_exists_but_takes_no_file_is_a_problem(tmp_path: Path) -> None:
    assert try_write("/proc/self") is not None  # exists, but no file can be made there (root included)


def test_the_workdir_id_is_made_once_and_every_racer_reads_the_same(tmp_path: Path) -> None:
    ids: list[str | None] = []
    barrier = threading.Barrier(8)

    def racer() -> None:
        barrier.wait()
        ids.append(workdir_id(str(tmp_path)))

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and ids[0] and len(ids[0]) == 32, ids
    assert os.listdir(tmp_path) == [WORKDIR_ID_FILE]  # no temporary file left behind
    assert workdir_id(str(tmp_path)) == ids[0]


def test_the_probe_sent_to_a_host_reports_the_workdir_and_caches_the_tf_answer(tmp_path: Path) -> None:
    """The probe as `check` sends it (its source with the helpers inlined) under a python without
    TensorFlow: the workdir and its id come back; `cached` finds no TensorFlow and imports nothing."""
    args = json.dumps({"ports": [], "workdir": str(tmp_path / "wd"), "import_tf": "cached",
                       "tf_distributions": ["tensorflow"], "checkpoint_dir": str(tmp_path / "ckpt")})
    out = subprocess.run(["/usr/bin/python3", "-c", PROBE_SCRIPT, args], check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    assert report["workdir_writable"] and report["workdir_id"] and report["checkpoint_dir_id"], report
    assert not report["tf_found"] and report["workdir_id"] != report["checkpoint_dir_id"]


def test_the_tf_import_answer_is_cached_per_python_and_tensorflow_files(tmp_path: Path) -> None:
    """A broken install (its `__init__` raises, as a missing CUDA library does) imported once; the
    second check reads the answer; touching TensorFlow's files (a reinstall) imports again."""
    site = tmp_path / "site" / "tensorflow"
    site.mkdir(parents=True)
    init = site / "__init__.py"
    init.write_text("import os\nopen(os.environ['COUNT'], 'a').write('x')\n"
                    "raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    count = tmp_path / "imports"
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); from training.probes import host_probe as h; "
            "print(json.dumps(h.tf_report(['tensorflow'], 'cached', sys.argv[2])))")
    env = {**os.environ, "COUNT": str(count), "PYTHONPATH": str(Path(host_probe.__file__).parents[2])}

    said: list[bool] = []

    def check() -> list[object]:
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site"), str(tmp_path / "cache")],
                             check=True, capture_output=True, text=True, env=env)
        *before, report = out.stdout.splitlines()
        said.append(before == [host_probe.IMPORTING_TF])  # said before a real import (check's budget for it)
        return list(json.loads(report))

    first = check()
    assert first[0] is False and "libcudart.so.12" in str(first[2]), first
    assert check() == first and count.read_text() == "x"  # cached: imported once
    os.utime(init, (1, 1))
    assert check() == first and count.read_text() == "xx"  # TensorFlow's files changed: imported again
    assert said == [True, False, True]


def test_the_builtin_trainers_and_tf2_modes_check_that_tensorflow_imports() -> None:
    assert import_tf_mode(tiny_plan(), force=False) == "cached"
    user = tiny_plan(training={"command": "python train.py"})
    assert import_tf_mode(user, force=False) == "never" and import_tf_mode(user, force=True) == "always"
    tf2_user = tiny_plan((("ps",), ("worker",)), mode="parameter-server-strategy",
                         training={"command": "python train.py"})
    assert import_tf_mode(tf2_user, force=False) == "cached"


@dataclass
class Row:
    host: str
    workdir: str = "~/.tfcluster"
    workdir_id: str | None = None
    machine_id: str | None = None
    checkpoint_dir_id: str | None = None
    problems: list[str] = field(default_factory=list)


def test_hosts_with_the_same_workdir_id_share_it_and_machines_are_told_apart() -> None:
    rows = [Row("m0", workdir_id="A", machine_id="x"), Row("m1", workdir_id="A", machine_id="x"),
            Row("m2", workdir_id="B", machine_id="y"), Row("m3", workdir_id="B", machine_id="z"),
            Row("m4", workdir_id="C", machine_id="z"), Row("m5")]
    groups = shared_workdirs(rows)
    assert [(g.hosts, g.machines) for g in groups] == [(("m0", "m1"), 1), (("m2", "m3"), 2)]
    assert groups[0].describe() == "hosts m0, m1 share the workdir ~/.tfcluster (on one machine)"
    assert groups[1].describe().endswith("(a filesystem shared by 2 machines)")


def test_check_explains_checkpoints_when_workdirs_are_shared() -> None:
    plan = tiny_plan()  # ps on m0, the chief worker:0 on m1
    notes = sharing_notes(plan, [Row("m0", workdir_id="A"), Row("m1", workdir_id="A"), Row("m2", workdir_id="B")])
    assert notes[0].startswith("hosts m0, m1 share the workdir") and "own run state" in notes[0]
    assert notes[1] == checkpoint_note(plan)
    assert "in its host's own run dir (on m1)" in notes[1] and "shared_checkpoint_dir = true" in notes[1]
    assert sharing_notes(plan, [Row("m0", workdir_id="A"), Row("m1", workdir_id="B")]) == []


def test_sharded_checkpoints_need_every_writer_to_see_one_directory() -> None:
    plan = tiny_plan(training={"checkpoint_dir": "/shared/ckpt", "shared_checkpoint_dir": True})
    assert "every ps writes its own shard into /shared/ckpt" in checkpoint_note(plan)
    same = [Row("m0", checkpoint_dir_id="K"), Row("m1", checkpoint_dir_id="K"), Row("m2")]
    sharing_notes(plan, same)
    assert not any(r.problems for r in same)
    apart = [Row("m0", checkpoint_dir_id="K"), Row("m1", checkpoint_dir_id="L"), Row("m2")]
    sharing_notes(plan, apart)
    assert apart[0].problems and "m0, m1 do not see the same directory at /shared/ckpt" in apart[0].problems[0]
    assert apart[1].problems and not apart[2].problems  # m2 writes no checkpoint


def test_the_checkpoint_line_for_each_case() -> None:
    relative_shared = tiny_plan(training={"shared_checkpoint_dir": True})
    assert "relative checkpoint_dir" in checkpoint_note(relative_shared)
    tf2 = tiny_plan((("ps",), ("worker",)), mode="parameter-server-strategy", training={"shared_checkpoint_dir": True})
    assert "shared_checkpoint_dir changes nothing here" in checkpoint_note(tf2)
    assert checkpoint_note(tiny_plan(training={"command": "python x.py"})).startswith("checkpoints: your program's")
