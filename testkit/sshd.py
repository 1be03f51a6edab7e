"""Real OpenSSH `sshd` processes on loopback addresses, one per simulated machine, for integration tests.

API (use it from any integration test; the fixture lives in tests/conftest.py):

    def test_something(sshd_machines, tmp_path):
        m = sshd_machines(3)            # 3 fresh machines: 127.0.0.2, 127.0.0.3, 127.0.0.4 (started now)
        m.addresses                     # ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        m.port                          # the one sshd port, the same on every address
        m.user                          # the user the tests log in as (the current user; root in CI)
        m.identity_file                 # private key authorised on every machine
        m.known_hosts                   # known_hosts listing every machine's host key
        m.workdir(i)                    # machine i's workdir: by default ONE directory for all of them, as an
                                        # NFS home is on a real cluster; start_machines(n, shared_workdir=False)
                                        # gives each its own (for tests that need local disks)
        m.stop(i); m.start(i)           # simulate a dead machine (sshd i, its sessions and their
                                        # commands killed / sshd started again)
        m.new_host_key(i)               # give machine i a fresh host key (restarts it): "key changed"
        m.write_known_hosts(path, exclude=[i])   # a known_hosts without machine i: "key unknown"
        path = m.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["chief", "worker"], ["worker"]])
        m = sshd_machines(1, user_ca=True)   # sshd also trusts user certificates signed by the set's CA:
        cert = m.sign_user_key(pub_key_path)  # a login with a key authorised only by its certificate

`hosts_toml` writes a valid hosts.toml for the machines: hosts named m0, m1, ..., `python` = this
venv's interpreter, each host's workdir (the shared one by default), and an `[ssh]` section that never touches the
developer's ~/.ssh (`config_file = "none"`, explicit `identity_file` and `known_hosts`, no agent).
Keyword arguments override the policy, timeouts, mode, base port and add `[training]` keys.

The login shell runs without the developer's ~/.bashrc (`SetEnv SHLVL=1` in sshd_config): a simulated
machine should not depend on this machine's interactive shell set-up. `start_machines(n, home=DIR)`
instead gives every session `HOME=DIR` and leaves SHLVL alone, so bash behaves as for any user: it
sources DIR/.bashrc for every command sshd runs (non-interactive, SHLVL < 2, SSH_CLIENT set), the way
a real user's conda or pyenv initialisation runs (benchmarks/bench_fanout.py).

Every machine set gets its own temporary directory and sshd processes; all are killed at the end of
the test session (and at interpreter exit as a last resort). sshd is started only when a test asks
for machines, so unit-only runs never pay for it. Works as root (CI) and as a normal user (sshd then
only accepts logins as that user, which is the user the tests use, and needs no /run/sshd).

sshd and ssh-keygen are found by `find_openssh_tool`: $TFCLUSTER_OPENSSH_PATH when set, else $PATH then
/usr/sbin, /usr/local/sbin, /sbin (Debian's sshd is not on a normal user's PATH): the rule
scripts/provision uses to decide whether to install them (`make test` runs it first).
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import psutil

from orchestrator.run.local_ports import free_port_on
from testkit.ssh_certs import new_user_ca, sign_user_key
from testkit.toml_out import toml_value
from testkit.tools import find_tool, search_path

START_TIMEOUT_S = 10.0
LISTENING = "Server listening on "  # sshd logs it (INFO) once its socket listens

_LIVE: list[Machines] = []  # every machine set started in this process, for the exit-time safety net
OPENSSH_PATH_ENV = "TFCLUSTER_OPENSSH_PATH"


def openssh_search_path() -> str:
    """Where sshd and ssh-keygen are looked for (testkit.tools: the rule scripts/provision installs by)."""
    return search_path(OPENSSH_PATH_ENV)


def find_openssh_tool(name: str) -> str | None:
    return find_tool(name, OPENSSH_PATH_ENV)


SSHD = find_openssh_tool("sshd") or "sshd"
SSH_KEYGEN = find_openssh_tool("ssh-keygen") or "ssh-keygen"


def sshd_available() -> str | None:
    """None when sshd and ssh-keygen are found, else one line saying what is missing and what installs it."""
    missing = [tool for tool in ("sshd", "ssh-keygen") if find_openssh_tool(tool) is None]
    if missing:
        return (f"{' and '.join(missing)} not found in {openssh_search_path()}: "
                "run scripts/provision (`make test` does), or install openssh-server")
    return None


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )




class Machines:
    """A set of loopback machines, each a real sshd process. Build with `start_machines(n)`."""

    def __init__(self, n: int, root: Path, user_key: Path, first_address: int = 2, owns_root: bool = False,
                 home: str | None = None, sftp: bool = True, shared_workdir: bool = True,
                 user_ca: bool = False) -> None:
        self.root = root
        self.user_ca = new_user_ca(root / "user_ca") if user_ca else None  # trusted by every machine's sshd
        self.shared_workdir = shared_workdir  # one workdir for every machine, as an NFS home
        self.sftp = sftp  # False: sshd without an SFTP subsystem (some hardened servers); exec only
        self.home = home  # None: the login shell skips ~/.bashrc (SHLVL=1); else HOME for every session
        self._owns_root = owns_root
        self.addresses = [f"127.0.0.{first_address + i}" for i in range(n)]
        self.port = free_port_on(self.addresses)  # one port, free on every address
        self.user = getpass.getuser()
        self.identity_file = str(user_key)
        self.known_hosts = str(root / "known_hosts")
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * n
        (root / "authorized_keys").write_text(Path(str(user_key) + ".pub").read_text())
        for i in range(n):
            self.workdir(i)
            _keygen(self._host_key(i), f"tfcluster-test-host-{i}")
            self._write_sshd_config(i)
        self.write_known_hosts(self.known_hosts)

    # --- paths -------------------------------------------------------------------------------------
    def _host_key(self, i: int) -> Path:
        return self.root / f"host{i}_ed25519"

    def _sshd_config(self, i: int) -> Path:
        return self.root / f"sshd{i}.conf"

    def log_file(self, i: int) -> Path:
        return self.root / f"sshd{i}.log"

    def _log_text(self, i: int) -> str:
        return self.log_file(i).read_text(errors="replace") if self.log_file(i).exists() else ""

    def workdir(self, i: int) -> str:
        path = self.root / ("work" if self.shared_workdir else f"work{i}")
        path.mkdir(mode=0o700, exist_ok=True)  # as `start` makes one (umask 077)
        return str(path)

    def _write_sshd_config(self, i: int) -> None:
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.addresses[i]}",
            f"HostKey {self._host_key(i)}",
            f"PidFile {self.root / f'sshd{i}.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "AllowTcpForwarding yes",  # ProxyJump tests open direct-tcpip channels through a machine
            "X11Forwarding no",
            "PrintMotd no",
            "UseDNS no",
            "MaxStartups 200:30:400",  # benchmarks connect to many machines at once
            "MaxSessions 64",
            "LoginGraceTime 30",
            "LogLevel VERBOSE",
            *(["Subsystem sftp internal-sftp"] if self.sftp else []),
            *([f"TrustedUserCAKeys {self.user_ca}.pub"] if self.user_ca is not None else []),
            # bash sources ~/.bashrc for commands run by sshd when it is a top-level shell (SHLVL < 2).
            # The developer's interactive rc (pyenv init, ...) is not part of a simulated machine and
            # costs each session a second on a loaded box; SHLVL=1 makes bash skip it. With `home`,
            # bash decides as for any user, reading <home>/.bashrc (SetEnv comes after sshd's HOME).
            f"SetEnv HOME={self.home}" if self.home else "SetEnv SHLVL=1",
        ]
        self._sshd_config(i).write_text("\n".join(lines) + "\n")

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, i: int) -> None:
        """Start machine i's sshd and wait until it accepts TCP connections."""
        if self.is_running(i):
            return
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation dir
        listening_before = self._log_text(i).count(LISTENING)
        proc = subprocess.Popen(
            self.sshd_command(i),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, whose teardown kills us
        )
        self._procs[i] = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                log = self._log_text(i)
                self._procs[i] = None
                raise RuntimeError(f"sshd for {self.addresses[i]} exited with {proc.returncode}: {err}{log}")
            # sshd logs this once it listens. Not a probe connection: sshd's child would log that
            # connection after we returned, and tests count the connections a machine logged.
            if self._log_text(i).count(LISTENING) > listening_before:
                return
            time.sleep(0.02)  # this wait's polling interval
        self.stop(i)
        raise RuntimeError(f"sshd for {self.addresses[i]}:{self.port} did not start in {START_TIMEOUT_S}s")

    def sshd_command(self, i: int) -> list[str]:
        """How machine i's sshd is run (a subclass may wrap it, e.g. in `ip netns exec`)."""
        return [SSHD, "-D", "-f", str(self._sshd_config(i)), "-E", str(self.log_file(i))]

    def start_all(self) -> None:
        for i in range(len(self.addresses)):
            self.start(i)

    def stop(self, i: int) -> None:
        """Kill machine i's sshd and every process under it: its connections (sshd gives each its own
        session) and their commands, as if the machine died. Processes that detached themselves
        (setsid + double fork, like a run's supervisor) are not under sshd any more and survive."""
        proc = self._procs[i]
        self._procs[i] = None
        if proc is None:
            return
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        if proc.stderr is not None:
            proc.stderr.close()

    def sshd_pids(self) -> list[int]:
        """The running sshd listeners (their children's CPU is every session's, reaped)."""
        return [proc.pid for proc in self._procs if proc is not None and proc.poll() is None]

    def is_running(self, i: int) -> bool:
        proc = self._procs[i]
        return proc is not None and proc.poll() is None

    def close(self) -> None:
        for i in range(len(self.addresses)):
            self.stop(i)
        if self in _LIVE:
            _LIVE.remove(self)
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- keys --------------------------------------------------------------------------------------
    def host_key_line(self, i: int) -> str:
        """Machine i's known_hosts line, as OpenSSH writes it for a non-22 port."""
        key_type, key_b64 = Path(str(self._host_key(i)) + ".pub").read_text().split()[:2]
        return f"[{self.addresses[i]}]:{self.port} {key_type} {key_b64}"

    def sign_user_key(self, public_key: str | os.PathLike[str], principal: str | None = None) -> Path:
        """`<key>-cert.pub`: the key signed by the set's CA (start_machines(user_ca=True)) for `principal`."""
        assert self.user_ca is not None, "these machines trust no user CA: start_machines(n, user_ca=True)"
        return sign_user_key(self.user_ca, public_key, principal or self.user)

    def write_known_hosts(self, path: str | os.PathLike[str], exclude: Iterable[int] = ()) -> str:
        skip = set(exclude)
        lines = [self.host_key_line(i) for i in range(len(self.addresses)) if i not in skip]
        Path(path).write_text("".join(line + "\n" for line in lines))
        return str(path)

    def new_host_key(self, i: int) -> None:
        """Replace machine i's host key (the machine was 'reinstalled'); restarts it if it was running."""
        was_running = self.is_running(i)
        self.stop(i)
        for suffix in ("", ".pub"):
            Path(str(self._host_key(i)) + suffix).unlink()
        _keygen(self._host_key(i), f"tfcluster-test-host-{i}-new")
        if was_running:
            self.start(i)

    # --- hosts.toml --------------------------------------------------------------------------------
    def hosts_toml(
        self,
        path: str | os.PathLike[str],
        roles: Sequence[Sequence[str]] | None = None,
        *,
        mode: str = "between-graph",
        base_port: int | None = None,
        strict_host_key_checking: str = "yes",
        known_hosts: str | None = None,
        identity_file: str | None = None,
        connect_timeout: float = 5.0,
        cluster_name: str = "test",
        host_extra: Mapping[int, Mapping[str, object]] | None = None,
        training: Mapping[str, object] | None = None,
    ) -> Path:
        """Write a hosts.toml for these machines. Default roles: m0 = ps, the others chief/worker."""
        n = len(self.addresses)
        if roles is None:
            roles = [["ps"]] + [["chief", "worker"] if i == 1 else ["worker"] for i in range(1, n)]
        if base_port is None:
            from orchestrator.run.local_ports import free_port_block

            base_port = free_port_block(4 * n)
        out = [
            "[cluster]",
            f"name = {toml_value(cluster_name)}",
            f"mode = {toml_value(mode)}",
            f"base_port = {base_port}",
            "",
            "[ssh]",
            f"user = {toml_value(self.user)}",
            f"port = {self.port}",
            f"identity_file = {toml_value(identity_file or self.identity_file)}",
            f"known_hosts = {toml_value(known_hosts or self.known_hosts)}",
            f"strict_host_key_checking = {toml_value(strict_host_key_checking)}",
            f"connect_timeout = {toml_value(float(connect_timeout))}",
            'config_file = "none"',
            "use_agent = false",
            "",
            "[remote]",
            f"python = {toml_value(sys.executable)}",
            "",
        ]
        for i, host_roles in enumerate(roles):
            host: dict[str, object] = {
                "name": f"m{i}", "address": self.addresses[i], "roles": list(host_roles), "workdir": self.workdir(i),
            }
            host.update((host_extra or {}).get(i, {}))  # extras may also replace the keys above
            out += ["[[hosts]]", *(f"{key} = {toml_value(value)}" for key, value in host.items()), ""]
        if training:
            out.append("[training]")
            out += [f"{k} = {toml_value(v)}" for k, v in training.items()]
        Path(path).write_text("\n".join(out) + "\n")
        return Path(path)


_user_key_dir: Path | None = None


def _user_key() -> Path:
    """One user key per test process, shared by every machine set."""
    global _user_key_dir
    if _user_key_dir is None:
        _user_key_dir = Path(tempfile.mkdtemp(prefix="tfcluster-sshkeys-"))
        _keygen(_user_key_dir / "id_ed25519", "tfcluster-test-user")
    return _user_key_dir / "id_ed25519"


_next_address = 2


def start_machines(n: int, root: Path | None = None, *, home: str | None = None, sftp: bool = True,
                   shared_workdir: bool = True, user_ca: bool = False) -> Machines:
    """Start n fresh machines on loopback addresses no other live set in this process uses (`home`: see
    the module docstring; `sftp=False`: their sshd has no SFTP subsystem; `shared_workdir=False`: each
    machine its own workdir instead of one shared by all; `user_ca=True`: their sshd also accepts user
    certificates signed by the set's CA, Machines.sign_user_key)."""
    global _next_address
    missing = sshd_available()
    if missing:
        raise RuntimeError(missing)
    if _next_address + n > 254:
        _next_address = 2  # earlier sets are closed by then in practice; addresses are reused
    first = _next_address
    _next_address += n
    owns_root = root is None
    root = root or Path(tempfile.mkdtemp(prefix="tfcluster-sshd-"))
    machines = Machines(n, root, _user_key(), first_address=first, owns_root=owns_root, home=home, sftp=sftp,
                        shared_workdir=shared_workdir, user_ca=user_ca)
    _LIVE.append(machines)
    try:
        machines.start_all()
    except BaseException:
        machines.close()
        raise
    return machines


def stop_all() -> None:
    """Close every machine set and drop the user key; a later start_machines() makes a new one (the
    benchmark runner starts and stops several sets in one process)."""
    global _user_key_dir
    for machines in list(_LIVE):
        machines.close()
    if _user_key_dir is not None:
        shutil.rmtree(_user_key_dir, ignore_errors=True)
        _user_key_dir = None


atexit.register(stop_all)
