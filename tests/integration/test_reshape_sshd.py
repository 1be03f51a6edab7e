"""A live source follows a resize at once (orchestrator/monitor/reshape.py, issue 37) over real sshd machines,
a user's own plain-Python program (no TensorFlow): `tfcluster status --watch --json`, opened on a run of two
hosts BEFORE it is resized, shows the joining host's worker running (heard over that host's stream) after
`tfcluster resize` grows the run to three hosts, and no row of it, nor its host, after the resize back to
two: gone, never `lost`; each resize is a line of its event log. Every wait is for a frame it prints (one a
second), never a fixed time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.local_ports import free_port_block
from testkit.sshd import Machines
from tests.helpers.output import OutputLines
from tests.helpers.tfconfig_program import first_pid, program_training
from tests.integration.lifecycle_helpers import cli, cli_process, started_run_id

pytestmark = pytest.mark.integration

ALIVE = ("running", "stalled")  # the program sleeps: no progress and no CPU is `stalled`, alive all the same

Frame = dict[str, Any]


def frame_when(out: OutputLines, holds: Callable[[Frame], bool], timeout: float, what: str) -> Frame:
    """The first frame `status --watch --json` prints for which `holds(frame)`."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        for line in out.take("{", 1, timeout=max(deadline - time.monotonic(), 0.01)):
            last = dict(json.loads(line))
            if holds(last):
                return last
    raise AssertionError(f"no frame with {what} within {timeout:g}s; the last: {json.dumps(last)[:3000]}")


def rows(frame: Frame) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in frame["tasks"]}


def hosts(frame: Frame) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in frame["hosts"]}


def test_status_watch_open_before_a_grow_and_a_shrink_follows_both(machines: Machines, tmp_path: Path,
                                                                  state_dir: Path) -> None:
    training, base = program_training(tmp_path), free_port_block(4 * 3)
    two = machines.hosts_toml(tmp_path / "two.toml", roles=[["ps"], ["worker"]], base_port=base, training=training)
    three = machines.hosts_toml(tmp_path / "three.toml", roles=[["ps"], ["worker"], ["worker"]], base_port=base,
                                training=training)
    res = cli(state_dir, "start", str(two))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    first_pid(tmp_path, "worker", 0)

    with cli_process(state_dir, "status", run_id, "--watch", "--json") as watch:
        out = OutputLines(watch.stdout)
        frame_when(out, lambda f: {n: r["host"] for n, r in rows(f).items()} == {"ps:0": "m0", "worker:0": "m1"}
                   and all(r["state"] in ALIVE for r in rows(f).values()), 60, "the run as it started, alive")

        res = cli(state_dir, "resize", run_id, str(three))
        assert res.returncode == 0, res.stdout + res.stderr
        first_pid(tmp_path, "worker", 1)  # its program runs on m2
        grown = frame_when(out, lambda f: rows(f).get("worker:1", {}).get("process_state") == "running"
                           and hosts(f).get("m2", {}).get("age_s") is not None, 60,
                           "m2's worker:1 running, heard over m2's own stream")
        assert rows(grown)["worker:1"]["host"] == "m2" and rows(grown)["worker:1"]["state"] in ALIVE
        assert hosts(grown)["m2"]["reachable"] and grown["state"] == "running"
        assert any(e["text"] == "resize: host m2 joins; worker:1 starts on m2" for e in grown["log"]), grown["log"]

        res = cli(state_dir, "resize", run_id, str(two))
        assert res.returncode == 0, res.stdout + res.stderr
        back = frame_when(out, lambda f: "worker:1" not in rows(f) and "m2" not in hosts(f), 60,
                          "no row of worker:1, no host m2")
        assert set(rows(back)) == {"ps:0", "worker:0"} and all(r["state"] in ALIVE for r in rows(back).values())
        assert set(hosts(back)) == {"m0", "m1"} and back["state"] == "running"
        assert any(e["text"] == "resize: worker:1 on m2 is stopped; host m2 leaves" for e in back["log"])
        assert not any(e["kind"] == "lost" for e in back["log"]), back["log"]
        # and it stays so: the frames after it (m2's stream retired, nothing of m2 comes back)
        later = [json.loads(line) for line in out.expect("{", 3, timeout=30)]
        assert all("worker:1" not in rows(f) and "m2" not in hosts(f) for f in later)
        assert watch.poll() is None, out.so_far()[-5:]  # it ran throughout

    stop = cli(state_dir, "stop", run_id, "--grace", "1")
    assert stop.returncode == 0, stop.stdout + stop.stderr
