"""`tfcluster check` over real SSH against real sshd processes on loopback "machines"."""

from __future__ import annotations

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


def test_silent_host_times_out_without_delaying_the_others(machines: Machines, tmp_path: Path) -> None:
    """A machine whose TCP port accepts but never speaks SSH (a hung sshd): fake by a bare listener."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        # The silent host comes first (a serial check would hold the others back behind it) and has a
        # longer timeout than the others need even on a loaded machine.
        hosts = machines.hosts_toml(
            tmp_path / "hosts.toml", roles=[["worker"], ["ps"], ["chief", "worker"]], connect_timeout=5,
            host_extra={0: {"address": "127.0.0.1", "ssh": {"port": silent.getsockname()[1], "connect_timeout": 6.0}}},
        )
        plan = plan_config(load_config(hosts), str(hosts))
        done: dict[str, float] = {}
        started = time.monotonic()

        def record(row: HostCheck) -> None:
            done[row.host] = time.monotonic() - started

        report = run_check(plan, transport_for, timeout=20, on_result=record)
    finally:
        stop.set()
        acceptor.join()
        for conn in accepted:
            conn.close()
        silent.close()
    by_host = {h.host: h for h in report.hosts}
    assert by_host["m0"].failure == "timeout", by_host["m0"].problems
    assert by_host["m1"].ready and by_host["m2"].ready
    assert done["m1"] < done["m0"] and done["m2"] < done["m0"]  # the others' rows were not held back
    assert done["m0"] < 6 + 5  # bounded by its connect timeout
