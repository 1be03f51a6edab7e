"""Issue 33 #12: the supervisor's `--- tfcluster:` notes in a task's log name the task as users read it,
`worker:1`, never by its file name `worker-1` (that form is storage only)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from tests.helpers.supervisor_runs import make_run, read_task_state, start_supervisor
from training.supervisor import notes
from training.supervisor.children import Task
from training.supervisor.policy import RestartBudget

FILE_NAME = re.compile(r"\bworker-1\b")


def test_the_note_texts_name_a_task_job_colon_index() -> None:
    task = Task("worker", 1, ["true"], {}, None, RestartBudget(0, 1.0))
    texts = [notes.starting(task.label, 1, "now"), notes.cannot_start(task.label, "port 1 is in use"),
             notes.held(task.label), notes.exited(task.label, "code 3")]
    assert all("worker:1" in text and not FILE_NAME.search(text) for text in texts), texts
    assert notes.line(texts[0]) == b"--- tfcluster: starting worker:1 (attempt 1) at now\n"


def test_a_supervised_task_log_names_it_worker_colon_1(tmp_path: Path, cleanup: Any) -> None:
    """A real supervisor: the start note of each attempt, and the note of a program that cannot run."""
    failing = {"job": "worker", "index": 1, "host": "h1", "env": {},
               "command": [sys.executable, "-c", "import sys; sys.exit(3)"]}
    missing = {"job": "worker", "index": 2, "host": "h1", "env": {}, "command": ["/nonexistent/program"]}
    layout = make_run(tmp_path / "a", [failing], max_restarts=1, backoff=0.05)
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=30) == 1
    assert read_task_state(layout, "worker", 1)["restarts"] == 1
    log = Path(layout.log_file("worker", 1)).read_text()
    assert "--- tfcluster: starting worker:1 (attempt 1)" in log and "starting worker:1 (attempt 2)" in log, log
    assert not FILE_NAME.search(log), log
    layout = make_run(tmp_path / "b", [missing], restart="never")
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=30) == 1
    log2 = Path(layout.log_file("worker", 2)).read_text()
    assert "cannot start worker:2:" in log2 and "worker-2" not in log2, log2
