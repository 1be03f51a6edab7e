"""Helpers for the lifecycle integration tests: run the real CLI, read its run record, list processes.

The process listing is independent of the code under test: psutil reads every process's environment
and looks for the run's marker (TFCLUSTER_RUN_DIR=<a run dir of this run>).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.procs import marked
from tests.helpers.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT = 120.0


def cli_env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "TFCLUSTER_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO), "COLUMNS": "200"}


def cli(state_dir: Path, *args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], check=False, env=cli_env(state_dir), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@contextmanager
def cli_process(state_dir: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A CLI command running in the background; killed (with its group) when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", *args], env=cli_env(state_dir), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def isolated_state_dir(state: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TFCLUSTER_STATE_DIR is `state` (for the CLI subprocesses too). At the end every run recorded there
    is cleaned up, whatever the test left behind: `tfcluster stop --grace 1` while processes of the run
    are still seen, then any process of it still alive is killed."""
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(state))
    try:
        yield state
    finally:
        for record in records(state):
            run_id = record["run_id"]
            if run_processes(run_id):
                cli(state, "stop", run_id, "--grace", "1")
            kill_run(run_id)


def started_run_id(stdout: str) -> str:
    """The run id in `tfcluster start`'s "started <run id> in ..." line."""
    match = re.search(r"started (\S+) in", stdout)
    assert match, stdout
    return match.group(1)


def records(state_dir: Path) -> list[dict[str, Any]]:
    directory = state_dir / "runs"
    out = []
    for path in directory.glob("*.json") if directory.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue  # being rewritten right now, or a test's damaged record
        if isinstance(record, dict) and isinstance(record.get("run_id"), str):
            out.append(record)
    return sorted(out, key=lambda r: float(r["created"]) if isinstance(r.get("created"), (int, float)) else 0.0)


def unique_run_id(name: str) -> str:
    """A run id no other test uses: `run_processes` and `kill_run` find a run by its id on the whole
    machine (every loopback host shares this kernel), so two tests giving one fixed id to runs that overlap
    under pytest-xdist would see, and kill, each other's processes."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every live process marked as part of run `run_id` (`<workdir>/runs/<id>/<host>`, on any loopback
    machine: they all share this kernel). When the test's state dir records the run, only those under its
    hosts' workdirs or run dirs: another test's run of the same id, elsewhere, is not this one."""
    roots = _run_roots(run_id)
    if roots is None:
        return marked(lambda run_dir: f"/runs/{run_id}/" in run_dir)
    return marked(lambda run_dir: any((run_dir + "/").startswith(root) for root in roots))


def _run_roots(run_id: str) -> list[str] | None:
    """`<workdir>/runs/<id>/` of each host of the run and each run dir its record holds (`/` ended), from the
    record in the current TFCLUSTER_STATE_DIR; None without one."""
    state = os.environ.get("TFCLUSTER_STATE_DIR")
    if not state:
        return None
    try:
        record = json.loads(Path(state, "runs", f"{run_id}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    plan_hosts = (record.get("plan") or {}).get("hosts") or []
    roots = [f"{h['workdir'].rstrip('/')}/runs/{run_id}/" for h in plan_hosts
             if isinstance(h.get("workdir"), str) and h["workdir"].startswith("/")]
    roots += [f"{h['run_dir'].rstrip('/')}/" for h in record.get("hosts") or []
              if isinstance(h.get("run_dir"), str) and f"/runs/{run_id}/" in h["run_dir"] + "/"]
    return roots or None


def kill_run(run_id: str) -> None:
    """Last-resort cleanup for a test's finally block."""
    for p in run_processes(run_id):
        with suppress(psutil.NoSuchProcess):
            p.kill()


def status_json(state_dir: Path, run_id: str) -> tuple[int, dict[str, Any]]:
    res = cli(state_dir, "status", run_id, "--json", timeout=60)
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def dash_json(state_dir: Path, run_id: str) -> dict[str, Any]:
    res = cli(state_dir, "dash", run_id, "--once", "--json", "--interval", "0.5", "--timeout", "20")
    return json.loads(res.stdout)


def until_rates(state_dir: Path, run_id: str, names: set[str], timeout: float = 150, *,
                in_one_read: bool = False) -> dict[str, Any]:
    """The dashboard's JSON once every named task has been seen `running` with steps/s > 0 (each while it
    trained: a fast worker may be done before a slow one starts); returns each task as it was seen so.
    `in_one_read`: all of them in the same read (the run certainly still trains when it returns)."""
    shown: dict[str, Any] = {}
    last: dict[str, Any] = {}

    def seen() -> dict[str, Any] | None:
        tasks = {t["name"]: t for t in dash_json(state_dir, run_id)["tasks"]}
        last.update(tasks)
        if in_one_read:
            shown.clear()
        for n in names:
            if tasks[n]["state"] == "running" and (tasks[n]["steps_per_s"] or 0) > 0:
                shown[n] = tasks[n]
        return {**tasks, **shown} if names <= shown.keys() else None

    def explain() -> str:  # what the dashboard last said, and the run's last log lines (what its tasks did)
        said = "; ".join(f"{n} {t['state']} steps/s {t['steps_per_s']} step {t.get('global_step')}"
                         for n, t in sorted(last.items()))
        logs = cli(state_dir, "logs", run_id, "-n", "15").stdout
        return f"last seen: {said}\nlogs:\n{logs[-6000:]}"

    return wait_for(seen, timeout, f"{sorted(names)} running with a step rate", interval=1.0, explain=explain)
