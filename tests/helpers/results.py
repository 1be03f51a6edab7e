"""For tests of a run's results here: a running TensorBoard read through its HTTP API, as a browser does,
and the file senders (training/results/sender.py) still running on this machine (every loopback "host")."""

from __future__ import annotations

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


def file_senders() -> list[psutil.Process]:
    """Live processes running the sender's source (their command line carries it), zombies excluded."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if (p.pid != os.getpid() and p.info["status"] != psutil.STATUS_ZOMBIE
                and any("INDEX_FIRST" in part for part in p.info["cmdline"] or [])):
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
