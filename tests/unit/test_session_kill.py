"""`kill_script` (orchestrator/transport/shell_wrap.py), the SIGKILL a timed-out or closed SSH command gets,
run under this machine's /bin/sh against real processes: it kills the session's whole group while the
session's pid carries the session's tag, kills what is left of the group once the pid is gone, and never
touches a process that got the pid after the session ended (pid_max is 32768 here: a busy suite reuses
pids within seconds, and one such kill SIGKILLed an unrelated test's process)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.transport.shell_wrap import SESSION_ENV, kill_script, new_session_tag, sh_wrap
from tests.helpers.procs import gone, read_pid, wait_gone


def run_kill(pid: int, tag: str) -> None:
    subprocess.run(["/bin/sh", "-c", kill_script(pid, tag)], check=True, timeout=30)


def group_leader(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process leading its own group, as sshd makes a session's shell."""
    return subprocess.Popen(argv, env={**os.environ, **env}, start_new_session=True)


def test_the_sessions_group_is_killed_while_its_pid_carries_the_tag(tmp_path: Path) -> None:
    tag, child_pid = new_session_tag(), tmp_path / "child.pid"
    session = group_leader(["/bin/sh", "-c", f"sleep 60 & echo $! > {child_pid}; wait"], {SESSION_ENV: tag})
    child = read_pid(child_pid)
    run_kill(session.pid, tag)
    assert session.wait(timeout=30) == -9
    wait_gone(child)  # the whole group, not only the session's shell


def test_a_process_that_got_the_pid_later_is_left_alone() -> None:
    """Another process now holding the pid (here: a group leader without the tag, as a reused pid is) lives."""
    stranger = group_leader(["sleep", "60"], {SESSION_ENV: new_session_tag()})  # another session's tag
    try:
        run_kill(stranger.pid, new_session_tag())
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_what_is_left_of_the_group_dies_once_the_sessions_shell_is_gone(tmp_path: Path) -> None:
    tag, child_pid = new_session_tag(), tmp_path / "child.pid"
    session = group_leader(["/bin/sh", "-c", f"sleep 60 & echo $! > {child_pid}"], {SESSION_ENV: tag})
    assert session.wait(timeout=30) == 0  # reaped: its pid is free, its group lives on in the sleep
    child = read_pid(child_pid)
    assert not gone(child)
    run_kill(session.pid, tag)
    wait_gone(child)


def test_the_wrapped_command_carries_the_tag_even_after_sh_execs_it(tmp_path: Path) -> None:
    tag = new_session_tag()
    out = subprocess.run(["/bin/sh", "-c", sh_wrap(f"exec /bin/sh -c 'echo ${SESSION_ENV}'", tag=tag)],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    assert out.strip() == tag


@pytest.mark.parametrize("tag", ["", "ab;rm -rf /", "$(id)"])
def test_a_tag_that_is_not_letters_and_digits_is_refused(tag: str) -> None:
    with pytest.raises(ValueError, match="not a session tag"):
        kill_script(1234, tag)
