"""Issue 33 #8 (the log half): `[training] max_log_mb` caps each task's log, one older part kept as
`<job>-<task>.log.1`; the current file always ends with the newest lines (what `logs` shows).
training/supervisor/log_cap.py rotates as copytruncate does, in the supervisor's loop."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from tests.helpers.supervisor_runs import make_run, read_task_state, start_supervisor
from tests.helpers.waiting import wait_for
from training.supervisor.log_cap import rotate

CAP_MB = 0.05
CAP = int(CAP_MB * 2**20)
CHUNK = CAP // 4
# Writes its log (found through its stdout) a quarter of the cap at a time, 12 times; after each write it
# waits until the log is back under the cap, so the supervisor had its turn: what the test sees of the
# sizes does not depend on how fast either runs. Then its last line, then it runs until stopped.
COOPERATIVE = f"""
import os, sys, time
log = os.readlink("/proc/self/fd/1")
for i in range(12):
    sys.stdout.write(f"chunk {{i:02d}} " + "x" * ({CHUNK} - 10) + "\\n")
    sys.stdout.flush()
    while os.stat(log).st_size > {CAP}:
        time.sleep(0.01)
print("LAST LINE", flush=True)
time.sleep(60)
"""


def test_a_task_log_stays_under_its_cap_and_ends_with_its_newest_line(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [{"job": "worker", "index": 0, "host": "h1", "env": {},
                                   "command": [sys.executable, "-c", COOPERATIVE]}])
    run = json.loads(Path(layout.run_file).read_text())
    run["plan"]["training"]["max_log_mb"] = CAP_MB
    Path(layout.run_file).write_text(json.dumps(run))
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    cleanup[1].append(layout.root)
    log = Path(layout.log_file("worker", 0))
    rotated = Path(str(log) + ".1")
    sizes: list[int] = []

    def last_part_done() -> bool:
        for f in (log, rotated):  # sampled while it writes: never past the cap and one chunk
            if f.exists():
                sizes.append(f.stat().st_size)
        # The last part holds the last line and its note. The task writes as soon as the truncation lets
        # it, a few system calls before the supervisor appends the note: the last line alone is too early.
        text = log.read_text() if log.exists() else ""
        return "LAST LINE" in text and "--- tfcluster: log continued" in text

    def parts() -> str:
        """What each part holds, in order (its chunk numbers, its notes, the last line): where a line went."""
        said = []
        for f in (rotated, log):
            text = f.read_text() if f.exists() else "(none)"
            marks = re.findall(r"chunk \d\d|LAST LINE|--- tfcluster: [a-z ]+", text)
            said.append(f"{f.name} ({len(text)} chars): {marks}")
        return "\n".join([*said, f"task state: {read_task_state(layout, 'worker', 0)}"])

    wait_for(last_part_done, 60, "the task's last line and the note of the part it is in", explain=parts)
    bound = CAP + CHUNK + 200  # one chunk past the cap, and the note that starts a part
    assert rotated.exists() and max(sizes) <= bound, (max(sizes), bound)
    text, older = log.read_text(), rotated.read_text()
    # the note that starts a part is appended just after the truncation: a line the task wrote in between
    # may come before it
    assert "worker-0.log.1" in text
    own = [line for line in text.splitlines() if not line.startswith("--- tfcluster:")]
    assert own[-1] == "LAST LINE" and "chunk 11" in text + older  # the lines before it are kept
    assert "chunk 00" not in text + older  # the part before the older one was dropped
    assert {p.name for p in log.parent.iterdir() if p.name.startswith("worker-0")} == {"worker-0.log", "worker-0.log.1"}


def test_a_writer_goes_on_in_the_new_part_and_a_second_turn_drops_the_first(tmp_path: Path) -> None:
    path = tmp_path / "worker-1.log"
    writer = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # as a task holds its log
    try:
        os.write(writer, b"a" * 400 + b"\n")
        assert rotate(str(path), 300) and not rotate(str(path), 300)  # rotated once: under the cap again
        os.write(writer, b"b" * 400 + b"\n")
        assert Path(str(path) + ".1").read_bytes() == b"a" * 400 + b"\n"
        assert rotate(str(path), 300)
        os.write(writer, b"c\n")
    finally:
        os.close(writer)
    older = Path(str(path) + ".1").read_text()
    assert "a" not in older.split("\n", 1)[1] and older.endswith("b" * 400 + "\n")  # "a..." dropped
    text = path.read_text()
    assert text.startswith("--- tfcluster: log continued") and "worker-1.log.1" in text and text.endswith("c\n")
    assert not Path(str(path) + ".2").exists() and not list(tmp_path.glob("*.tmp-*"))


def test_a_log_under_its_cap_or_missing_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ps-0.log"
    assert not rotate(str(path), 100)
    path.write_bytes(b"x" * 100)
    assert not rotate(str(path), 100) and path.read_bytes() == b"x" * 100
