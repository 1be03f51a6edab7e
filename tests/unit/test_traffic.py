"""Measured task traffic (training/telemetry/tcp_diag.py, traffic.py): the kernel's TCP counters read over
netlink for real loopback connections, attributed to the measured task by socket inode (another
process's connections to the same peer port are not its), turned into monotonic counters and rates."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers.waiting import wait_for
from training.telemetry.tcp_diag import TcpConn, TcpDiag, port_filter
from training.telemetry.traffic import ALLREDUCE_KEY, PS_KEY, TaskTraffic, measured_tasks, smooth


def _pair(server: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(server.getsockname()[:2])
    peer, _ = server.accept()
    return client, peer


def _move(src: socket.socket, dst: socket.socket, n: int) -> None:
    """Send n bytes and wait until they are read (so the sender's bytes_acked has them too)."""
    reader = threading.Thread(target=lambda: _drain(dst, n))
    reader.start()
    src.sendall(b"x" * n)
    reader.join(10)


def _drain(sock: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        got += len(sock.recv(65536))


@contextmanager
def _servers(n: int) -> Iterator[list[socket.socket]]:
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    try:
        yield servers
    finally:
        for s in servers:
            s.close()


def test_the_kernel_counters_of_a_served_port_over_netlink() -> None:
    with _servers(2) as (ps, other):
        client, served = _pair(ps)
        elsewhere, _elsewhere_peer = _pair(other)
        try:
            _move(client, served, 300_000)  # in, on the server's side
            _move(served, client, 7_000)  # out
            diag = TcpDiag()
            port = ps.getsockname()[1]

            def counted() -> list[TcpConn] | None:
                conns = diag.read([port], [])
                return conns if conns and conns[0].bytes_out >= 7_000 else None

            conns = wait_for(counted, 5, "the acknowledgement of the bytes sent", interval=0.01)
            assert len(conns) == 1, conns  # the other port's connection is filtered out in the kernel
            c = conns[0]
            assert (c.local_port, c.peer_ip, c.peer_port) == (port, "127.0.0.1", client.getsockname()[1])
            assert (c.bytes_in, c.bytes_out) == (300_000, 7_000) and c.inode > 0
            diag.close()
        finally:
            for s in (client, served, elsewhere, _elsewhere_peer):
                s.close()


def test_port_filter_is_one_test_per_port_accepting_at_the_end() -> None:
    program = port_filter([23000], [23005])
    assert len(program) == 20
    # local port 23000: true falls into the jump to the end (accept), false skips it to the next test;
    # the last test's true reaches the end, its false jumps past it (reject)
    assert program[:4] == bytes([11, 8]) + (12).to_bytes(2, sys.byteorder)
    assert program[8:12] == bytes([1, 4]) + (12).to_bytes(2, sys.byteorder)
    assert program[12:16] == bytes([12, 8]) + (12).to_bytes(2, sys.byteorder)


def test_a_tasks_own_connections_to_peer_ports_count_another_processs_do_not() -> None:
    """TF's RecvTensor is issued by the receiver: a PS pulls gradients over connections it opens to the
    workers' ports. Those count for the PS (this process holds the socket); another process's do not."""
    with _servers(2) as (ps, worker):
        ps_port, worker_port = ps.getsockname()[1], worker.getsockname()[1]
        traffic = TaskTraffic(PS_KEY, {"ps-0": ps_port}, {worker_port})
        me = [os.getpid()]
        first = traffic.sample(100.0, lambda name: me)["ps-0"]
        assert (first["bytes_in"], first["in_Bps"], first["port"]) == (0, None, ps_port)
        served_client, served = _pair(ps)  # a worker's request connection to the PS
        pulls, pulled = _pair(worker)  # the PS's own connection to the worker's server
        stranger = subprocess.Popen([sys.executable, "-c", (
            "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
            "s.sendall(b'y' * 50000); print('sent', flush=True); sys.stdin.read()"), str(worker_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            stranger_peer, _ = worker.accept()
            _drain(stranger_peer, 50_000)
            assert stranger.stdout is not None and stranger.stdout.readline() == "sent\n"
            _move(served_client, served, 100_000)  # pushed to the PS
            _move(served, served_client, 2_000)  # variables out of the PS
            _move(pulled, pulls, 40_000)  # gradients the PS pulls
            wait_for(lambda: traffic.diag.read([ps_port], [])[0].bytes_out >= 2_000, 5, "acked", interval=0.01)
            snap = traffic.sample(102.0, lambda name: me)["ps-0"]
            # (bytes_acked counts the SYN of a connection the PS opened: one byte)
            assert snap["bytes_in"] == 140_000 and snap["bytes_out"] in (2_000, 2_001), snap
            assert snap["in_Bps"] == 70_000.0 and snap["out_Bps"] == snap["bytes_out"] / 2 and snap["t"] == 102.0
            assert snap["peers"]["127.0.0.1"]["bytes_in"] == 140_000
            assert traffic._owner  # the PS's outgoing connection is known by its inode: no second fd walk
            again = traffic.sample(103.0, lambda name: me)["ps-0"]
            assert again["bytes_in"] == 140_000 and again["in_Bps"] < 70_000.0  # nothing moved: the rate decays
            stranger_peer.close()
        finally:
            stranger.kill()
            stranger.wait()
            for s in (served_client, served, pulls, pulled):
                s.close()
            traffic.close()


class _Conns:
    """A kernel that shows the given connections (each sample pops the next list)."""

    def __init__(self, *samples: list[TcpConn]) -> None:
        self.samples = list(samples)
        self.families = [socket.AF_INET]

    def read(self, local_ports: list[int], peer_ports: list[int]) -> list[TcpConn]:
        return self.samples.pop(0)

    def close(self) -> None:
        pass


def test_counters_are_monotonic_across_connection_churn_and_rates_smoothed() -> None:
    diag = _Conns(
        [TcpConn(23000, "10.0.0.2", 5000, 100, 50)],  # the baseline
        [TcpConn(23000, "10.0.0.2", 5000, 300, 80), TcpConn(23000, "10.0.0.3", 6000, 10, 20)],
        # the first connection closed, a new one from the same peer opened: totals never go back
        [TcpConn(23000, "10.0.0.2", 5001, 40, 5), TcpConn(23000, "10.0.0.3", 6000, 10, 20)],
    )
    traffic = TaskTraffic(PS_KEY, {"ps-0": 23000, "ps-1": 23001}, set(), diag=diag)  # type: ignore[arg-type]
    assert traffic.sample(10.0, lambda name: [])["ps-0"]["bytes_in"] == 0
    snap = traffic.sample(11.0, lambda name: [])
    assert (snap["ps-0"]["bytes_in"], snap["ps-0"]["bytes_out"]) == (210, 50)
    assert (snap["ps-0"]["in_Bps"], snap["ps-0"]["out_Bps"]) == (210.0, 50.0)
    assert snap["ps-0"]["peers"]["10.0.0.2"] == {"bytes_in": 200, "bytes_out": 30, "in_Bps": 200.0, "out_Bps": 30.0}
    snap = traffic.sample(12.0, lambda name: [])
    assert (snap["ps-0"]["bytes_in"], snap["ps-0"]["bytes_out"]) == (250, 55)
    assert snap["ps-0"]["in_Bps"] == round(smooth(210.0, 40.0, 1.0), 1)
    assert snap["ps-1"] == {"port": 23001, "t": 12.0, "bytes_in": 0, "bytes_out": 0, "in_Bps": 0.0,
                            "out_Bps": 0.0, "peers": {}}


def test_a_kernel_that_refuses_sock_diag_measures_nothing_rather_than_zero() -> None:
    diag = TcpDiag()
    diag.families = []  # as after every family's request was refused
    assert TaskTraffic(PS_KEY, {"ps-0": 23000}, set(), diag=diag).sample(1.0, lambda name: []) == {}


def test_which_tasks_are_measured_from_the_plan() -> None:
    tasks = [{"job": "ps", "index": 0, "host": "a", "port": 23000},
             {"job": "ps", "index": 1, "host": "b", "port": 23001},
             {"job": "worker", "index": 0, "host": "a", "port": 23002},
             {"job": "worker", "index": 1, "host": "b", "port": None}]
    assert measured_tasks({"mode": "between-graph", "tasks": tasks}, "a") == (
        PS_KEY, {"ps-0": 23000}, {23001, 23002})
    assert measured_tasks({"mode": "between-graph", "tasks": tasks}, "c") is None
    # multi-worker-mirrored has no PS: the all-reduce between the workers is what is measured
    third = {"job": "worker", "index": 2, "host": "b", "port": 23004}
    mirrored = {"mode": "multi-worker-mirrored", "tasks": [*tasks[2:], third]}
    assert measured_tasks(mirrored, "a") == (ALLREDUCE_KEY, {"worker-0": 23002}, {23004})
