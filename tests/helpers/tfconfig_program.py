"""A user's own plain-Python program for resize tests over sshd (no TensorFlow): each task writes the
TF_CONFIG it was started with to `<out>/<job>-<task>-<pid>.tfconfig` (atomically), then runs until stopped;
`tf_configs` reads them back, so a test waits for a task to run (a file) instead of sleeping. A task fails at
once (exit 3) while the test has left a `<out>/fail-<job>-<task>` file (`fail_file`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.waiting import wait_for

PROGRAM = '''\
import os, sys, time
if os.path.exists(os.path.join(sys.argv[1], f"fail-{sys.argv[2]}-{sys.argv[3]}")):
    sys.exit(3)  # the test wants this task to fail at once
out = os.path.join(sys.argv[1], f"{sys.argv[2]}-{sys.argv[3]}-{os.getpid()}.tfconfig")
with open(out + ".tmp", "w") as f:
    f.write(os.environ["TF_CONFIG"])
os.replace(out + ".tmp", out)
while True:
    time.sleep(0.5)
'''


def program_training(tmp: Path) -> dict[str, object]:
    """`[training]` of a hosts file running PROGRAM (written to `tmp`/prog.py, its files under `tmp`/seen)."""
    (tmp / "seen").mkdir(exist_ok=True)
    (tmp / "prog.py").write_text(PROGRAM)
    return {"command": f"{{python}} prog.py {tmp / 'seen'} {{job}} {{task}}", "sync": ["prog.py"]}


def tf_configs(tmp: Path, job: str, task: int) -> list[tuple[int, dict[str, Any]]]:
    """(pid, TF_CONFIG) of each process that ran as job:task, in start order."""
    files = sorted((tmp / "seen").glob(f"{job}-{task}-*.tfconfig"), key=lambda p: p.stat().st_mtime_ns)
    return [(int(p.name.split("-")[2].split(".")[0]), json.loads(p.read_text())) for p in files]


def fail_file(tmp: Path, job: str, task: int) -> Path:
    """While this file exists, job:task fails at once when it starts."""
    return tmp / "seen" / f"fail-{job}-{task}"


def first_pid(tmp: Path, job: str, task: int, timeout: float = 30.0) -> int:
    """The pid of the first process that ran as job:task, once it has written its TF_CONFIG."""
    return wait_for(lambda: tf_configs(tmp, job, task), timeout, f"{job}:{task} running")[0][0]
