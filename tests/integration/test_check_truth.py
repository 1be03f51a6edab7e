"""`check` and `start` tell the truth (issue 21 point 4; issue 20's shared-workdir marker), through the
real CLI over real sshd on 3 loopback machines.

- A workdir `start` cannot create (beneath a regular file: refused for root too) fails `check` on every
  host that has it, and `start` names every such host in its one error line.
- Loopback machines given ONE workdir are reported as sharing it, on one machine, with what that
  means for checkpoints.
- The built-in model under a python whose TensorFlow does not import: `check` says so (a broken install
  here: a venv of this machine's /usr/bin/python3, which has no TensorFlow, holding a `tensorflow`
  package whose import fails as a missing CUDA library makes it fail); `start` without `--wait` does
  not say "started": every task fails at once, and it exits 1 naming the error, nothing left running.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, records, run_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, without TensorFlow


SHARED_WORKDIR = False  # each machine its own workdir: the test tells that from one shared workdir (conftest.machines)


def check_json(state_dir: Path, hosts: Path) -> tuple[int, dict[str, Any]]:
    res = cli(state_dir, "check", str(hosts), "--json", timeout=180)
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in report["hosts"]}


def test_a_workdir_start_cannot_create_fails_check_and_start_names_every_such_host(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file: nothing can be created beneath it")
    bad = {i: {"workdir": str(blocker / f"work{i}")} for i in (1, 2)}
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", host_extra=bad, training={"command": "sleep 60"})
    code, report = check_json(state_dir, hosts)
    assert code == 1 and not report["ready"], report
    by_host = rows(report)
    assert by_host["m0"]["ready"], by_host["m0"]
    for name in ("m1", "m2"):
        assert any("cannot create it: Not a directory" in p for p in by_host[name]["problems"]), by_host[name]

    started = cli(state_dir, "start", str(hosts))
    assert started.returncode == 1 and "started " not in started.stdout, started.stdout + started.stderr
    errors = [line for line in started.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "host m1: prepare" in errors[0] and "also m2: prepare" in errors[0], started.stderr
    assert not run_processes(records(state_dir)[-1]["run_id"])


def test_hosts_given_one_workdir_are_reported_sharing_it(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    shared = str(tmp_path / "shared-home" / ".tfcluster")
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", host_extra={i: {"workdir": shared} for i in range(3)},
                                training={"command": "sleep 60"})
    code, report = check_json(state_dir, hosts)
    assert code == 0, report
    assert report["shared_workdirs"] == [{"path": shared, "hosts": ["m0", "m1", "m2"], "machines": 1}], report
    assert len({h["workdir_id"] for h in report["hosts"]}) == 1
    table = cli(state_dir, "check", str(hosts), timeout=180).stdout
    assert f"hosts m0, m1, m2 share the workdir {shared} (on one machine)" in " ".join(table.split()), table

    own = machines.hosts_toml(tmp_path / "own.toml", training={"command": "sleep 60"})  # a workdir each
    code, report = check_json(state_dir, own)
    assert code == 0 and report["shared_workdirs"] == [], report


def _python_whose_tensorflow_does_not_import(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "tensorflow").mkdir()
    (site / "tensorflow" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')\n")
    return venv / "bin" / "python"


def test_builtin_model_without_an_importable_tensorflow(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    python = _python_whose_tensorflow_does_not_import(tmp_path)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"]],
                                host_extra={i: {"python": str(python)} for i in range(2)},
                                training={"model": "mlp", "steps": 100, "max_restarts": 1})
    code, report = check_json(state_dir, hosts)
    assert code == 1, report
    for row in report["hosts"]:
        assert any("libcudart.so.12" in p for p in row["problems"]), row

    started = cli(state_dir, "start", str(hosts), "--timeout", "120", timeout=200)
    said = started.stdout + started.stderr
    assert started.returncode == 1 and "started " not in started.stdout, said
    last = started.stderr.strip().splitlines()[-1]
    assert "task-failed" in last and "exited with exit code" in last and "libcudart.so.12" in last, said
    assert not run_processes(records(state_dir)[-1]["run_id"])
