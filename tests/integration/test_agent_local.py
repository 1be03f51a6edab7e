"""The agent as a real process: sends the real TCP traffic of a loopback "PS" port as the supervisor's
facts writer measured it from the kernel (training/telemetry/traffic.py), tails events files, and stops
on SIGTERM and when its reader goes away."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.local_ports import free_port_block
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout
from training.telemetry.host_facts import FactsWriter
from training.telemetry.traffic import PS_KEY, TaskTraffic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
ROOT = Path(__file__).resolve().parents[2]


def start_agent(run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "training.agent", "--run-dir", str(run_dir), "--host", "h0", "--interval", "0.2",
         *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )


def read_until(proc: subprocess.Popen[str], pred: Any, timeout: float = 15.0) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(json.loads(line))
        if pred(seen[-1]):
            return seen
    raise AssertionError(f"condition not met; last lines: {seen[-5:]}")


def test_agent_sends_measured_ps_port_traffic_and_tails_events(tmp_path: Path) -> None:
    port = free_port_block(1)
    (tmp_path / "events").mkdir()
    layout = RunLayout(str(tmp_path))
    os.makedirs(os.path.dirname(layout.facts_file("h0")))
    # What the host's supervisor keeps (training/supervisor/core.py): the facts, with its PS's traffic
    facts = FactsWriter(layout, "h0", {"ps-0": port}, find_gpus=False,
                        traffic=TaskTraffic(PS_KEY, {"ps-0": port}, set()))
    server = socket.create_server(("127.0.0.1", port))
    facts.update()  # the baseline
    proc = start_agent(tmp_path)
    conns: list[socket.socket] = []
    try:
        read_until(proc, lambda e: e["kind"] == "host_sample")
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        conns += [client, peer]

        def exchange() -> None:
            client.sendall(b"p" * 300_000)  # worker pushes gradients
            got = 0
            while got < 300_000:
                got += len(peer.recv(65536))
            peer.sendall(b"v" * 700_000)  # PS returns variables

        def drain() -> None:
            got = 0
            while got < 700_000:
                got += len(client.recv(65536))

        reader = threading.Thread(target=drain)
        reader.start()
        exchange()
        reader.join(10)

        def written() -> bool:  # (the PS's bytes out count once the peer acknowledged them)
            facts.update()
            with open(layout.facts_file("h0")) as f:
                return bool(json.load(f)["ps_tcp"]["ps-0"]["bytes_out"] >= 700_000)

        wait_for(written, 10, "the facts to hold the bytes sent", interval=0.05)
        with open(tmp_path / "events" / "worker-0.jsonl", "w") as f:
            f.write(json.dumps({"v": 1, "t": time.time(), "host": "h0", "kind": "progress", "job": "worker",
                                "task": 0, "local_step": 1, "global_step": 1, "examples": 1}) + "\n")

        def measured(e: dict[str, Any]) -> bool:
            m = e.get("ps_tcp", {}).get("ps-0", {})
            return e["kind"] == "host_sample" and m.get("bytes_in", 0) >= 300_000 and m.get("bytes_out", 0) >= 700_000

        seen = read_until(proc, measured)
        sample = seen[-1]["ps_tcp"]["ps-0"]
        assert sample["port"] == port and sample["in_Bps"] > 0 and sample["out_Bps"] > 0
        assert sample["peers"]["127.0.0.1"]["bytes_in"] >= 300_000
        assert any(e["kind"] == "progress" for e in seen)  # the events file was tailed
        assert any(e["kind"] == "heartbeat" for e in seen)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        for c in conns:
            c.close()
        server.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_agent_exits_when_its_reader_goes_away(tmp_path: Path) -> None:
    proc = start_agent(tmp_path)
    try:
        read_until(proc, lambda e: e["kind"] == "heartbeat")
        assert proc.stdout is not None
        proc.stdout.close()  # the SSH channel closed: the next write fails
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_agent_exit_on_stdin_eof(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "training.agent", "--run-dir", str(tmp_path), "--host", "h0", "--interval", "5",
         "--exit-on-stdin-eof"], cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
    )
    try:
        read_until(proc, lambda e: e["kind"] == "heartbeat")  # up and streaming, its stdin still open
        assert proc.poll() is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert os.path.isdir(tmp_path)
