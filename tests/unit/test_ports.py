"""orchestrator/ports.py against real sockets on this machine's loopback (no network beyond it)."""

from __future__ import annotations

import socket

import pytest

from orchestrator.run.local_ports import free_port_block, free_port_on, port_free


def test_a_block_is_consecutive_free_ports_in_range() -> None:
    base = free_port_block(4, low=30000, high=40000)
    assert base >= 30000 and base + 4 <= 40000
    held = []
    try:
        for port in range(base, base + 4):  # every port of the block binds right away
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("0.0.0.0", port))
    finally:
        for s in held:
            s.close()


def test_a_bound_port_is_not_free_and_is_free_again_once_closed() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
        assert not port_free(port, ["127.0.0.1"])
    assert port_free(port, ["127.0.0.1"])


def test_no_block_in_a_range_that_is_taken() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        port = int(s.getsockname()[1])
        with pytest.raises(RuntimeError, match="no block of 1 free ports"):
            free_port_block(1, low=port, high=port + 2)  # the only candidate start is `port`


def test_a_port_free_on_several_loopback_addresses() -> None:
    addresses = ["127.0.0.2", "127.0.0.3"]
    port = free_port_on(addresses)
    assert port_free(port, ["0.0.0.0", *addresses])
