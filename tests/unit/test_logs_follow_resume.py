"""`logs -f -n K` starts with FOLLOW_FROM_LAST (orchestrator/run/logs.py): its first line is the number of
the first log line it shows, so that a reconnect resumes at the next line by number. Run under each shell
a host's /bin/sh may be, on real files, with the host's real `tail` (ended once it has shown what is
there: the test reads lines as events, never waits for a time). The resume itself, across a lost SSH
connection, is test_lifecycle's test_logs_follow_streams_lines_reconnects_and_ends_on_ctrl_c."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.run.logs import FOLLOW_FROM_LAST
from tests.requires import POSIX_SHELLS, posix_shell


def follow(shell: str, log: Path, k: int) -> subprocess.Popen[str]:
    return subprocess.Popen([*posix_shell(shell), "-c", FOLLOW_FROM_LAST, "sh", str(log), str(k)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def end(proc: subprocess.Popen[str]) -> None:
    proc.kill()  # tail -F follows for ever
    proc.wait()


def first_lines(shell: str, log: Path, k: int, n: int) -> list[str]:
    """The first `n` lines the script prints."""
    proc = follow(shell, log, k)
    try:
        assert proc.stdout is not None
        return [proc.stdout.readline().rstrip("\n") for _ in range(n)]
    finally:
        end(proc)


@pytest.mark.parametrize("shell", POSIX_SHELLS)
def test_it_numbers_the_first_line_it_shows(shell: str, tmp_path: Path) -> None:
    log = tmp_path / "worker 0's $(log).log"  # a path no shell may re-read
    log.write_text("".join(f"line {i}\n" for i in range(1, 6)))
    assert first_lines(shell, log, 2, 3) == ["4", "line 4", "line 5"]
    assert first_lines(shell, log, 9, 2) == ["1", "line 1"]  # fewer lines than asked: from the first
    log.write_text("line 1\nline 2\npart")  # a line still being written is not counted, and is shown
    proc = follow(shell, log, 1)
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline(), proc.stdout.readline()] == ["2\n", "line 2\n"]
        with log.open("a") as f:
            f.write("ly written\n")
        assert proc.stdout.readline() == "partly written\n"
    finally:
        end(proc)


@pytest.mark.parametrize("shell", POSIX_SHELLS)
def test_a_log_not_written_yet_is_followed_from_its_first_line(shell: str, tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    proc = follow(shell, log, 5)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "1\n"
        log.write_text("first\n")
        assert proc.stdout.readline() == "first\n"  # tail -F notices the file once it exists
    finally:
        end(proc)
