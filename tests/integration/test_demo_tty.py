"""`tfcluster demo` in a real pseudo-terminal: the dashboard opens on the local TF cluster, shows the
workers running, and `q` quits it and stops every process of the run."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import requires

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
requires.tensorflow()
ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def run_processes(state_dir: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if str(state_dir) in " ".join(p.cmdline()) or "tfcluster-demo-" in p.environ().get("TFCLUSTER_RUN_DIR", ""):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.parametrize("how", ["q", "SIGHUP"])
def test_demo_dashboard_in_a_terminal_quits_and_stops_the_run(tmp_path: Path, how: str) -> None:
    """`q`, or the terminal closing (SIGHUP), ends the demo and stops its cluster: nothing is left."""
    env = {**os.environ, "TFCLUSTER_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm-256color",
           "COLUMNS": "120", "LINES": "40"}
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    # Exactly what `make demo` runs: no options, so the defaults are exercised too.
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "demo"], cwd=ROOT, env=env,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True, close_fds=True)
    os.close(slave)
    screen = b""

    def read_for(seconds: float) -> None:
        nonlocal screen
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    screen += os.read(master, 65536)
                except OSError:
                    return

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            read_for(1.0)
            text = ANSI.sub(b"", screen[-200_000:])
            if text.count(b"running") >= 3 and b"worker:1" in text and b"ps:0" in text:
                break
        text = ANSI.sub(b"", screen[-200_000:]).decode("utf-8", "replace")
        assert "worker:0" in text and "running" in text, text[-3000:]
        if how == "q":
            os.write(master, b"q")
        else:
            os.kill(proc.pid, signal.SIGHUP)
        # Read on while it quits, as a terminal does: a pty nobody reads fills up, and the app's writer
        # thread then blocks on its last frames (seen under load: the exit waited on that thread).
        quit_by = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < quit_by:
            read_for(0.2)
        proc.wait(timeout=1)
        read_for(0.5)
        tail = ANSI.sub(b"", screen[-20_000:]).decode("utf-8", "replace")
        assert proc.returncode == 0, tail[-3000:]
        assert "demo: stopping run" in tail
        time.sleep(1.0)
        left = [p for p in psutil.process_iter(["environ"])
                if "tfcluster-demo-" in ((p.info.get("environ") or {}).get("TFCLUSTER_RUN_DIR", ""))]
        assert not left, left
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in run_processes(tmp_path):
            p.kill()
        os.close(master)
