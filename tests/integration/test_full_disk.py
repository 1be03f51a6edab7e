"""A workdir on a full disk (issue 33 item 2), over real sshd: a 60 MB `[training] sync` for a machine whose
workdir is a real 30 MB file system (a tmpfs this test mounts, as root; skipped as a normal user).

- `start` fails at once naming the host and the host's own words, "No space left on device", and is not
  tried again (a full disk stays full): it ends well within its 2-minute retry budget, nothing runs.
- `check` compares the workdir's free space with what `start` ships and says the host is not ready.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, records, run_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
DISK_MB, SYNC_MB = 30, 60
# Far below start's 120 s default timeout that the old retries used up; far above one try (a few seconds).
NO_RETRY_BOUND_S = 60


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real DISK_MB file system (tmpfs), unmounted at the end. Mounting needs root (CI and the suite's
    machines run as root); as a normal user this test is skipped, as the fault suite's network cut is."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=700", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"this test mounts a {DISK_MB} MB tmpfs (needs root): {done.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def hosts_with_a_big_sync(machines: Machines, tmp_path: Path, workdir: Path) -> Path:
    """One host (every role), its workdir on `workdir`, shipping SYNC_MB of incompressible data."""
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "prog.py").write_text("import time\ntime.sleep(60)\n")
    for i in range(SYNC_MB // 10):
        (src / "data" / f"part{i}.bin").write_bytes(os.urandom(10 << 20))
    return machines.hosts_toml(src / "hosts.toml", roles=[["ps", "chief", "worker"]],
                               host_extra={0: {"workdir": str(workdir / "tfcluster")}},
                               training={"command": "{python} prog.py", "sync": ["prog.py", "data"]})


def test_start_onto_a_full_disk_fails_at_once_naming_the_host_and_the_cause(
        machines: Machines, tmp_path: Path, state_dir: Path, small_disk: Path) -> None:
    hosts = hosts_with_a_big_sync(machines, tmp_path, small_disk)
    # `cli` raises TimeoutExpired past the bound: a start that retried would end only at its 120 s timeout.
    started = cli(state_dir, "start", str(hosts), timeout=NO_RETRY_BOUND_S)
    assert started.returncode == 1 and "started " not in started.stdout, started.stdout + started.stderr
    errors = [line for line in started.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "host m0: " in errors[0] and "No space left on device" in errors[0], started.stderr
    assert "Traceback" not in started.stderr
    assert not run_processes(records(state_dir)[-1]["run_id"])


def test_check_compares_free_space_with_what_start_ships(
        machines: Machines, tmp_path: Path, state_dir: Path, small_disk: Path) -> None:
    hosts = hosts_with_a_big_sync(machines, tmp_path, small_disk)
    res = cli(state_dir, "check", str(hosts), "--json", timeout=120)
    assert res.stdout.strip(), res.stderr
    (row,) = json.loads(res.stdout)["hosts"]
    assert res.returncode == 1 and not row["ready"], row
    assert row["disk_free_bytes"] <= DISK_MB << 20, row
    shipped = [int(m.group(1)) for p in row["problems"] if (m := re.search(r"start ships (\d+) MiB", p))]
    assert shipped and shipped[0] >= SYNC_MB, row
