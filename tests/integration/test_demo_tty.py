"""`tfcluster demo` in a real pseudo-terminal: the dashboard opens on the local TF cluster, shows the
workers running, and `q` quits it and stops every process of the run."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tests import requires
from tests.helpers.terminal import Terminal
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import run_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
requires.tensorflow()
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["q", "SIGHUP"])
def test_demo_dashboard_in_a_terminal_quits_and_stops_the_run(state_dir: Path, how: str) -> None:
    """`q`, or the terminal closing (SIGHUP), ends the demo and stops its cluster: nothing is left. (A demo
    killed by a failed test leaves its record in the test's state dir: conftest's state_dir stops it.)"""
    # Exactly what `make demo` runs: no options, so the defaults are exercised too.
    with Terminal([sys.executable, "-m", "tfcluster", "demo"], dict(os.environ), ROOT) as term:
        text = term.wait_until_shown(lambda t: t.count("running") >= 3 and "worker:1" in t and "ps:0" in t, 300,
                                  "the dashboard to show the tasks running")
        assert "worker:0" in text and "running" in text, text[-3000:]
        started = re.search(r"demo: run (\S+) started", term.text(tail=len(term.screen)))
        assert started, term.text()[-3000:]
        if how == "q":
            term.write(b"q")
        else:
            os.kill(term.proc.pid, signal.SIGHUP)
        code = term.wait_exit(90)
        tail = term.text(tail=20_000)
        assert code == 0, tail[-3000:]
        assert "demo: stopping run" in tail
    wait_for(lambda: not run_processes(started.group(1)), 30, "every process of the demo's run to exit")
