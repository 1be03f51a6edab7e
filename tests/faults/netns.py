"""A machine behind a network link the test can cut: a network namespace joined to this one by a veth
pair (root only; iproute2's `ip`).

    with NetworkCut.created() as net:         # namespace + veth pair, removed at the end
        machines = netns_machines(net)       # m0, m1 here (net.outside), m2 inside the namespace
        net.cut(); net.restore()             # the veth link down / up

m0 and m1 listen on two addresses of the veth's outer end, m2 on its inner end, so every task of a run
reaches the others only over the veth (for m2) or this namespace's own stack (m0 <-> m1). Cutting the
link is what a pulled cable does: no reset, no error, packets just stop; sshd and every process in the
namespace (m2's supervisor, its tasks) live on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit import sshd
from testkit.sshd import Machines


def unavailable() -> str | None:
    """Why the test cannot build a namespace here (None when it can)."""
    if os.geteuid() != 0:
        return "creating a network namespace and a veth pair needs root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NetworkCut:
    def __init__(self, tag: int) -> None:
        self.netns = f"tfcf{tag}"
        self.outer_dev, self.inner_dev = f"tfcfo{tag}", f"tfcfi{tag}"
        net = f"10.213.{tag % 250}"
        self.outside = [f"{net}.1", f"{net}.3"]  # m0, m1 (this namespace)
        self.inside = f"{net}.2"  # m2 (in the namespace)

    @classmethod
    @contextmanager
    def created(cls) -> Iterator[NetworkCut]:
        net = cls(os.getpid() % 100000)
        try:
            _ip("netns", "add", net.netns)
            _ip("link", "add", net.outer_dev, "type", "veth", "peer", "name", net.inner_dev)
            _ip("link", "set", net.inner_dev, "netns", net.netns)
            for address in net.outside:
                _ip("addr", "add", f"{address}/24", "dev", net.outer_dev)
            _ip("link", "set", net.outer_dev, "up")
            inside = ("netns", "exec", net.netns, "ip")
            _ip(*inside, "addr", "add", f"{net.inside}/24", "dev", net.inner_dev)
            _ip(*inside, "link", "set", net.inner_dev, "up")
            _ip(*inside, "link", "set", "lo", "up")
            yield net
        finally:
            subprocess.run(["ip", "link", "del", net.outer_dev], check=False, capture_output=True)
            subprocess.run(["ip", "netns", "del", net.netns], check=False, capture_output=True)

    def cut(self) -> None:
        _ip("link", "set", self.outer_dev, "down")

    def restore(self) -> None:
        _ip("link", "set", self.outer_dev, "up")


class NetnsMachines(Machines):
    """Machines on given addresses; those listed in `netns` run their sshd inside that namespace."""

    def __init__(self, root: Path, addresses: list[str], netns: dict[int, str]) -> None:
        # Built on loopback addresses (which only pick the sshd port), then moved to the given ones.
        super().__init__(len(addresses), root, sshd._user_key(), first_address=250 - len(addresses), owns_root=True)
        self.addresses = list(addresses)
        self.netns = netns
        for i in range(len(addresses)):
            self._write_sshd_config(i)
        self.write_known_hosts(self.known_hosts)

    def sshd_command(self, i: int) -> list[str]:
        command = super().sshd_command(i)
        return ["ip", "netns", "exec", self.netns[i], *command] if i in self.netns else command


@contextmanager
def netns_machines(net: NetworkCut) -> Iterator[NetnsMachines]:
    machines = NetnsMachines(Path(tempfile.mkdtemp(prefix="tfcluster-netns-")),
                             [net.outside[0], net.outside[1], net.inside], {2: net.netns})
    try:
        machines.start_all()
        yield machines
    finally:
        machines.close()
