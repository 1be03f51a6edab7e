"""Agent pieces: events tailing, the GPU parser, the samples it sends (the supervisor's facts, measured
traffic included) and when it sends them."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

from tests.helpers.waiting import wait_for
from training.agent.core import Agent
from training.agent.tailer import EventsTailer
from training.run.layout import RunLayout
from training.telemetry.gpu_use import parse_gpus
from training.telemetry.schema import dumps, make_event


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


def test_agent_stops_when_stdout_is_closed(tmp_path: Path) -> None:
    out = io.StringIO()
    agent = Agent(str(tmp_path), "a", 0.05, out)
    out.close()
    agent.run()  # returns: writing to a closed stream stops it
    assert agent.stop.is_set()


def test_agent_sample_has_contract_fields(tmp_path: Path) -> None:
    agent = Agent(str(tmp_path), "a", 1.0, io.StringIO())
    ev = json.loads(agent.sample())
    assert ev["kind"] == "host_sample" and ev["host"] == "a" and ev["v"] == 1
    assert set(ev) >= {"cpu_pct", "mem_pct", "gpus", "ps_tcp", "t"}
    assert 0 <= ev["mem_pct"] <= 100 and ev["ps_tcp"] == {}
    hb = json.loads(agent.heartbeat())
    assert hb["kind"] == "heartbeat" and hb["interval_s"] == 1.0
    assert os.path.isdir(tmp_path)


def test_agent_sends_the_supervisors_measured_traffic(tmp_path: Path) -> None:
    """The PS traffic is the supervisor's measurement (training/telemetry/traffic.py), forwarded as it is:
    the agent measures nothing itself."""
    layout = RunLayout(str(tmp_path))
    os.makedirs(os.path.dirname(layout.facts_file("a")))
    measured = {"ps-0": {"port": 23000, "t": 5.0, "bytes_in": 10, "bytes_out": 20, "in_Bps": 1.5, "out_Bps": 2.5,
                         "peers": {}}}
    with open(layout.facts_file("a"), "w") as f:
        json.dump({"host": "a", "t": 5.0, "tasks": {}, "ps_tcp": measured}, f)
    ev = json.loads(Agent(str(tmp_path), "a", 1.0, io.StringIO()).sample())
    assert ev["ps_tcp"] == measured


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
    agent = Agent(str(tmp_path), "a", 1.0, out)
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
