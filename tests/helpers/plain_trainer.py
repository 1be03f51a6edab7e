"""A plain-Python training program (no TensorFlow) for the tests of tfcluster's own machinery: lifecycle,
liveness, restarts, logs, `stop`, `start --wait`, the dashboard's views, the supervisor's and the
orchestrator's faults. It is a real program run the way users' own programs run: `plain_training()` writes
this file beside a hosts.toml and returns the `[training]` table that ships it (`sync`) and runs it on every
task (`command = "{python} plain_trainer.py STEP_S [RELEASE]"`). On the hosts it needs only the stdlib and
tfcluster_report (on every task's PYTHONPATH), and it reports its progress through `report()` as any user's
program does: the `progress` events tests/faults/measure.py reads (local and global step, time).

What it does, shaped like a between-graph TensorFlow program at a fraction of its CPU:
- ps:0 holds the global step: a TCP server on its own address of the cluster spec (TF_CONFIG) adds one for
  each line a trainer sends and answers the new value. It reports the updates it applied as its steps.
- A trainer (chief or worker) takes one step every STEP_S seconds (a little CPU work, then a sleep: paced),
  adds it to the global step on ps:0 and reports its own step, the global step, a loss and BATCH examples.
  While ps:0 cannot be reached it takes no step and retries (a TF worker waits for its PS too); without a
  ps job its own count is the global step.
- The chief (chief:0, or worker:0 without a chief job) exits 0 once the file RELEASE exists (the loopback
  machines share the tests' filesystem); without RELEASE, and for every other task, the program runs until
  the run (the chief's end under `success = "chief"`, a `stop`, a kill) ends it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shlex
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).name
BATCH = 16
STEP_S = 0.1  # a trainer's pace: 10 steps/s; a progress event every `progress_interval` (0.5 s below)


def plain_training(directory: Path, release: Path | None = None, *, step_s: float = STEP_S,
                   **training: Any) -> dict[str, Any]:
    """Write this program into `directory` (where the hosts.toml goes: `sync` paths are relative to it) and
    return the `[training]` table that runs it on every task; `training` adds or overrides keys (e.g.
    `restart`). `release`: the file whose existence ends the chief (None: it never ends by itself)."""
    shutil.copyfile(__file__, directory / PROGRAM)
    args = [str(step_s)] + ([str(release)] if release is not None else [])
    return {"command": f"{{python}} {PROGRAM} {shlex.join(args)}", "sync": [PROGRAM],
            "progress_interval": 0.5, **training}


# --- the program, as it runs on a host ----------------------------------------------------------------------
class GlobalStep:
    """ps:0's side: the global step, served over TCP (one line per step in, the new value out)."""

    def __init__(self, port: int) -> None:
        self.value = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("", port))  # every interface, as TensorFlow binds its port

    def serve_forever(self) -> None:
        while True:
            conn, _ = self._server.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn, conn.makefile("rwb") as f:
                for _ in f:
                    with self._lock:
                        self.value += 1
                        value = self.value
                    f.write(b"%d\n" % value)
                    f.flush()
        except OSError:
            return  # that trainer is gone (killed, its machine lost): it reconnects, or not


class PsClient:
    """A trainer's side: add one step to the global step on ps:0."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._address = (host, int(port))
        self._conn: socket.socket | None = None
        self._stream: io.BufferedIOBase | None = None

    def add_step(self) -> int | None:
        """The global step with this step added; None when ps:0 cannot be reached now (no step taken)."""
        try:
            stream = self._stream
            if self._conn is None or stream is None:
                self._conn = socket.create_connection(self._address, timeout=10)
                stream = self._stream = self._conn.makefile("rwb")
            stream.write(b"+\n")
            stream.flush()
            line = stream.readline()
            if line:
                return int(line)
        except OSError:
            pass
        self._disconnect()  # ps:0 gone, or not up yet: the next step connects again
        return None

    def _disconnect(self) -> None:
        for part in (self._stream, self._conn):
            if part is not None:
                with contextlib.suppress(OSError):
                    part.close()
        self._conn = self._stream = None


def serve_global_step(port: int, name: str, step_s: float) -> None:
    """ps: serve the global step until the run ends this process; report the updates applied."""
    from tfcluster_report import report  # on the tasks' PYTHONPATH (the run's lib/), not the tests'

    store = GlobalStep(port)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    print(f"{name} serving the global step", flush=True)
    while True:
        time.sleep(step_s)
        if store.value:
            report(step=store.value, global_step=store.value)


def train(ps: PsClient | None, name: str, step_s: float, release: str | None) -> None:
    """A trainer's loop: until `release` exists (when given), else until the run ends this process."""
    from tfcluster_report import report

    print(f"{name} training", flush=True)
    step = 0
    while release is None or not os.path.exists(release):
        sum(range(20_000))  # a little CPU work, as a training step does
        time.sleep(step_s)  # paces the steps: the run lasts while a test reads it, at little CPU
        global_step = ps.add_step() if ps is not None else step + 1
        if global_step is None:
            continue  # ps:0 not reachable (yet, or any more): no step
        step += 1
        report(step=step, global_step=global_step, loss=1.0 / math.sqrt(global_step), examples=BATCH)
    print(f"{name} released after {step} steps", flush=True)


def main() -> None:
    step_s = float(sys.argv[1])
    release = sys.argv[2] if len(sys.argv) > 2 else None
    config = json.loads(os.environ["TF_CONFIG"])
    cluster, job, index = config["cluster"], config["task"]["type"], int(config["task"]["index"])
    name = f"{job}:{index}"
    if job == "ps":
        serve_global_step(int(cluster["ps"][index].rsplit(":", 1)[1]), name, step_s)
        return
    chief = job == "chief" or (job == "worker" and index == 0 and "chief" not in cluster)
    ps = PsClient(cluster["ps"][0]) if cluster.get("ps") else None
    train(ps, name, step_s, release if chief else None)


if __name__ == "__main__":
    main()
