"""`tfcluster tensorboard` and `tfcluster pull` refuse bad input in one line with exit code 2, starting
nothing: an unknown run, a port in use, TensorBoard missing here, a destination that is a file. And `pull`
over the local transport copies a run's logs into DEST (the real CLI in a subprocess)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from orchestrator.results.board_state import state_path
from tests.helpers.results import local_record

REPO = Path(__file__).resolve().parents[2]
# TensorBoard is installed in the test environment; to see the CLI without it, find_spec is told it is not.
WITHOUT_TENSORBOARD = (
    "import importlib.util, sys; real = importlib.util.find_spec; "
    "importlib.util.find_spec = lambda name, *a: None if name == 'tensorboard' else real(name, *a); "
    "from tfcluster.cli import main; sys.argv = ['tfcluster', *sys.argv[1:]]; main()")


def tfcluster(*args: str, prelude: list[str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *(prelude or ["-m", "tfcluster"]), *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)})


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_an_unknown_run_is_refused(state_dir: Path) -> None:
    assert "unknown run 'nope'" in one_error_line(tfcluster("tensorboard", "nope"))
    assert "unknown run 'nope'" in one_error_line(tfcluster("pull", "nope"))


def test_a_port_in_use_is_refused_before_anything_starts(state_dir: Path, tmp_path: Path) -> None:
    record = local_record(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(tfcluster("tensorboard", record.run_id, "--port", str(port)))
    assert line.startswith(f"error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert not state_path(record.run_id).exists()


def test_tensorboard_missing_here_names_the_extra(state_dir: Path, tmp_path: Path) -> None:
    record = local_record(tmp_path)
    line = one_error_line(tfcluster(record.run_id, prelude=["-c", WITHOUT_TENSORBOARD, "tensorboard"]))
    assert line == "error: tensorboard is not installed here: pip install 'tfcluster[tensorboard]'"


def test_pull_into_a_file_is_refused(state_dir: Path, tmp_path: Path) -> None:
    record = local_record(tmp_path)
    (tmp_path / "afile").write_text("")
    assert "afile: exists and is not a directory" in one_error_line(
        tfcluster("pull", record.run_id, str(tmp_path / "afile")))


def test_pull_logs_copies_every_hosts_logs_into_the_run_id_dir(state_dir: Path, tmp_path: Path) -> None:
    record = local_record(tmp_path)
    for host, task in (("m0", "worker-0"), ("m1", "worker-1")):
        (tmp_path / host / "logs").mkdir(parents=True)
        (tmp_path / host / "logs" / f"{task}.log").write_text(f"{task} trained\n")
    here = tmp_path / "cwd"
    here.mkdir()
    res = tfcluster("pull", record.run_id, "--logs", cwd=here)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "m0: 1 file(s) copied" in res.stdout and "m1: 1 file(s) copied" in res.stdout
    assert (here / record.run_id / "logs" / "worker-1.log").read_text() == "worker-1 trained\n"
