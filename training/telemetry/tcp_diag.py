"""The kernel's per-connection TCP byte counters, read through netlink (NETLINK_SOCK_DIAG, inet_diag).

`TcpDiag().read(local_ports, peer_ports)` returns every established TCP connection whose local port is
one of `local_ports` (the connections a task's server accepted) or whose remote port is one of
`peer_ports` (the connections some process opened to another task's server), each with the kernel's
`tcpi_bytes_received` and `tcpi_bytes_acked` (struct tcp_info, Linux >= 4.1) and its socket's inode
(to tell which process owns it: training/telemetry/traffic.py).

Why netlink and not `ss`: `ss -p` walks every process's file descriptors and costs a subprocess per
sample; the same counters come from one request per address family here, filtered by port in the
kernel (an inet_diag bytecode program), with no process and no /proc walk. The kernel still walks its
established-connections hash table once per request: that, not the few matches, is the cost (about
2 ms of CPU per family on a 262144-bucket table; benchmarks/results/ps_sample.md). A kernel without
sock_diag (or one that refuses the request) gives no connections: nothing is measured, nothing fails.
Stdlib only.
"""

from __future__ import annotations

import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_INFO = 2
BC_JMP, BC_S_EQ, BC_D_EQ = 1, 11, 12  # inet_diag bytecode: jump, local port ==, remote port ==
TCP_ESTABLISHED = 1
_HDR = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_MSG_LEN = 72  # struct inet_diag_msg
_INFO_COUNTERS = struct.Struct("=QQ")  # tcpi_bytes_acked, tcpi_bytes_received
_INFO_COUNTERS_AT = 120  # their offset in struct tcp_info


class TcpConn:
    """One established connection, from its local side."""

    __slots__ = ("bytes_in", "bytes_out", "inode", "local_port", "peer_ip", "peer_port")

    def __init__(self, local_port: int, peer_ip: str, peer_port: int, bytes_in: int, bytes_out: int,
                 inode: int = 0) -> None:
        self.local_port = local_port
        self.peer_ip = peer_ip
        self.peer_port = peer_port
        self.bytes_in = bytes_in  # tcpi_bytes_received
        self.bytes_out = bytes_out  # tcpi_bytes_acked: sent and acknowledged by the peer
        self.inode = inode  # the socket's inode: /proc/<pid>/fd/* -> socket:[inode]

    def __repr__(self) -> str:
        return (f"TcpConn({self.local_port}, {self.peer_ip!r}, {self.peer_port}, in={self.bytes_in}, "
                f"out={self.bytes_out}, inode={self.inode})")


def port_filter(local_ports: list[int], peer_ports: list[int]) -> bytes:
    """An inet_diag bytecode program accepting a connection whose local port is one of `local_ports` or
    whose remote port is one of `peer_ports`, laid out as `ss` lays out an `or`: each test is followed
    by a jump to the end (accept) that the test's true branch falls into, while its false branch skips
    that jump to the next test; the last test's false jumps past the end (reject). (The kernel's audit
    wants every false target reachable through true branches: one jump to the end would not do.)"""
    tests = [(BC_S_EQ, p) for p in local_ports] + [(BC_D_EQ, p) for p in peer_ports]
    size = 12 * len(tests) - 4
    program = b""
    for i, (code, port) in enumerate(tests):
        program += struct.pack("=BBHBBH", code, 8, 12, 0, 0, port)  # the test, then the port it compares
        if i < len(tests) - 1:
            program += struct.pack("=BBH", BC_JMP, 4, size - len(program))  # (a jump always takes `no`)
    return program


def request(family: int, local_ports: list[int], peer_ports: list[int], seq: int = 1) -> bytes:
    """One SOCK_DIAG_BY_FAMILY dump request: TCP, established, with tcp_info, filtered by port."""
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, 1 << TCP_ESTABLISHED)
    req += bytes(48)  # inet_diag_sockid: any
    program = port_filter(local_ports, peer_ports)
    body = req + struct.pack("=HH", 4 + len(program), INET_DIAG_REQ_BYTECODE) + program
    return _HDR.pack(_HDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def _ip(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if raw[:12] == b"\0" * 10 + b"\xff\xff":  # a v4 peer of a dual-stack listener (TF's gRPC listens on [::])
        return socket.inet_ntop(socket.AF_INET, raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw)


def parse(data: bytes) -> tuple[list[TcpConn], bool]:
    """The connections in one netlink datagram, and whether it ended the dump. OSError on an error reply."""
    conns: list[TcpConn] = []
    off = 0
    while off + _HDR.size <= len(data):
        length, kind = _HDR.unpack_from(data, off)[:2]
        if length < _HDR.size:
            return conns, True
        if kind == NLMSG_DONE:
            return conns, True
        if kind == NLMSG_ERROR:
            errno = -struct.unpack_from("=i", data, off + _HDR.size)[0]
            raise OSError(errno, "inet_diag request refused")
        m = off + _HDR.size
        if length >= _HDR.size + _MSG_LEN:
            family = data[m]
            sport, dport = struct.unpack_from(">HH", data, m + 4)
            inode = struct.unpack_from("=I", data, m + 68)[0]
            counters = None
            a = m + _MSG_LEN
            while a + 4 <= off + length:  # the attributes: tcp_info is the one asked for
                alen, atype = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if atype == INET_DIAG_INFO and alen - 4 >= _INFO_COUNTERS_AT + _INFO_COUNTERS.size:
                    counters = _INFO_COUNTERS.unpack_from(data, a + 4 + _INFO_COUNTERS_AT)
                a += (alen + 3) & ~3
            if counters is not None:
                conns.append(TcpConn(sport, _ip(family, data[m + 24:m + 40]), dport, counters[1], counters[0], inode))
        off += (length + 3) & ~3
    return conns, False


class TcpDiag:
    """One netlink socket, opened on first use and kept (a sample is one request per address family)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._seq = 0
        # A family the kernel refuses (IPv6 disabled, no sock_diag) is not asked again: an empty list, no
        # measurement, never a failure.
        self.families = [socket.AF_INET, socket.AF_INET6]

    def read(self, local_ports: list[int], peer_ports: list[int]) -> list[TcpConn]:
        conns: list[TcpConn] = []
        if not (local_ports or peer_ports):
            return conns
        for family in list(self.families):
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
                    self._sock.settimeout(2.0)
                conns += self._dump(self._sock, family, local_ports, peer_ports)
            except TimeoutError:  # a slow answer, once: asked again at the next sample
                self.close()
            except (OSError, AttributeError):  # AttributeError: a Python without AF_NETLINK (not Linux)
                self.close()  # (a dump cut short leaves replies behind: a new socket starts clean)
                self.families.remove(family)
        return conns

    def _dump(self, sock: socket.socket, family: int, local_ports: list[int], peer_ports: list[int]) -> list[TcpConn]:
        self._seq += 1
        sock.send(request(family, local_ports, peer_ports, self._seq))
        out: list[TcpConn] = []
        done = False
        while not done:
            conns, done = parse(sock.recv(1 << 16))
            out += conns
        return out

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
