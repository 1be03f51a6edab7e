"""The collector's StreamPump over real sshd: one thread reads several hosts' SSH streams without
blocking, loses no line, and tells each stream's owner how it ended (cleanly, closed here, the machine
died, the pump stopped)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from orchestrator.config.schema import SSHOptions
from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.monitor.pump import StreamPump
from orchestrator.transport.ssh import SSHTransport
from orchestrator.transport.ssh_channel import SSHLineStream
from testkit.sshd import Machines
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.integration


class Owner:
    """What a HostStream keeps of its pumped stream: the lines in order, and how it ended."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.batches = 0
        self.ended = threading.Event()
        self.why: str | None = "(not ended)"

    def on_lines(self, lines: list[str]) -> None:
        self.lines += lines
        self.batches += 1

    def on_end(self, why: str | None) -> None:
        self.why = why
        self.ended.set()


def transport(m: Machines, i: int) -> SSHTransport:
    opts = SSHOptions.model_validate({"user": m.user, "port": m.port, "identity_file": m.identity_file,
                                      "known_hosts": m.known_hosts, "config_file": "none", "use_agent": False,
                                      "connect_timeout": 5.0})
    return SSHTransport(f"m{i}", resolve_ssh(m.addresses[i], opts))


def pumped(pump: StreamPump, t: SSHTransport, script: str) -> tuple[SSHLineStream, Owner]:
    stream = t.stream(["/bin/sh", "-c", script])
    assert isinstance(stream, SSHLineStream)
    owner = Owner()
    pump.add(stream, owner.on_lines, owner.on_end)
    return stream, owner


def test_one_thread_reads_every_stream_and_reports_each_end(sshd_machines: Callable[[int], Machines]) -> None:
    m = sshd_machines(3)
    stop = threading.Event()
    pump = StreamPump(0.25, stop)
    pump.start()
    transports = [transport(m, i) for i in range(3)]
    try:
        # m0: 40 lines over ~2 s, an unterminated last one, exit 3; m1: forever, closed here; m2: forever,
        # then the machine dies.
        _, finite = pumped(pump, transports[0], "i=0; while [ $i -lt 40 ]; do echo $i; i=$((i+1)); "
                                               "sleep 0.05; done; printf last; exit 3")
        closed_stream, closed = pumped(pump, transports[1], "while true; do echo tick; sleep 0.05; done")
        _, dying = pumped(pump, transports[2], "while true; do echo tock; sleep 0.05; done")

        assert finite.ended.wait(20), finite.lines
        assert finite.why is None  # a clean end: the owner reads the exit code and stderr itself
        assert finite.lines == [*(str(i) for i in range(40)), "last"]
        assert finite.batches <= 16, finite.batches  # ~2 s read 4 times a second, not once per line (load slack)

        wait_for(lambda: closed.lines and dying.lines, 10, "the endless streams' first lines")
        closed_stream.close()
        assert closed.ended.wait(10) and closed.why is None  # closed here: a clean end
        assert set(closed.lines) == {"tick"}

        m.stop(2)  # sshd and its sessions are killed: the connection is lost
        assert dying.ended.wait(20)
        assert dying.why is not None and "lost" in dying.why, dying.why
    finally:
        stop.set()
        pump.join(timeout=10)
        for t in transports:
            t.close()
        m.close()
    assert not pump.is_alive()


def test_a_stopped_pump_ends_its_streams_and_refuses_new_ones(sshd_machines: Callable[[int], Machines]) -> None:
    m = sshd_machines(1)
    stop = threading.Event()
    pump = StreamPump(0.25, stop)
    pump.start()
    t = transport(m, 0)
    try:
        stream, owner = pumped(pump, t, "while true; do echo tick; sleep 0.1; done")
        wait_for(lambda: owner.lines, 10, "the first line")
        stop.set()
        assert owner.ended.wait(5) and owner.why == "stopped"
        pump.join(timeout=5)
        t0 = time.monotonic()
        late_stream, late = pumped(pump, t, "sleep 60")
        assert late.ended.is_set() and late.why == "stopped" and time.monotonic() - t0 < 5
        stream.close()
        late_stream.close()
    finally:
        t.close()
        m.close()
