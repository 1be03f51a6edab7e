"""`check` logic on hosts with `transport = "local"`: the real probe runs under a real python, no network.

GPUs cannot be real here: `nvidia-smi` is faked by a script on PATH that prints two GPUs."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.run.check import check_host, local_tf_version, run_check
from orchestrator.run.local_ports import free_port_block
from orchestrator.transport.factory import transport_for


def _config(tmp_path: Path, training: dict[str, object] | None = None, **host_overrides: object) -> Config:
    base = free_port_block(8)
    host = {"name": "box", "address": "127.0.0.1", "roles": ["ps", "worker"], "transport": "local",
            "workdir": str(tmp_path / "work"), "python": sys.executable, "workers": 2}
    host.update(host_overrides)
    return Config.model_validate({"cluster": {"name": "unit", "base_port": base}, "hosts": [host],
                                  "training": training or {}})


# A user's program: check compares nvidia-smi with the plan but does not ask TensorFlow for the GPUs (it
# does for the built-in trainers, and TensorFlow here sees none: tests/integration/test_gpu_check_sshd.py).
USER_PROGRAM = {"command": "sleep 60"}


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\necho 'GPU 0: Fake A100 (UUID: GPU-0)'\necho 'GPU 1: Fake A100 (UUID: GPU-1)'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return


def test_local_host_is_ready(tmp_path: Path) -> None:
    plan = plan_config(_config(tmp_path))
    report = run_check(plan, transport_for, timeout=30, orchestrator_tf=local_tf_version())
    [row] = report.hosts
    assert row.ready, row.problems
    assert row.reachable and row.auth and row.python_found
    assert row.python_version == sys.version.split()[0]
    wanted = {t.port for t in plan.tasks} | {plan.hosts[0].control_port}  # the supervisor's port too
    assert set(row.ports) == wanted and all(v is None for v in row.ports.values())
    assert row.disk_free_bytes is not None and row.disk_free_bytes > 0
    assert row.workdir_writable
    assert row.clock_offset_s is not None and abs(row.clock_offset_s) < 1.0
    assert report.ready
    assert any("EVERY interface" in w for w in report.warnings)
    assert report.to_json()["hosts"][0]["ready"] is True


def test_busy_port_makes_host_not_ready(tmp_path: Path) -> None:
    plan = plan_config(_config(tmp_path))
    busy = plan.tasks[1].port
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", busy))
        listener.listen()
        row = check_host(plan.hosts[0], plan, transport_for(plan.hosts[0]), timeout=30)
    assert not row.ready
    assert row.ports[busy] is not None
    assert any(f"port {busy}" in p for p in row.problems)


def test_busy_supervisor_control_port_makes_host_not_ready(tmp_path: Path) -> None:
    """The supervisor's peer channel listens on its host's address: a listener there (another run's
    supervisor) is found by the same bind test as `start`'s port check (training/probes/port_probe.py)."""
    plan = plan_config(_config(tmp_path))
    host = plan.hosts[0]
    with socket.socket() as listener:
        listener.bind((host.dial_address or host.address, host.control_port))
        listener.listen()
        row = check_host(host, plan, transport_for(host), timeout=30)
    assert not row.ready
    assert row.ports[host.control_port] is not None
    assert any(f"port {host.control_port} (this host's supervisor) is not free" in p for p in row.problems)
    assert all(row.ports[t.port] is None for t in plan.tasks)


def test_missing_python_is_reported(tmp_path: Path) -> None:
    plan = plan_config(_config(tmp_path, python=str(tmp_path / "no such python")))
    row = check_host(plan.hosts[0], plan, transport_for(plan.hosts[0]), timeout=30)
    assert not row.ready and not row.python_found
    assert row.problems == [f"python not found: {tmp_path / 'no such python'}"]


def test_python_without_tensorflow_is_reported(tmp_path: Path) -> None:
    plan = plan_config(_config(tmp_path, python="/usr/bin/python3"))
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system python3 without TensorFlow here")
    row = check_host(plan.hosts[0], plan, transport_for(plan.hosts[0]), timeout=30)
    assert row.python_found
    assert any("tensorflow" in p for p in row.problems)


def test_tf_version_mismatch_with_orchestrator(tmp_path: Path) -> None:
    plan = plan_config(_config(tmp_path))
    report = run_check(plan, transport_for, timeout=30, orchestrator_tf="1.15.5")
    [row] = report.hosts
    assert row.tf_matches is False
    assert any("does not match the orchestrator's 1.15" in p for p in row.problems)


def test_gpus_found_against_planned(tmp_path: Path, fake_nvidia_smi: None) -> None:
    ok_plan = plan_config(_config(tmp_path, USER_PROGRAM, workers=None, gpus=[0, 1]))
    row = check_host(ok_plan.hosts[0], ok_plan, transport_for(ok_plan.hosts[0]), timeout=30)
    assert (row.gpus_found, row.gpus_planned) == (2, [0, 1])
    assert row.ready, row.problems
    too_many = plan_config(_config(tmp_path, USER_PROGRAM, workers=None, gpus=[0, 3]))
    row = check_host(too_many.hosts[0], too_many, transport_for(too_many.hosts[0]), timeout=30)
    assert not row.ready
    assert any("plan uses GPU 0, 3 but nvidia-smi lists 2" in p for p in row.problems)


def test_probe_timeout_is_reported_not_hung(tmp_path: Path) -> None:
    slow = tmp_path / "slowpython"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    plan = plan_config(_config(tmp_path, python=str(slow)))
    row = check_host(plan.hosts[0], plan, transport_for(plan.hosts[0]), timeout=0.5)
    assert row.failure == "timeout"
    assert row.duration_s < 5
    assert not row.ready
