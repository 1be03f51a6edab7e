"""Agent pieces: the `ss -tinH` parser (recorded output), PS byte counters, events tailing, GPU parser."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

from tests.helpers.waiting import wait_for
from training.agent.core import Agent, allreduce_ports_from_run, ports_from_run, ps_ports_from_run
from training.agent.tailer import EventsTailer
from training.agent.tcp import PsCounters, TcpConn, parse_ss, ss_command
from training.telemetry.gpu_use import parse_gpus
from training.telemetry.schema import dumps, make_event

DATA = Path(__file__).parent / "data"


def test_parse_recorded_ss_output_ipv6_and_mapped_ipv4() -> None:
    conns = parse_ss((DATA / "ss_tinH.txt").read_text())
    assert conns == [
        TcpConn(23000, "::1", 42606, bytes_out=0, bytes_in=777),
        TcpConn(23000, "127.0.0.1", 40224, bytes_out=5000, bytes_in=100000),
        TcpConn(23000, "127.0.0.1", 40228, bytes_out=0, bytes_in=0),
    ]


def test_parse_plain_ipv4_and_garbage() -> None:
    out = ("0      0      127.0.0.1:39991 127.0.0.2:45036\n"
           "\t bbr wscale:10,10 bytes_sent:9 bytes_acked:7 bytes_received:11 segs_out:3\n"
           "garbage line without addresses\n"
           "\t bytes_acked:1 bytes_received:1\n")
    assert parse_ss(out) == [TcpConn(39991, "127.0.0.2", 45036, bytes_out=7, bytes_in=11)]
    assert parse_ss("") == []


def test_ss_command_filters_every_port() -> None:
    assert ss_command([23001, 23000], [23005]) == ["ss", "-tinpH", "state", "established",
                                                   "( sport = :23000 or sport = :23001 or dport = :23005 )"]


def test_outbound_connections_of_the_ps_process_are_attributed_by_pid() -> None:
    """TF's RecvTensor is issued by the receiver: a PS pulls gradients over connections it opens to the
    workers' ports. Those count for the PS (same pid as its server sockets); another process's do not."""
    c = PsCounters({"ps-0": 23000}, peer_ports={23001})
    c.update([])  # baseline: nothing open yet
    conns = parse_ss((DATA / "ss_tinpH.txt").read_text())
    assert [x.pid for x in conns] == [4321, 4321, 999]
    c.update(conns)
    snap = c.snapshot()["ps-0"]
    assert (snap["bytes_in"], snap["bytes_out"]) == (1000 + 500_000, 2001 + 301)
    assert snap["peers"] == {"127.0.0.3": {"in": 501_000, "out": 2302}}


def test_ps_counters_are_monotonic_across_connection_churn() -> None:
    c = PsCounters({"ps-0": 23000, "ps-1": 23001})
    c.update([TcpConn(23000, "10.0.0.2", 5000, 100, 50), TcpConn(9999, "10.0.0.2", 1, 7, 7)])
    snap = c.snapshot()
    assert snap["ps-0"]["bytes_in"] == 0  # the first sample is the baseline
    c.update([TcpConn(23000, "10.0.0.2", 5000, 300, 80), TcpConn(23000, "10.0.0.3", 6000, 10, 20)])
    snap = c.snapshot()
    assert (snap["ps-0"]["bytes_in"], snap["ps-0"]["bytes_out"]) == (30 + 20, 200 + 10)
    assert snap["ps-0"]["peers"] == {"10.0.0.2": {"in": 30, "out": 200}, "10.0.0.3": {"in": 20, "out": 10}}
    # the first connection closed, a new one from the same peer opened: totals never go back
    c.update([TcpConn(23000, "10.0.0.2", 5001, 40, 5), TcpConn(23000, "10.0.0.3", 6000, 10, 20)])
    snap = c.snapshot()
    assert (snap["ps-0"]["bytes_in"], snap["ps-0"]["bytes_out"]) == (55, 250)
    assert snap["ps-1"] == {"port": 23001, "bytes_in": 0, "bytes_out": 0, "peers": {}}


def test_tailer_new_files_partial_lines_truncation(tmp_path: Path) -> None:
    ev = tmp_path / "events"
    ev.mkdir()
    (ev / "worker-0.jsonl").write_text('{"a":1}\n{"a":2}\n')
    t = EventsTailer(str(ev))
    assert t.poll() == ['{"a":1}', '{"a":2}']
    assert t.poll() == []
    with open(ev / "worker-0.jsonl", "a") as f:
        f.write('{"a":3')
    (ev / "ps-0.jsonl").write_text('{"b":1}\n')
    (ev / "ignored.log").write_text("x\n")
    assert t.poll() == ['{"b":1}']  # the partial line waits
    with open(ev / "worker-0.jsonl", "a") as f:
        f.write('}\n')
    assert t.poll() == ['{"a":3}']
    (ev / "worker-0.jsonl").write_text('{"new":1}\n')  # truncated and rewritten
    assert t.poll() == ['{"new":1}']


def test_tailer_replays_only_the_tail_of_a_big_existing_file(tmp_path: Path) -> None:
    lines = [json.dumps({"i": i}) for i in range(1000)]
    (tmp_path / "w.jsonl").write_text("\n".join(lines) + "\n")
    got = EventsTailer(str(tmp_path), backlog_bytes=100).poll()
    assert got and got[-1] == lines[-1] and len(got) < 20
    assert all(g in lines for g in got)  # the cut first line was dropped, not emitted half


def test_tailer_missing_directory(tmp_path: Path) -> None:
    t = EventsTailer(str(tmp_path / "nope"))
    assert t.poll() == []
    (tmp_path / "nope").mkdir()
    (tmp_path / "nope" / "x.jsonl").write_text('{"late":1}\n')
    assert t.poll() == ['{"late":1}']  # created after the agent started: read from the beginning


def test_nvidia_smi_parser() -> None:
    """The per-GPU query the agent falls back on (its recorded formats: tests/unit/test_gpu_use.py)."""
    out = "0, GPU-a, 87, 5120, 16384, 70, 250.00\n1, GPU-b, 3, 100, 16384, 35, [N/A]\nbad line\n"
    assert [(g["index"], g["util_pct"], g["mem_used_mb"], g["power_w"]) for g in parse_gpus(out)] == [
        (0, 87.0, 5120.0, 250.0), (1, 3.0, 100.0, None)]


def test_ports_from_run_json(tmp_path: Path) -> None:
    plan = {"tasks": [{"job": "ps", "index": 0, "host": "a", "port": 23000},
                      {"job": "ps", "index": 1, "host": "b", "port": 23001},
                      {"job": "worker", "index": 0, "host": "a", "port": 23002}]}
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "plan": plan}))
    assert ps_ports_from_run(str(tmp_path), "a") == {"ps-0": 23000}
    assert ports_from_run(str(tmp_path), "a") == ({"ps-0": 23000}, {23001, 23002})
    assert ps_ports_from_run(str(tmp_path / "missing"), "a") == {}


def test_multi_worker_mirrored_workers_are_measured_as_ps_tasks_are(tmp_path: Path) -> None:
    """No PS there: the all-reduce traffic is what moves, measured per worker of this host."""
    tasks = [{"job": "worker", "index": 0, "host": "a", "port": 23000},
             {"job": "worker", "index": 1, "host": "b", "port": 23001}]
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "plan": {"mode": "multi-worker-mirrored",
                                                                            "tasks": tasks}}))
    assert allreduce_ports_from_run(str(tmp_path), "a") == ({"worker-0": 23000}, {23001})
    assert ports_from_run(str(tmp_path), "a")[0] == {}
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "plan": {"mode": "between-graph", "tasks": tasks}}))
    assert allreduce_ports_from_run(str(tmp_path), "a") == ({}, set())


def test_agent_stops_when_stdout_is_closed(tmp_path: Path) -> None:
    out = io.StringIO()
    agent = Agent(str(tmp_path), "a", 0.05, out, ps_ports={})
    out.close()
    agent.run()  # returns: writing to a closed stream stops it
    assert agent.stop.is_set()


def test_agent_sample_has_contract_fields(tmp_path: Path) -> None:
    agent = Agent(str(tmp_path), "a", 1.0, io.StringIO(), ps_ports={})
    ev = json.loads(agent.sample())
    assert ev["kind"] == "host_sample" and ev["host"] == "a" and ev["v"] == 1
    assert set(ev) >= {"cpu_pct", "mem_pct", "gpus", "ps_tcp", "t"}
    assert 0 <= ev["mem_pct"] <= 100
    hb = json.loads(agent.heartbeat())
    assert hb["kind"] == "heartbeat" and hb["interval_s"] == 1.0
    assert os.path.isdir(tmp_path)


class _Flushes(io.StringIO):
    """The agent's stdout: what each flush (one write to the SSH channel) carried, and when."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[tuple[float, str]] = []

    def flush(self) -> None:
        self.flushes.append((time.monotonic(), self.getvalue()))
        self.seek(0)
        self.truncate()


def test_agent_sends_progress_with_its_sample_and_a_state_change_at_once(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    out = _Flushes()
    agent = Agent(str(tmp_path), "a", 1.0, out, ps_ports={})
    runner = threading.Thread(target=agent.run, daemon=True)
    runner.start()
    try:
        with open(events / "worker-0.jsonl", "a") as f:
            # A producer at a steady pace (the batching over time is what is under test): a progress line every
            # 0.05 s for 2.5 s, so the tail (0.25 s) sees ~10 batches.
            for step in range(50):
                f.write(dumps(make_event("progress", "a", job="worker", task=0, local_step=step)) + "\n")
                f.flush()
                time.sleep(0.05)
            written = time.monotonic()
            f.write(dumps(make_event("task_state", "a", job="worker", task=0, state="exited")) + "\n")
        wait_for(lambda: any("task_state" in text for _, text in out.flushes), 10, "the state change sent",
                 interval=0.01)
    finally:
        agent.stop.set()
        runner.join(timeout=10)
    sent = [json.loads(line) for _, text in out.flushes for line in text.splitlines()]
    assert [e["local_step"] for e in sent if e["kind"] == "progress"] == list(range(50))  # none lost
    arrived = next(t for t, text in out.flushes if "task_state" in text)
    assert arrived - written < 0.6  # within a tail period or two, not held for the next flush
    progress_flushes = [t for t, text in out.flushes if '"progress"' in text and t < written]
    assert len(progress_flushes) <= 4, len(progress_flushes)  # one per interval (2.5 s), not one per tail
