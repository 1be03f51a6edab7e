"""scripts/provision, executed by a real /bin/sh: where it finds sshd, what it would install, and the one
line it prints when it cannot install (the path a developer without root meets).

"sshd is not installed" is made real for the script by TFCLUSTER_OPENSSH_PATH (where it looks for sshd and
ssh-keygen) naming an empty directory, and by a PATH holding only the tools each case allows; the script
names the override in its message, so the line stays true. Nothing is installed: the cases either cannot
install or use --dry-run. A package manager is stood in for by a tripwire script that, if ever run, prints
on stderr and fails, so the exact-output assertions catch it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from testkit.slurm import CLIENTS, DAEMONS, SLURM_PATH_ENV
from testkit.sshd import find_openssh_tool
from testkit.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534  # an unprivileged uid for the non-root case when the tests run as root (CI does)


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A world-readable temp dir (the non-root case runs as another user): the script, bin/, empty/."""
    root = Path(tempfile.mkdtemp(prefix="tfcluster-provision-"))
    try:
        for sub in ("bin", "empty"):
            (root / sub).mkdir()
        shutil.copy(REPO / "scripts" / "provision", root / "provision")
        (root / "bin" / "id").symlink_to(shutil.which("id") or "/usr/bin/id")
        for path in (root, root / "bin", root / "empty", root / "provision"):
            path.chmod(0o755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tripwire(bin_dir: Path, name: str) -> None:
    """A `name` on PATH that must never run: it says so on stderr and fails."""
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho 'TRIPWIRE: {name} was run' >&2\nexit 97\n")
    path.chmod(0o755)


def run_provision(sandbox: Path, *args: str, env: Mapping[str, str], as_nobody: bool = False,
                  ) -> subprocess.CompletedProcess[str]:
    """The script under /bin/sh with PATH = the sandbox's bin/ unless `env` says otherwise."""
    command = ["/bin/sh", str(sandbox / "provision"), *args]
    if as_nobody:
        command = [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    return subprocess.run(command, check=False, env={"PATH": str(sandbox / "bin"), **env}, cwd=sandbox,
                          capture_output=True, text=True, timeout=30)


def test_without_a_package_manager_it_stops_with_one_line_naming_the_packages(sandbox: Path) -> None:
    res = run_provision(sandbox, env={"TFCLUSTER_OPENSSH_PATH": str(sandbox / "empty")})
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr == (
        f"scripts/provision: sshd, ssh-keygen not found in TFCLUSTER_OPENSSH_PATH={sandbox / 'empty'} and cannot "
        "be installed here (no apt-get); install with: your system's package manager "
        "(Debian/Ubuntu: apt-get install -y openssh-server openssh-client)\n"
    )


def test_a_user_without_root_or_sudo_gets_the_install_command_and_apt_get_is_never_run(sandbox: Path) -> None:
    """apt-get is on PATH, sudo is not: a developer's account on a Debian machine without sudo."""
    tripwire(sandbox / "bin", "apt-get")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        pytest.fail("running as root, and setpriv (util-linux) is missing to run the script as another user")
    res = run_provision(sandbox, as_nobody=as_root, env={"TFCLUSTER_OPENSSH_PATH": str(sandbox / "empty")})
    assert res.returncode == 1, res.stderr
    assert res.stdout == ""
    assert res.stderr == (
        f"scripts/provision: sshd, ssh-keygen not found in TFCLUSTER_OPENSSH_PATH={sandbox / 'empty'} and cannot "
        "be installed here (not root, no sudo); install with: su -c 'apt-get install -y openssh-server openssh-client'\n"
    )


def test_only_the_missing_tool_is_installed(sandbox: Path) -> None:
    """ssh-keygen present, sshd missing: only openssh-server is named."""
    (sandbox / "keygen").mkdir(mode=0o755)
    os.symlink(shutil.which("sh") or "/bin/sh", sandbox / "keygen" / "ssh-keygen")  # only looked at, never run
    res = run_provision(sandbox, env={"TFCLUSTER_OPENSSH_PATH": f"{sandbox / 'empty'}:{sandbox / 'keygen'}"})
    assert res.returncode == 1
    assert res.stderr.startswith("scripts/provision: sshd not found in TFCLUSTER_OPENSSH_PATH=")
    assert res.stderr.endswith("(Debian/Ubuntu: apt-get install -y openssh-server)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="the apt-get-as-root plan is the root (CI) path")
def test_as_root_the_dry_run_plans_apt_get_and_runs_nothing(sandbox: Path) -> None:
    tripwire(sandbox / "bin", "apt-get")
    res = run_provision(sandbox, "--dry-run", env={"TFCLUSTER_OPENSSH_PATH": str(sandbox / "empty")})
    assert res.returncode == 0, res.stderr
    planned = [
        "would run: env DEBIAN_FRONTEND=noninteractive apt-get update -q",
        "would run: env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "openssh-server openssh-client",
    ]
    if not os.path.isdir("/run/sshd"):
        planned += ["would run: mkdir -p /run/sshd", "would run: chmod 0755 /run/sshd"]
    assert res.stdout.splitlines() == planned
    assert res.stderr == "scripts/provision: would install openssh-server openssh-client (for sshd, ssh-keygen) with apt-get\n"


@pytest.mark.parametrize("override", [True, False], ids=["TFCLUSTER_OPENSSH_PATH", "PATH-first"])
def test_script_and_fixture_find_the_same_sshd(sandbox: Path, monkeypatch: pytest.MonkeyPatch, override: bool) -> None:
    """The lookup rule is written twice (sh for the script, Python for the fixture): same answers on a
    search path with an empty entry, a non-executable `sshd` first and tools split over two directories;
    without the override, $PATH comes before the sbin directories."""
    first, second = sandbox / "first", sandbox / "second"
    for d in (first, second):
        d.mkdir()
    (first / "sshd").write_text("")  # not executable: skipped
    for tool, d in (("sshd", second), ("ssh-keygen", first)):
        (d / tool).write_text("#!/bin/sh\nexit 97\n")  # only looked at, never run
        (d / tool).chmod(stat.S_IRWXU)
    search = f":{first}:{second}"
    if override:
        env = {"TFCLUSTER_OPENSSH_PATH": search}
        monkeypatch.setenv("TFCLUSTER_OPENSSH_PATH", search)
    else:
        env = {"PATH": f"{sandbox / 'bin'}{search}"}
        monkeypatch.delenv("TFCLUSTER_OPENSSH_PATH", raising=False)
        monkeypatch.setenv("PATH", env["PATH"])
    res = run_provision(sandbox, "--dry-run", env=env)
    assert res.returncode == 0, res.stderr
    found = dict(line.removeprefix("found ").split(": ", 1) for line in res.stdout.splitlines()
                 if line.startswith("found "))
    assert found == {"sshd": str(second / "sshd"), "ssh-keygen": str(first / "ssh-keygen")}
    assert found == {tool: find_openssh_tool(tool) for tool in ("sshd", "ssh-keygen")}


SLURM_TOOLS = "slurmctld, slurmd, srun, sbatch, squeue, scontrol, scancel, sacct, munged"


def test_slurm_missing_without_a_package_manager_names_slurm_wlm_and_munge(sandbox: Path) -> None:
    res = run_provision(sandbox, "slurm", env={"TFCLUSTER_SLURM_PATH": str(sandbox / "empty")})
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr == (
        f"scripts/provision: {SLURM_TOOLS} not found in TFCLUSTER_SLURM_PATH={sandbox / 'empty'} and cannot be "
        "installed here (no apt-get); install with: your system's package manager "
        "(Debian/Ubuntu: apt-get install -y slurm-wlm munge)\n"
    )


def test_only_munge_is_named_when_slurm_is_there(sandbox: Path) -> None:
    (sandbox / "slurm").mkdir(mode=0o755)
    for tool in (*DAEMONS, *CLIENTS):
        if tool != "munged":
            os.symlink(shutil.which("sh") or "/bin/sh", sandbox / "slurm" / tool)  # only looked at, never run
    res = run_provision(sandbox, "slurm", env={"TFCLUSTER_SLURM_PATH": str(sandbox / "slurm")})
    assert res.returncode == 1
    assert res.stderr.startswith(f"scripts/provision: munged not found in TFCLUSTER_SLURM_PATH={sandbox / 'slurm'} ")
    assert res.stderr.endswith("(Debian/Ubuntu: apt-get install -y munge)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="the apt-get-as-root plan is the root (CI) path")
def test_as_root_the_dry_run_plans_slurm_wlm_and_munge_with_openssh(sandbox: Path) -> None:
    """`make test` asks for both: one apt-get install with every missing package."""
    tripwire(sandbox / "bin", "apt-get")
    empty = str(sandbox / "empty")
    res = run_provision(sandbox, "--dry-run", "openssh", "slurm",
                        env={"TFCLUSTER_OPENSSH_PATH": empty, "TFCLUSTER_SLURM_PATH": empty})
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[:2] == [
        "would run: env DEBIAN_FRONTEND=noninteractive apt-get update -q",
        "would run: env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "openssh-server openssh-client slurm-wlm munge",
    ]
    assert res.stderr == (f"scripts/provision: would install openssh-server openssh-client slurm-wlm munge (for sshd, "
                          f"ssh-keygen, {SLURM_TOOLS}) with apt-get\n")


def test_script_and_testkit_find_the_same_slurm_programs(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Split over two directories, a non-executable `slurmd` first: the same answers from sh and Python."""
    first, second = sandbox / "first", sandbox / "second"
    for d in (first, second):
        d.mkdir()
    (first / "slurmd").write_text("")  # not executable: skipped
    tools = (*DAEMONS, *CLIENTS)
    for i, tool in enumerate(tools):
        d = first if i % 2 and tool != "slurmd" else second
        (d / tool).write_text("#!/bin/sh\nexit 97\n")  # only looked at, never run
        (d / tool).chmod(stat.S_IRWXU)
    search = f":{first}:{second}"
    monkeypatch.setenv(SLURM_PATH_ENV, search)
    res = run_provision(sandbox, "--dry-run", "slurm", env={SLURM_PATH_ENV: search})
    assert res.returncode == 0, res.stderr
    found = dict(line.removeprefix("found ").split(": ", 1) for line in res.stdout.splitlines()
                 if line.startswith("found "))
    assert found == {tool: find_tool(tool, SLURM_PATH_ENV) for tool in tools}
    assert found["slurmd"] == str(second / "slurmd")


def test_busybox_missing_is_named_with_its_package(sandbox: Path) -> None:
    """The quoting tests run commands under busybox sh: the script finds it on PATH or names it."""
    res = run_provision(sandbox, "busybox", env={})
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == ("scripts/provision: busybox not found and cannot be installed here (no apt-get); install "
                          "with: your system's package manager (Debian/Ubuntu: apt-get install -y busybox)\n")


def test_busybox_on_path_is_found_and_nothing_installed(sandbox: Path) -> None:
    tripwire(sandbox / "bin", "apt-get")
    (sandbox / "bin" / "busybox").symlink_to(shutil.which("sh") or "/bin/sh")  # only looked at, never run
    res = run_provision(sandbox, "--dry-run", "busybox", env={})
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"found busybox: {sandbox / 'bin' / 'busybox'}\n" and res.stderr == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="the apt-get-as-root plan is the root (CI) path")
def test_as_root_the_dry_run_plans_busybox_with_the_openssh_tools(sandbox: Path) -> None:
    tripwire(sandbox / "bin", "apt-get")
    res = run_provision(sandbox, "--dry-run", "openssh", "busybox", env={"TFCLUSTER_OPENSSH_PATH": str(sandbox / "empty")})
    assert res.returncode == 0, res.stderr
    assert "apt-get install -y -q --no-install-recommends openssh-server openssh-client busybox" in res.stdout
    assert res.stderr == ("scripts/provision: would install openssh-server openssh-client busybox (for sshd, ssh-keygen, "
                          "busybox) with apt-get\n")
