"""Dead hosts cost a bounded wait (issue 33 item 6), through the real CLI over real sshd machines, one of
them played by a real listening socket on its address and port:

- `silent`: it accepts TCP and never speaks SSH (a hung machine). `status` and `stop` of a run there end
  within the host's connect timeout and one retry, whatever their own `--timeout`, naming the host and the
  cause (before: `status` waited its whole --timeout, `stop` its --timeout plus --grace).
- `reset`: it accepts and resets every connection at once (SO_LINGER 0). `check` says `refused` and
  "reset", not `timeout`; `start` fails at once, not tried again (before: retried until its timeout).

Each command's time is bounded by the subprocess timeout of `cli`, far above 2 connect timeouts and far
below what the old retries took (the commands' own timeouts are set long so that the two cannot be
confused on a loaded machine).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, started_run_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = "90"  # status's and stop's --timeout: what the old retries used up on a dead host
BOUND_S = 45.0  # > 2 connect timeouts + a CLI's start on a loaded machine; < COMMAND_TIMEOUT


class DeadHost:
    """A real listening socket on (address, port) playing a dead machine: `silent` accepts every connection
    and holds it without a byte; `reset` accepts and closes each with SO_LINGER 0 (the peer reads ECONNRESET)."""

    def __init__(self, address: str, port: int, how: Literal["silent", "reset"]) -> None:
        self.how = how
        self.listener = socket.create_server((address, port))
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            if self.how == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                self.held.append(conn)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self.listener.close()
        self._thread.join()
        for conn in self.held:
            conn.close()


@contextlib.contextmanager
def dead_machine(machines: Machines, i: int, how: Literal["silent", "reset"]) -> Iterator[DeadHost]:
    """Machine i's sshd killed (a run's detached processes there live on) and a DeadHost in its place;
    its sshd is back at the end."""
    machines.stop(i)
    host = DeadHost(machines.addresses[i], machines.port, how)
    try:
        yield host
    finally:
        host.close()
        machines.start(i)


def hosts_file(machines: Machines, tmp_path: Path) -> Path:
    (tmp_path / "prog.py").write_text("import time\ntime.sleep(300)\n")
    return machines.hosts_toml(tmp_path / "hosts.toml", connect_timeout=CONNECT_TIMEOUT,
                               training={"command": "{python} prog.py", "sync": ["prog.py"]})


def test_status_and_stop_on_a_silent_host_are_bounded_by_its_connect_timeout(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    started = cli(state_dir, "start", str(hosts_file(machines, tmp_path)))
    assert started.returncode == 0, started.stdout + started.stderr
    run_id = started_run_id(started.stdout)
    with dead_machine(machines, 2, "silent") as dead:
        status = cli(state_dir, "status", run_id, "--json", "--timeout", COMMAND_TIMEOUT, timeout=BOUND_S)
        assert dead.accepted == 2, f"{dead.accepted} connections: one try and one retry expected"
        tasks = {t["name"]: t for t in json.loads(status.stdout)["tasks"]}
        assert tasks["worker:1"]["state"] == "unreachable", tasks["worker:1"]
        # m1 answered meanwhile: its task is alive (a program that sleeps and reports nothing is `stalled`
        # once a liveness window passes without CPU time, which a loaded machine may take to get here)
        assert tasks["worker:0"]["state"] in ("running", "stalled"), tasks["worker:0"]

        stop = cli(state_dir, "stop", run_id, "--timeout", COMMAND_TIMEOUT, "--grace", "1", timeout=BOUND_S)
        assert stop.returncode == 3, stop.stdout + stop.stderr  # a host could not be reached
        line = next(x for x in stop.stdout.splitlines() if "m2" in x)
        assert "timeout" in line and "Traceback" not in stop.stderr, stop.stdout + stop.stderr
        assert dead.accepted == 4, f"{dead.accepted - 2} connections: one try and one retry expected"


def test_a_host_that_resets_is_refused_by_check_and_start_at_once(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = hosts_file(machines, tmp_path)
    with dead_machine(machines, 2, "reset") as dead:
        check = cli(state_dir, "check", str(hosts), "--json", timeout=BOUND_S)
        row = {h["host"]: h for h in json.loads(check.stdout)["hosts"]}["m2"]
        assert check.returncode == 3 and row["failure"] == "refused", row
        assert any("reset" in p for p in row["problems"]), row
        accepted = dead.accepted

        start = cli(state_dir, "start", str(hosts), timeout=BOUND_S)  # its own timeout: the default 120 s
        assert start.returncode == 3 and "started " not in start.stdout, start.stdout + start.stderr
        errors = [line for line in start.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: host m2: refused") and "reset" in errors[0], \
            start.stderr
        assert dead.accepted == accepted + 1, "a refusal that will not change was tried again"
