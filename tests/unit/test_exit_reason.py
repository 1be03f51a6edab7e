"""Why a task ended, from the end of its log (training/supervisor/exit_reason.py): the line status and the
dashboard show beside an exit or a restart. Real files; the log texts are what Python and TF print."""

from __future__ import annotations

from pathlib import Path

from training.supervisor.exit_reason import MAX_CHARS, exit_reason

DISK_FULL = """--- tfcluster: starting worker-0 (attempt 1) at Thu Dec  3 13:00:00 2026
2026-12-03 13:00:05,000 INFO [worker:0] step 1600
Traceback (most recent call last):
  File "/w/code/training/graph/checkpointing.py", line 40, in save
    saver.save(sess, path)
OSError: [Errno 28] No space left on device
"""


def test_the_last_exception_line_is_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    log.write_text(DISK_FULL)
    assert exit_reason(str(log)) == "OSError: [Errno 28] No space left on device"


def test_without_an_error_line_the_last_line_says_it_and_notes_are_skipped(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("tick 1\ntick 2\n--- tfcluster: worker-0 exited (code 3)\n")
    assert exit_reason(str(log)) == "tick 2"


def test_a_long_line_is_cut_and_a_missing_or_empty_log_has_no_reason(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("ValueError: " + "x" * 500 + "\n")
    reason = exit_reason(str(log))
    assert reason is not None and len(reason) == MAX_CHARS and reason.endswith("…")
    assert exit_reason(str(tmp_path / "missing.log")) is None
    (tmp_path / "empty.log").write_text("")
    assert exit_reason(str(tmp_path / "empty.log")) is None
