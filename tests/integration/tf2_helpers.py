"""Checks shared by the TF2 strategy modes' integration tests (real TF processes, testkit/local_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import tensorflow as tf

from testkit.local_cluster import LocalCluster
from tests.helpers.procs import marked

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"  # the global step in a tf.train.Checkpoint(step=...)


def checkpoint_step(directory: Path) -> int:
    """The global step stored in the latest checkpoint of `directory` (read back by TensorFlow itself)."""
    latest = tf.train.latest_checkpoint(str(directory))
    assert latest, f"no checkpoint in {directory}"
    return int(tf.train.load_checkpoint(latest).get_tensor(STEP_KEY))


def summary_values(directory: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of every `tag` summary TensorBoard would read from the event files in `directory`."""
    out = []
    for path in sorted(directory.glob("events.out.tfevents*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == tag:
                    out.append((int(event.step), float(tf.make_ndarray(value.tensor))))
    return out


def run_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes of this run (found by TFCLUSTER_RUN_DIR in their environment, as `stop` finds them)."""
    return marked(lambda marker: marker == str(run_dir))


def last_global_step(cluster: LocalCluster, job: str, index: int) -> int:
    events = cluster.events(job, index)
    return int(events[-1]["global_step"]) if events else -1


def steps_per_s(events: list[dict[str, Any]]) -> float:
    """Steps per second over the events' span (as the dashboard derives it from local_step and t)."""
    first, last = events[0], events[-1]
    return float(last["local_step"] - first["local_step"]) / max(1e-9, float(last["t"] - first["t"]))


def all_exited_zero(cluster: LocalCluster, timeout: float) -> dict[str, int | None]:
    codes = cluster.wait(timeout)
    assert all(rc == 0 for rc in codes.values()), f"exit codes {codes}\n{cluster.logs_tail()}"
    return codes
