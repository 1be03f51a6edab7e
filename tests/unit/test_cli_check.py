"""`tfcluster check` end to end on `transport = "local"` hosts (no network): exit codes, JSON, table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.run.local_ports import free_port_block

REPO = Path(__file__).resolve().parents[2]


def _hosts(tmp_path: Path, python: str) -> Path:
    base = free_port_block(4)
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'[cluster]\nname = "solo"\nbase_port = {base}\n\n'
        f'[[hosts]]\nname = "box"\naddress = "127.0.0.1"\nroles = ["ps", "worker"]\ntransport = "local"\n'
        f"python = {json.dumps(python)}\nworkdir = {json.dumps(str(tmp_path / 'work'))}\n"
    )
    return path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_ready_local_host_exits_0_with_json(tmp_path: Path) -> None:
    proc = _cli("check", str(_hosts(tmp_path, sys.executable)), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ready"] and report["hosts"][0]["host"] == "box"


def test_python_path_with_tilde_and_spaces(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "my venv" / "bin").mkdir(parents=True)
    wrapper = home / "my venv" / "bin" / "python"  # a script, not a symlink: a venv is found by its path
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    proc = _cli("check", str(_hosts(tmp_path, "~/my venv/bin/python")), "--json", env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["hosts"][0]["python_found"]


def test_not_ready_host_exits_1_and_table_says_why(tmp_path: Path) -> None:
    proc = _cli("check", str(_hosts(tmp_path, str(tmp_path / "nope" / "python"))))
    assert proc.returncode == 1
    assert "NOT READY" in proc.stdout and "python not found" in proc.stdout
    assert "EVERY interface" in proc.stdout


def test_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _cli("check", str(tmp_path / "absent.toml"))
    assert proc.returncode == 2
    assert "absent.toml" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
