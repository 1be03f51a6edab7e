"""`check` on a machine whose login shell prints (issue 33 item 7): an `echo` at the top of `.bashrc`, and
one in `.profile` for a host with `login_shell = true`, as on many real sites. The probe's output then
starts with those lines, yet the clock offset is still measured (it is read from its own marked line),
and the host is ready. Real sshd, its sessions' HOME a directory of the test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testkit.sshd import Machines
from tfcluster.cli import app

pytestmark = pytest.mark.integration
GREETING = "Welcome to the cluster. Quota: 12.5 GB used"  # begins with no number, yet holds some


@pytest.mark.parametrize("login_shell", [False, True])
def test_a_login_shell_that_prints_keeps_the_clock_offset(sshd_machines: Callable[..., Machines], tmp_path: Path,
                                                           login_shell: bool) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(f'echo "{GREETING}"\necho 1700000000.5\n')  # a number: not the clock either
    (home / ".profile").write_text(f'echo "profile: {GREETING}"\n')
    m = sshd_machines(1, home=str(home))
    try:
        hosts = m.hosts_toml(tmp_path / "hosts.toml", roles=[["ps", "chief", "worker"]],
                             training={"command": "{python} train.py"})
        if login_shell:  # [remote] login_shell: commands under `$SHELL -l` (bash then reads .profile too)
            hosts.write_text(hosts.read_text().replace("[remote]\n", "[remote]\nlogin_shell = true\n"))
        result = CliRunner().invoke(app, ["check", str(hosts), "--json"])
    finally:
        m.close()
    assert result.stdout, result.output
    (row,) = json.loads(result.stdout)["hosts"]
    assert result.exit_code == 0 and row["ready"], row
    assert row["clock_offset_s"] is not None and abs(row["clock_offset_s"]) < 1, row
    low, high = row["clock_bounds_s"]
    assert low <= row["clock_offset_s"] <= high, row
