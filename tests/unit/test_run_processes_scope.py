"""The tests' process listing (tests/integration/lifecycle_helpers.py `run_processes`, which the state dir's
cleanup kills by) sees only the test's own run when another test, at the same time under pytest-xdist, runs
one of the same id elsewhere: the two once SIGKILLed each other's processes; and never a process without
the run marker, whatever the record holds (a first version read an unprepared host's empty run dir as
"/" and its cleanup SIGKILLed every process of the machine). Real processes, marked as a run's are
(TFCLUSTER_RUN_DIR)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.lifecycle_helpers import run_processes
from training.run.layout import RUN_DIR_ENV


@pytest.fixture
def two_runs_of_one_id(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              env={**os.environ, RUN_DIR_ENV: str(tmp_path / name / "runs" / "same-id" / "m0")})
             for name in ("mine", "theirs")]
    try:
        yield procs[0], procs[1]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_recorded_run_is_found_only_where_it_lives(two_runs_of_one_id: tuple[subprocess.Popen[bytes], ...],
                                                    tmp_path: Path, state_dir: Path) -> None:
    mine, theirs = two_runs_of_one_id
    assert {p.pid for p in run_processes("same-id")} >= {mine.pid, theirs.pid}  # no record: by id alone
    (state_dir / "runs").mkdir(exist_ok=True)
    (state_dir / "runs" / "same-id.json").write_text(json.dumps(
        {"run_id": "same-id", "plan": {"hosts": [{"name": "m0", "workdir": str(tmp_path / "mine")}]},
         "hosts": [{"name": "m0", "run_dir": None}, {"name": "m1", "run_dir": ""}]}))  # m1: not prepared
    assert [p.pid for p in run_processes("same-id")] == [mine.pid]  # never an unmarked one: these get killed
