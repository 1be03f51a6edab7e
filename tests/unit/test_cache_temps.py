"""Issue 33 item 10: who may remove a temporary file of the shared content cache. Real files, real writer
processes (training/run/content_cache.py's Scratch in a child python): a writer owns its names by the
lock it holds, so no host name, prefix or local pid check can make one start remove another's files."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.waiting import wait_for
from training.run.content_cache import Scratch

REPO = Path(__file__).resolve().parents[2]

# A start's writer: a Scratch in the cache, one half-written temporary file, then it waits for stdin to end.
# "away": it forks and the first process exits, so the pid in the names is a dead one here while the lock
# lives on in the child: what a writer on another machine sharing the home looks like from this one.
WRITER = """\
import os, sys
sys.path.insert(0, sys.argv[3])
from training.run.content_cache import Scratch
scratch = Scratch(sys.argv[1])
path = scratch.name()
with open(path, "w") as f:
    f.write("half")
if sys.argv[2] == "away" and os.fork() != 0:
    os._exit(0)
print(path, flush=True)
sys.stdin.read()
"""


@contextmanager
def writer(cache: Path, how: str = "here") -> Iterator[tuple[subprocess.Popen[str], Path]]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(cache), how, str(REPO)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield proc, Path(proc.stdout.readline().strip())
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _lock_of(temp: Path) -> Path:
    return temp.with_name(temp.name.rsplit("-", 1)[0] + ".lock")


def _free(lock: Path) -> bool:
    """The lock can be taken (its holder is gone); released at once."""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_live_writers_temporary_file_is_never_removed(tmp_path: Path) -> None:
    with writer(tmp_path) as (_proc, temp):
        Scratch.remove_stale(str(tmp_path))
        assert temp.read_text() == "half" and _lock_of(temp).exists()


def test_a_writer_whose_pid_means_nothing_here_keeps_its_files_while_it_lives(tmp_path: Path) -> None:
    """The pid in the names is dead on this machine (as another machine's pid may be): the writer's lock,
    not that pid, says it lives. Once it is gone, the next cleaner removes its files and lock."""
    with writer(tmp_path, "away") as (proc, temp):
        assert proc.wait(timeout=30) == 0  # the process named in the temp files is gone
        Scratch.remove_stale(str(tmp_path))
        assert temp.read_text() == "half" and _lock_of(temp).exists()
        assert proc.stdin is not None
        proc.stdin.close()  # the forked writer holding the lock ends
        wait_for(lambda: _free(_lock_of(temp)), 30, "the writer's lock released")
        Scratch.remove_stale(str(tmp_path))
        assert os.listdir(tmp_path) == []


def test_a_killed_writers_files_are_removed_by_the_next_cleaner(tmp_path: Path) -> None:
    with writer(tmp_path) as (proc, temp):
        proc.kill()  # SIGKILL: no time to clean up
        proc.wait()
        mine = Scratch(str(tmp_path))  # a live start beside it keeps its own lock
        Scratch.remove_stale(str(tmp_path))
        assert not temp.exists() and not _lock_of(temp).exists()
        assert os.listdir(tmp_path) == [os.path.basename(mine.stem) + ".lock"]
        mine.close()
    assert os.listdir(tmp_path) == []


def test_a_name_of_another_form_is_never_judged(tmp_path: Path) -> None:
    """`.tmp-w-<pid>-...` (a host named `w-<pid>` in an earlier tfcluster's names, or anything else): no
    prefix is matched and no pid in it is judged, even one dead here."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True,
                          text=True)
    dead_pid = int(gone.stdout)
    other = tmp_path / f".tmp-w-{dead_pid}-{os.getpid()}-abcd1234-1"
    other.write_text("someone's")
    Scratch.remove_stale(str(tmp_path))
    assert other.read_text() == "someone's"
