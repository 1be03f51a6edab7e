"""The transport contract, the same tests for both SSH clients (`[ssh] client = "paramiko" | "openssh"`)
against real sshd machines: values verbatim, stdin/exit code/env/cwd, a timeout that kills the remote
command, streams, sessions, shipping a file whole, and every error reason with the host named."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.errors import CommandFailed, HostError
from orchestrator.transport.base import Transport
from testkit.sshd import Machines
from tests.helpers.procs import read_pid, wait_gone
from tests.helpers.quoting import ECHO_ARGV, NASTY
from tests.helpers.ssh_clients import CLIENTS, client_transport, openssh_control_dir

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test its own shared connections: a master opened with good keys must not carry a test of bad ones."""
    with openssh_control_dir(monkeypatch) as directory:
        yield directory


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def t(client: str, machines: Machines) -> Iterator[Transport]:
    transport = client_transport(client, machines)
    yield transport
    transport.close()


def connect(transport: Transport) -> None:
    """Connect now (both clients have `connect`), so that connection errors surface here."""
    opened = getattr(transport, "connect", None)
    assert opened is not None, type(transport)
    opened()


def test_values_reach_the_remote_verbatim(t: Transport) -> None:
    result = t.run([*ECHO_ARGV, *NASTY], env={"IGNORED": "a b"})
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == NASTY
    assert result.stderr == ""  # the pid marker line is stripped, and ssh says nothing


def test_stdin_exit_code_env_and_cwd_with_tilde(t: Transport) -> None:
    result = t.run(["/bin/sh", "-c", 'cat; printf "%s|" "$X" "$PWD"; echo bad >&2; exit 4'],
                   stdin=b"from stdin\n", env={"X": "it's $x"}, cwd="~")
    assert result.exit_code == 4
    assert result.stdout.startswith("from stdin\nit's $x|/")
    assert result.stderr == "bad\n"
    with pytest.raises(CommandFailed) as info:
        t.run(["/bin/sh", "-c", "echo nope >&2; exit 3"], check=True)
    assert info.value.reason == "command-failed" and info.value.host == "m0" and "nope" in info.value.detail


def test_run_shell_timeout_kills_the_remote_command(t: Transport, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(HostError) as info:
        # a background child of the command: killing only the shell would leave it running
        t.run_shell(f"sleep 60 & echo $! > {pidfile}; wait", timeout=1.0)
    assert info.value.reason == "timeout" and info.value.host == "m0"
    assert time.monotonic() - started < 10
    wait_gone(read_pid(pidfile))  # the whole remote process group was killed, not just cut off
    assert t.run(["true"]).ok  # the transport is still usable


def test_stream_lines_exit_code_and_close_kills(t: Transport, tmp_path: Path) -> None:
    stream = t.stream(["/bin/sh", "-c", "for i in 1 2 3; do echo line $i; done; echo warn >&2; exit 2"])
    assert list(stream.lines()) == ["line 1", "line 2", "line 3"]
    assert stream.exit_code == 2
    stream.close()
    pidfile = tmp_path / "stream.pid"
    forever = t.stream(["/bin/sh", "-c", f"echo $$ > {pidfile}; echo start; exec sleep 60"])
    assert next(forever.lines()) == "start"
    forever.close()
    wait_gone(read_pid(pidfile))


def test_session_conversation_and_close_kills(t: Transport, tmp_path: Path) -> None:
    session = t.open_session('while read -r line; do echo "got $line"; done; echo bye; exit 5')
    session.send(b"one\ntwo\n")
    assert session.read_line(10) == "got one"
    assert session.read_line(10) == "got two"
    session.close_input()
    assert session.read_line(10) == "bye"
    assert session.read_line(10) is None
    assert session.exit_code == 5
    session.close()
    pidfile = tmp_path / "session.pid"
    waiting = t.open_session(f"echo $$ > {pidfile}; echo ready; exec sleep 60")
    assert waiting.read_line(10) == "ready"
    with pytest.raises(HostError) as info:
        waiting.read_line(0.2)
    assert info.value.reason == "timeout"
    waiting.close()
    wait_gone(read_pid(pidfile))


def test_ships_a_file_whole(t: Transport, tmp_path: Path) -> None:
    data = os.urandom(3 << 20) + b"end"  # several MiB: many pipe buffers and channel windows
    target = tmp_path / "shipped.bin"
    session = t.open_session(f"cat > {target} && sha256sum {target}")
    session.send(data)
    session.close_input()
    line = session.read_line(60)
    assert line is not None and line.split()[0] == hashlib.sha256(data).hexdigest()
    assert session.read_line(10) is None and session.exit_code == 0
    session.close()
    assert target.read_bytes() == data


# --- every error reason, naming the host -------------------------------------------------------------
def test_refused_when_nothing_listens(client: str, machines: Machines) -> None:
    with socket.socket() as s:
        s.bind((machines.addresses[0], 0))
        port = s.getsockname()[1]  # free, and nothing will listen on it
    with pytest.raises(HostError) as info:
        connect(client_transport(client, machines, port=port))
    assert info.value.reason == "refused" and info.value.host == "m0"


def test_timeout_when_the_host_never_speaks(client: str, machines: Machines) -> None:
    with socket.socket() as silent:
        silent.bind((machines.addresses[0], 0))
        silent.listen(8)  # accepts, never sends a banner
        with pytest.raises(HostError) as info:
            connect(client_transport(client, machines, port=silent.getsockname()[1], connect_timeout=1.0))
    assert info.value.reason == "timeout" and info.value.host == "m0"


def test_unreachable_when_the_name_does_not_resolve(client: str, machines: Machines) -> None:
    with pytest.raises(HostError) as info:
        connect(client_transport(client, machines, address="no-such-host.invalid"))
    assert info.value.reason == "unreachable" and "no-such-host.invalid" in info.value.detail


def test_auth_failed_with_a_key_the_host_does_not_know(client: str, machines: Machines, tmp_path: Path) -> None:
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, capture_output=True)
    with pytest.raises(HostError) as info:
        connect(client_transport(client, machines, identity_file=str(key)))
    assert info.value.reason == "auth-failed" and info.value.host == "m0"


def test_hostkey_unknown_and_changed(client: str, machines: Machines, tmp_path: Path) -> None:
    unknown = machines.write_known_hosts(tmp_path / "known_unknown", exclude=[0])
    with pytest.raises(HostError) as info:
        connect(client_transport(client, machines, known_hosts=unknown))
    assert info.value.reason == "hostkey-unknown" and info.value.host == "m0"
    # machine 0's name with machine 1's key: the key it offers is not the one recorded
    lines = machines.host_key_line(1).split(" ", 1)
    changed = tmp_path / "known_changed"
    changed.write_text(f"[{machines.addresses[0]}]:{machines.port} {lines[1]}\n")
    with pytest.raises(HostError) as info:
        connect(client_transport(client, machines, known_hosts=str(changed)))
    assert info.value.reason == "hostkey-changed" and info.value.host == "m0"


def test_lost_when_the_machine_dies_while_streaming(client: str, sshd_machines: Callable[[int], Machines]) -> None:
    m = sshd_machines(1)
    try:
        transport = client_transport(client, m)
        stream = transport.stream(["/bin/sh", "-c", "while true; do echo tick; sleep 0.1; done"])
        lines = stream.lines()
        assert next(lines) == "tick"
        m.stop(0)  # the machine dies: sshd and its sessions are killed
        with pytest.raises(HostError) as info:
            for _ in lines:
                pass
        assert info.value.reason == "lost" and info.value.host == "m0"
        stream.close()
        transport.close()
    finally:
        m.close()
