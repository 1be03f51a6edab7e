"""[remote] login_shell: by default a command runs under /bin/sh and reads no startup file; with
login_shell it runs under the user's `$SHELL -l` first, which reads the profile (what `module load` or
a conda activation there needs). Real bash and sh, a throwaway HOME; LocalTransport runs commands the
way sshd's session does (the same wrapper), so this is the login shell a remote command gets too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.transport.factory import transport_for
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.shell_wrap import sh_wrap

BASH = shutil.which("bash")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if BASH is None:
        pytest.fail("bash is needed for this test (the login shell most users have)")
    (tmp_path / ".bash_profile").write_text("export FROM_PROFILE=profile-was-read\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", BASH)
    monkeypatch.delenv("FROM_PROFILE", raising=False)
    return tmp_path


def test_default_shell_reads_no_profile(home: Path) -> None:
    out = LocalTransport("h").run_shell('echo "[$FROM_PROFILE]"; echo "$0"', timeout=10, check=True).stdout
    assert out.split() == ["[]", "/bin/sh"]


def test_login_shell_reads_the_profile_then_runs_posix_sh(home: Path) -> None:
    transport = LocalTransport("h", login_shell=True)
    out = transport.run_shell("echo \"[$FROM_PROFILE]\"; echo \"$0\"; printf '%s\\n' 'it'\"'\"'s quoted'",
                              timeout=10, check=True).stdout
    assert out.splitlines() == ["[profile-was-read]", "/bin/sh", "it's quoted"]
    session = transport.open_session('read line; echo "$FROM_PROFILE:$line"')
    session.send(b"hello\n")
    assert session.read_line(10) == "profile-was-read:hello"
    session.close()


def test_the_plan_carries_login_shell_to_the_transport(home: Path) -> None:
    plan = plan_config(Config.model_validate({
        "remote": {"login_shell": True},
        "hosts": [{"name": "m0", "address": "127.0.0.1", "roles": ["ps", "worker"], "transport": "local"}]}))
    assert plan.hosts[0].login_shell
    transport = transport_for(plan.hosts[0])
    assert isinstance(transport, LocalTransport) and transport.login_shell
    default = plan_config(Config.model_validate({"hosts": [{"name": "m0", "address": "h", "roles": ["ps", "worker"]}]}))
    assert not default.hosts[0].login_shell


def test_ssh_wrapper_reports_the_pid_and_honours_login_shell(home: Path) -> None:
    """What sshd's session runs (`<login shell> -c <this>`), run here by the same bash."""
    assert BASH is not None
    for login, expected in ((False, "[]"), (True, "[profile-was-read]")):
        result = LocalTransport("h").run([BASH, "-c", sh_wrap('echo "[$FROM_PROFILE]"', login)], timeout=10, check=True)
        assert result.stdout.strip() == expected
        assert result.stderr.startswith("__tfcluster_pid__ ")
