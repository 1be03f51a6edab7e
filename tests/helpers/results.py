"""For tests of a run's results here: a running TensorBoard read through its HTTP API, as a browser does,
and the file senders (training/results/sender.py) still running on this machine (every loopback "host")."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from orchestrator.run import records
from tests.plans import tiny_plan


def get(url: str, path: str, **query: str) -> Any:
    full = url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(full, timeout=30) as response:
        return json.loads(response.read())


def scalar_tags(url: str) -> dict[str, list[str]]:
    """{run: [tag, ...]} of the scalars TensorBoard has loaded."""
    return {run: sorted(tags) for run, tags in get(url, "/data/plugin/scalars/tags").items()}


def scalars(url: str, run: str, tag: str) -> list[tuple[int, float]]:
    """[(step, value)] of one run's tag, as TensorBoard serves them."""
    return [(int(step), float(value)) for _, step, value in get(url, "/data/plugin/scalars/scalars", run=run, tag=tag)]


def file_senders(sshd_port: int | None = None) -> list[psutil.Process]:
    """Live processes running the sender's source (their command line carries it), zombies excluded: this
    test's own, among whatever other tests run beside it (pytest-xdist): those its sshd on `sshd_port`
    started, or else this process's descendants (the local transport)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if (p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE
                or not any("INDEX_FIRST" in part for part in p.info["cmdline"] or [])):
            continue
        with contextlib.suppress(psutil.Error):
            if sshd_port is not None:
                mine = p.environ().get("SSH_CONNECTION", "").endswith(f" {sshd_port}")
            else:
                mine = any(parent.pid == os.getpid() for parent in p.parents())
            if mine and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def local_record(root: Path, run_id: str = "r1", training: dict[str, Any] | None = None) -> records.RunRecord:
    """A saved record of a run on two local-transport "hosts", m0 and m1 (one worker each), whose run dirs
    are `root/m0` and `root/m1` (nothing runs: tests write the files the tasks would)."""
    plan = tiny_plan([["worker"], ["worker"]], mode="multi-worker-mirrored", training=training)
    record = records.RunRecord(run_id=run_id, config_path="/x/hosts.toml", cluster="demo", mode=plan.mode,
                               created=1.0, plan=plan,
                               hosts=[records.HostRecord(name=h, workdir=str(root), run_dir=str(root / h), started=True)
                                      for h in ("m0", "m1")])
    records.save(record)
    return record


def task_runs(summaries: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """{task: {tag: [(step, value)]}} of the TensorBoard runs under a run dir's `summaries/`, as TensorFlow's
    own reader reads them (which checks every record's CRC)."""
    import tensorflow as tf

    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for path in sorted(summaries.glob("*/*tfevents*")):
        tags = out.setdefault(path.parent.name, {})
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
    return out


def points_are_progress(points: list[tuple[int, float]], events: list[dict[str, Any]]) -> bool:
    """Every (step, loss) point is the (global_step, loss) of one of the task's progress events."""
    import math

    shown = [(e["global_step"], e["loss"]) for e in events if e.get("loss") is not None]
    return bool(points) and all(any(step == s and math.isclose(value, loss, rel_tol=1e-6) for s, loss in shown)
                                for step, value in points)
