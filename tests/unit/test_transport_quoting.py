"""Every value reaches the command verbatim, through the exact shell strings both transports execute.

LocalTransport runs `/bin/sh -c shell_command(...)`; SSHTransport sends `sh_wrap(shell_command(...))` to
the remote login shell. Both are executed here by a real /bin/sh (no network)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.transport.base import shell_command
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.shell_wrap import sh_wrap, split_pid_marker
from tests.helpers.procs import read_pid, wait_gone
from tests.helpers.quoting import ECHO_ARGV, NASTY


def test_local_transport_passes_values_verbatim() -> None:
    result = LocalTransport("local").run([*ECHO_ARGV, *NASTY])
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == NASTY


def test_env_values_verbatim() -> None:
    env = {f"V{i}": v for i, v in enumerate(NASTY)}
    script = "import json, os; print(json.dumps([os.environ[f'V{i}'] for i in range(" + str(len(NASTY)) + ")]))"
    result = LocalTransport("local").run([sys.executable, "-c", script], env=env)
    assert json.loads(result.stdout) == NASTY


def test_ssh_wrapped_command_passes_values_verbatim_and_reports_pid() -> None:
    """What the remote login shell gets: one string; run it the way sshd does (`$SHELL -c string`)."""
    remote = sh_wrap(shell_command([*ECHO_ARGV, *NASTY], env={"A": "x y;$z"}))
    proc = subprocess.run(["/bin/sh", "-c", remote], check=False, capture_output=True, timeout=30)
    assert json.loads(proc.stdout) == NASTY
    pid, stderr = split_pid_marker(proc.stderr)
    assert pid is not None and pid > 1
    assert stderr == b""


def test_cwd_with_tilde_and_spaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home dir"
    (home / "work dir").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    result = LocalTransport("local").run(["pwd"], cwd="~/work dir")
    assert result.stdout.strip() == str(home / "work dir")


def test_exit_code_stdout_stderr_and_stdin() -> None:
    result = LocalTransport("local").run(["/bin/sh", "-c", "cat; echo oops >&2; exit 7"], stdin=b"in\n")
    assert (result.exit_code, result.stdout, result.stderr) == (7, "in\n", "oops\n")
    assert result.duration_s >= 0


def test_timeout_kills_the_command_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(HostError) as info:
        LocalTransport("box").run(["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert info.value.reason == "timeout" and info.value.host == "box"
    assert time.monotonic() - started < 10
    wait_gone(read_pid(pidfile))  # the background child died with the command


def test_stream_yields_lines_then_exit_code() -> None:
    stream = LocalTransport("local").stream(["/bin/sh", "-c", "echo one; echo 'two words'; echo err >&2; exit 3"])
    assert list(stream.lines()) == ["one", "two words"]
    assert stream.exit_code == 3
    stream.close()


def test_stream_close_kills_a_running_command() -> None:
    stream = LocalTransport("local").stream(["/bin/sh", "-c", "echo ready; exec sleep 60"])
    lines = stream.lines()
    assert next(lines) == "ready"
    started = time.monotonic()
    stream.close()
    assert stream.exit_code is not None and stream.exit_code != 0
    assert time.monotonic() - started < 5


def test_program_with_tilde_is_the_remote_home_and_the_rest_stays_quoted(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`python = "~/venv/bin/python"` in hosts.toml: the program path means the remote home, as in
    `check`; a `~` anywhere else is a literal value."""
    home = tmp_path / "home dir"
    (home / "venv bin").mkdir(parents=True)
    (home / "venv bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("HOME", str(home))
    argv = ["~/venv bin/python", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "~/not-expanded", "~"]
    result = LocalTransport("local").run(argv)
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == ["~/not-expanded", "~"]


def test_ssh_wrapped_script_keeps_its_own_quoting_and_exit_code() -> None:
    """run_shell sends a script as is (no second `sh -c`): `$$`, `set -e` and exit codes are the script's."""
    script = "set -e\necho \"me $$\"\nfalse\necho never"
    proc = subprocess.run(["/bin/sh", "-c", sh_wrap(script)], check=False, capture_output=True, timeout=30)
    pid, _ = split_pid_marker(proc.stderr)
    assert proc.returncode == 1 and proc.stdout.decode().split() == ["me", str(pid)]
