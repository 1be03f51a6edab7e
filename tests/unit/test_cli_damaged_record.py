"""Issue 21 point 3 at the level a user meets it: a real run on a `transport = "local"` host (real
supervisor, real task processes, this machine's /bin/sh), then the newest run record damaged. `stop`
without RUN must refuse in one line naming the damaged record (exit 2) and leave the live run alone;
named, the run still stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.run.local_ports import free_port_block
from tests.integration.lifecycle_helpers import cli, kill_run, run_processes, started_run_id, unique_run_id

# A task that lives until stopped: the run stays live for the whole test.
TASK = "import time\nwhile True:\n    time.sleep(0.2)\n"  # a task that runs until stopped


def _hosts(tmp_path: Path) -> Path:
    (tmp_path / "idle.py").write_text(TASK)
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'[cluster]\nname = "solo"\nbase_port = {free_port_block(4)}\n\n'
        f'[[hosts]]\nname = "box"\naddress = "127.0.0.1"\nroles = ["ps", "worker"]\ntransport = "local"\n'
        f"python = {json.dumps(sys.executable)}\nworkdir = {json.dumps(str(tmp_path / 'work'))}\n\n"
        f'[training]\ncommand = "{{python}} idle.py"\nsync = ["idle.py"]\n'
    )
    return path


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    state = tmp_path / "state"
    started = cli(state, "start", str(_hosts(tmp_path)), "--run", unique_run_id("live-one"), timeout=90)
    assert started.returncode == 0, started.stdout + started.stderr
    run_id = started_run_id(started.stdout)
    try:
        yield state, run_id
    finally:
        cli(state, "stop", run_id, "--grace", "1")
        kill_run(run_id)


def test_stop_without_run_refuses_when_the_newest_record_is_damaged(live_run: tuple[Path, str]) -> None:
    state, run_id = live_run
    damaged = state / "runs" / "newer-run.json"
    damaged.write_text('{"run_id": "newer-run", "created": 17')  # cut short, as by a full disk
    os.chmod(damaged, 0o600)
    refused = cli(state, "stop")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "newer-run.json" in lines[0] and "Traceback" not in refused.stderr, refused.stderr
    assert run_processes(run_id), "the live run the user did not name was stopped"
    for command in ("status", "dash"):  # every command without RUN refuses the same way
        other = cli(state, command, *(["--once"] if command == "dash" else []))
        assert other.returncode == 2 and "newer-run.json" in other.stderr, other.stdout + other.stderr
    named = cli(state, "stop", run_id, "--grace", "1")
    assert named.returncode == 0, named.stdout + named.stderr
    assert not run_processes(run_id)


def test_ls_lists_the_runs_and_names_the_damaged_record(live_run: tuple[Path, str]) -> None:
    state, run_id = live_run
    (state / "runs" / "newer-run.json").write_text("{")
    listed = subprocess.run([sys.executable, "-m", "tfcluster", "ls"], check=False, capture_output=True, text=True,
                            env={**os.environ, "TFCLUSTER_STATE_DIR": str(state), "COLUMNS": "200"}, timeout=60)
    assert listed.returncode == 0 and run_id in listed.stdout and "newer-run.json" in listed.stderr, listed
