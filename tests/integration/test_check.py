"""`tfcluster check` over real SSH against real sshd processes on loopback "machines"."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.config.load import load_config
from orchestrator.plan.from_file import plan_config
from orchestrator.run.check import HostCheck, run_check
from orchestrator.transport.factory import transport_for
from testkit.sshd import Machines
from tests.helpers.waiting import wait_for
from tfcluster.cli import app

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def check_json(hosts_toml: Path) -> tuple[int, dict[str, Any]]:
    """`tfcluster check --json` in this process (the same Typer app; a fresh process per call would
    double this module's run time). The table output is tested through the real CLI with `cli`."""
    result = CliRunner().invoke(app, ["check", str(hosts_toml), "--json"])
    assert result.stdout, result.output
    return result.exit_code, json.loads(result.stdout)


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in report["hosts"]}


def test_all_ready_then_one_machine_stopped(machines: Machines, tmp_path: Path) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", connect_timeout=3)
    code, report = check_json(hosts)
    assert code == 0, report
    assert report["ready"] and all(h["ready"] for h in report["hosts"])
    m1 = rows(report)["m1"]
    assert m1["python_found"] and m1["tf_version"] and m1["tf_matches"]
    assert m1["ports"] and all(v is None for v in m1["ports"].values())
    assert m1["clock_offset_s"] is not None and abs(m1["clock_offset_s"]) < 1

    machines.stop(2)
    try:
        proc = cli("check", str(hosts))
        code, report = check_json(hosts)
    finally:
        machines.start(2)
    assert proc.returncode == 3  # a host could not be reached (tfcluster/exit_codes.py)
    assert "NOT READY" in proc.stdout and "refused" in proc.stdout
    assert code == 3 and not report["ready"]
    by_host = rows(report)
    assert by_host["m2"]["reachable"] is False and by_host["m2"]["failure"] == "refused"
    assert by_host["m2"]["duration_s"] < 3  # reported within the connect timeout, never a hang
    assert by_host["m0"]["ready"] and by_host["m1"]["ready"]


def test_unknown_host_key_refused_under_yes_recorded_under_accept_new(machines: Machines, tmp_path: Path) -> None:
    known_hosts = machines.write_known_hosts(tmp_path / "known_hosts", exclude=[1])
    before = Path(known_hosts).read_text()
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", known_hosts=known_hosts, strict_host_key_checking="yes")
    code, report = check_json(hosts)
    assert code == 1
    m1 = rows(report)["m1"]
    assert m1["failure"] == "hostkey-unknown" and m1["reachable"] and not m1["auth"]
    assert rows(report)["m0"]["ready"] and rows(report)["m2"]["ready"]
    assert Path(known_hosts).read_text() == before  # `yes` never writes

    hosts = machines.hosts_toml(tmp_path / "hosts.toml", known_hosts=known_hosts, strict_host_key_checking="accept-new")
    code, report = check_json(hosts)
    assert code == 0, report
    assert machines.host_key_line(1) + "\n" in Path(known_hosts).read_text()  # recorded, exactly that key

    hosts = machines.hosts_toml(tmp_path / "hosts.toml", known_hosts=known_hosts, strict_host_key_checking="yes")
    code, report = check_json(hosts)
    assert code == 0, report  # now known


def test_policy_no_accepts_unknown_key_with_a_loud_warning(machines: Machines, tmp_path: Path) -> None:
    known_hosts = machines.write_known_hosts(tmp_path / "known_hosts", exclude=[0])
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", known_hosts=known_hosts, strict_host_key_checking="no")
    proc = cli("check", str(hosts))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HOST KEY NOT VERIFIED for host m0" in proc.stdout
    assert Path(known_hosts).read_text().count("\n") == 2  # `no` records nothing


def test_changed_host_key_refused_under_every_policy(
    sshd_machines: Callable[[int], Machines], tmp_path: Path
) -> None:
    m = sshd_machines(2)  # its own machines: this test re-keys one of them
    known_hosts = m.write_known_hosts(tmp_path / "known_hosts")
    m.new_host_key(1)
    before = Path(known_hosts).read_text()
    for policy in ("yes", "accept-new", "no"):
        hosts = m.hosts_toml(tmp_path / "hosts.toml", known_hosts=known_hosts, strict_host_key_checking=policy)
        code, report = check_json(hosts)
        assert code == 1, policy
        m1 = rows(report)["m1"]
        assert m1["failure"] == "hostkey-changed", (policy, m1)
        assert any("man-in-the-middle" in p for p in m1["problems"])
        assert rows(report)["m0"]["ready"]
    assert Path(known_hosts).read_text() == before
    m.close()


def test_wrong_key_is_auth_failure(machines: Machines, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", identity_file=str(wrong))
    code, report = check_json(hosts)
    assert code == 1
    for row in report["hosts"]:
        assert row["reachable"] and not row["auth"] and row["failure"] == "auth-failed"
    proc = cli("check", str(hosts))
    assert "auth-failed" in proc.stdout


class SilentHost:
    """A machine whose TCP port accepts but never speaks SSH (a hung sshd): a bare listener on 127.0.0.1.
    `hang_up()` closes every connection it accepted and stops listening."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._lock = threading.Lock()
        self._hung_up = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # hung up
            with self._lock:
                if self._hung_up:
                    conn.close()
                    return
                self.accepted.append(conn)

    def hang_up(self) -> None:
        with self._lock:
            if self._hung_up:
                return
            self._hung_up = True
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept()
            self.listener.close()
            for conn in self.accepted:
                conn.close()
        self._acceptor.join()

    def __enter__(self) -> SilentHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.hang_up()


def silent_first(machines: Machines, tmp_path: Path, silent: SilentHost, connect_timeout: float,
                 roles: list[list[str]]) -> Path:
    """A hosts.toml whose first host (m0) is the silent listener, with its own connect timeout. The tasks
    run a user's command (never started here): the other hosts' probes then never import TensorFlow."""
    return machines.hosts_toml(
        tmp_path / "hosts.toml", roles=roles, connect_timeout=5, training={"command": "{python} train.py"},
        host_extra={0: {"address": "127.0.0.1",
                        "ssh": {"port": silent.port, "connect_timeout": connect_timeout}}},
    )


def test_a_silent_host_does_not_hold_the_others_back(machines: Machines, tmp_path: Path) -> None:
    """m0 is silent and comes first (a serial check would hold the others back behind it), with a connect
    timeout longer than the test: it ends only when its listener hangs up, and that happens once m1 and m2
    have reported. Their rows come first whatever the load; a check that waited for m0 before the others
    would see m0's row first, after its whole connect timeout."""
    order: list[str] = []
    with SilentHost() as silent:
        hosts = silent_first(machines, tmp_path, silent, 120.0, [["worker"], ["ps"], ["chief", "worker"]])
        plan = plan_config(load_config(hosts), str(hosts))

        def record(row: HostCheck) -> None:
            order.append(row.host)
            if {"m1", "m2"} <= set(order):
                # m0 must be waiting for the banner on an accepted connection when it is closed (its
                # connect runs in parallel and is accepted at once: this only orders the two events).
                wait_for(lambda: silent.accepted, 30, "m0's connection accepted")
                silent.hang_up()

        report = run_check(plan, transport_for, timeout=60, on_result=record)
    by_host = {h.host: h for h in report.hosts}
    assert sorted(order[:2]) == ["m1", "m2"] and order[2:] == ["m0"], order  # the others were not held back
    assert by_host["m1"].ready and by_host["m2"].ready
    # The listener closed m0's connection before any banner: a reset (Paramiko's banner unread), or, had the
    # close come before Paramiko sent it, an EOF whose one retry finds nothing listening. Either way the host
    # refused (orchestrator/transport/ssh_faults.py), not a timeout, whatever the time it took.
    m0 = by_host["m0"]
    assert m0.failure == "refused" and not m0.reachable, m0.problems
    assert m0.duration_s < 120, m0.duration_s  # ended by the hang-up, not by its connect timeout


def test_a_silent_host_is_bounded_by_its_connect_timeout(machines: Machines, tmp_path: Path) -> None:
    """The silent host alone, with a short connect timeout: its row says `timeout`, not a hang."""
    with SilentHost() as silent:
        hosts = silent_first(machines, tmp_path, silent, 1.0, [["ps", "worker"]])
        plan = plan_config(load_config(hosts), str(hosts))
        started = time.monotonic()
        report = run_check(plan, transport_for, timeout=20)
        elapsed = time.monotonic() - started
    (m0,) = report.hosts
    assert m0.failure == "timeout" and not m0.reachable, m0.problems
    # A hang guard, not a measure: the 1 s connect timeout bounds the wait (the handshake allows 1.5 times it
    # plus 1 s); only a check that does not end on its own comes near this.
    assert elapsed < 30, elapsed
