"""A task that only serves: the `ps` tasks, and the `worker` tasks of in-graph mode.

`serve(ctx)` starts this task's `tf.distribute.Server` (gRPC; a ps task sees no GPU) and keeps it up
until the end of training, or until SIGTERM/SIGINT (then exits 0: being stopped is a normal end).

End-of-training contract (TF's classic "done queue" pattern, scoped to the run):
- every serving task N of job J owns a FIFOQueue of strings, placed on `/job:J/task:N/device:CPU:0`
  with `shared_name = "done_queue_<run tag>_<J><N>"` (the run tag: a hash of the run id), built only
  by `done_queue` so that every side creates it with identical attributes. A task of another run that
  reaches this server (a port reused by mistake) creates and fills a queue of its own, which nobody here
  reads: runs never cross;
- every client that finishes its training loop enqueues one token, `"<run id> <job>:<index>"`, on the
  queue of every serving task it used (`signal_done`): between-graph workers and the chief on every ps
  queue; the in-graph client (`chief:0`) on every ps and worker queue; a token of another run is
  ignored;
- the serving task dequeues until it has one token from every expected finisher (`expected_finishers`:
  between-graph ps: every worker and the chief; in-graph: the client), then exits 0. A token from a
  restarted task counts once. A finisher that fails for good never sends its token: the run then ends
  through its supervisors instead (the run has failed: training/supervisor/policy.py), which stop this
  task;
- the expected finishers are those of the plan in the task's run.json *now* (`FinisherWatch`: re-read
  whenever the file is replaced): `tfcluster resize` replaces it on every kept host (training/supervisor/
  resize.py), so a worker that joined is waited for and its token counts, and a removed worker, which never
  sends one, no longer holds this task up (checked at every token and every POLL_S). A token from a task
  the plan does not name (yet) is kept: it counts once the plan names that task.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ..run.context import TaskContext
from ..run.file_stamp import file_stamp
from ..run.roles import FINISHER_JOBS, SERVING_JOBS
from .devices import session_config

v1 = tf.compat.v1
log = logging.getLogger("tfcluster.serve")

DONE_QUEUE_CAPACITY = 4096  # part of the queue's identity: every side must use the same value
POLL_S = 0.5  # how often the main thread wakes up to notice a stop signal
# After the last token: the finishers close their sessions with this server right after signalling;
# exiting at once fails those closes ("Cleanup partition error: Socket closed" in their logs).
LINGER_S = 1.0


def run_tag(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()[:12]


def done_queue(run_id: str, job: str, index: int) -> Any:
    """The done queue of `/job:<job>/task:<index>` for this run (call inside the graph that uses it)."""
    with tf.device(f"/job:{job}/task:{index}/device:CPU:0"):
        return v1.FIFOQueue(DONE_QUEUE_CAPACITY, [tf.string], shapes=[[]],
                            shared_name=f"done_queue_{run_tag(run_id)}_{job}{index}", name=f"done_queue_{job}{index}")


def expected_finishers(mode: str, cluster_spec: Mapping[str, Sequence[str]]) -> set[str]:
    return {f"{job}:{i}" for job in FINISHER_JOBS[mode] for i in range(len(cluster_spec.get(job, [])))}


def serving_targets(mode: str, cluster_spec: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    """The queues a finishing client signals: every task of the mode's serving jobs (training/run/roles.py)."""
    jobs = SERVING_JOBS.get(mode, ("ps",))
    return [(job, i) for job in jobs for i in range(len(cluster_spec.get(job, [])))]


def signal_done(master: Callable[[str, int], str], run_id: str, sender: str, targets: Iterable[tuple[str, int]],
                own_device_filter: str | None, timeout_s: float = 20.0,
                cluster: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, int]]:
    """Enqueue `sender` on each target's done queue; returns the targets that were signalled.

    One short session per target, on `master(job, index)` (this task's own server, or, for a caller
    that has none, the target's), with device filters naming only that target and this task, so a target
    that is already gone cannot block the others (and `cluster`, the sessions' own, for a task that
    joined a running cluster: training/cluster/joining.py); each attempt runs in a daemon thread bounded by
    `timeout_s` (creating a session to a dead task would otherwise wait forever).
    """
    done: list[tuple[str, int]] = []  # appended from the threads (list.append is atomic)
    targets = list(targets)

    def one(job: str, index: int) -> None:
        graph = tf.Graph()
        with graph.as_default():
            enqueue = done_queue(run_id, job, index).enqueue([tf.constant(f"{run_id} {sender}")])
        filters = [f"/job:{job}/task:{index}"] + ([own_device_filter] if own_device_filter else [])
        config = session_config(device_filters=filters, cluster=cluster)
        config.operation_timeout_in_ms = int(timeout_s * 1000)
        sess = v1.Session(master(job, index), graph=graph, config=config)
        sess.run(enqueue)
        done.append((job, index))
        # Closing may wait on a target that exited the moment it got its last token: do not wait for it.
        sess.close()

    for job, index in targets:
        threading.Thread(target=_quietly, args=(one, job, index), daemon=True, name=f"done-{job}{index}").start()
    deadline = time.monotonic() + timeout_s
    while len(done) < len(targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(done)


def _quietly(fn: Any, job: str, index: int) -> None:
    try:
        fn(job, index)
    except Exception as e:  # the target may be gone already: nothing left to tell it
        log.warning("could not signal the end of training to %s:%d: %s", job, index, str(e).splitlines()[0])


class FinisherWatch:
    """The finishers this serving task waits for: those of the plan in its run.json, re-read whenever the
    file is replaced (one stat per look; a file being replaced or damaged keeps the last good set)."""

    def __init__(self, run_file: str, mode: str, cluster_spec: Mapping[str, Sequence[str]]) -> None:
        self.run_file, self.mode = run_file, mode
        self.expected = expected_finishers(mode, cluster_spec)
        self._stamp: tuple[int, int] | None = None  # read at the first look: it may have changed since the task read it

    def current(self) -> set[str]:
        stamp = file_stamp(self.run_file)
        if stamp is not None and stamp != self._stamp:
            try:
                with open(self.run_file, encoding="utf-8") as f:
                    spec = json.load(f)["plan"]["cluster_spec"]
                expected = expected_finishers(self.mode, spec)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return set(self.expected)  # looked at again next time: the stamp is not taken
            self._stamp = stamp
            if expected != self.expected:
                log.info("the run was resized: waiting for %s", ", ".join(sorted(expected)) or "nobody")
            self.expected = expected
        return set(self.expected)


def serve(ctx: TaskContext) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("%s: received %s, stopping", ctx.name, signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cluster = tf.train.ClusterSpec(ctx.cluster_spec)
    server = tf.distribute.Server(cluster, job_name=ctx.job, task_index=ctx.index, protocol="grpc",
                                  config=session_config(cpu_only=ctx.job == "ps"), start=True)
    log.info("%s: serving at %s (port %s)", ctx.name, server.target, ctx.task_plan.get("port"))
    watch = FinisherWatch(ctx.layout.run_file, ctx.mode, ctx.cluster_spec)
    log.info("%s: will exit once these have finished training: %s", ctx.name, ", ".join(sorted(watch.expected)))
    finished = wait_for_finishers(server.target, ctx.run_id, ctx.job, ctx.index, watch.current, stop)
    expected = watch.current()
    if stop.is_set():
        log.info("%s: stopped (%d of %d finishers seen)", ctx.name, len(finished & expected), len(expected))
    else:
        log.info("%s: every finisher is done; exiting", ctx.name)
        stop.wait(LINGER_S)
    return 0


def wait_for_finishers(target: str, run_id: str, job: str, index: int, expected: Callable[[], set[str]],
                       stop: threading.Event) -> set[str]:
    """Dequeue tokens (in a daemon thread: a blocking dequeue cannot be interrupted) until every finisher
    `expected()` names now has sent one, or `stop` is set. Looked at after each token and every POLL_S (a
    resize may remove the last finisher not done). No dequeue timeout: TF logs every timed-out run as a
    warning."""
    graph = tf.Graph()
    with graph.as_default():
        token = done_queue(run_id, job, index).dequeue()
    # Only this task's own devices: a session over the whole cluster would wait for every task to be up.
    config = session_config(device_filters=[f"/job:{job}/task:{index}"], cpu_only=True)
    finished: set[str] = set()  # only the drain thread adds; the main thread reads a copy
    news = threading.Event()  # a token came, or the drain ended
    drained = threading.Event()

    def drain() -> None:
        try:
            with v1.Session(target, graph=graph, config=config) as sess:
                while True:
                    token_run, _, name = sess.run(token).decode("utf-8", "replace").partition(" ")
                    if token_run != run_id:
                        log.warning("%s:%d: ignored a done token of another run (%s)", job, index, token_run)
                        continue
                    if name not in finished:
                        log.info("%s:%d: %s finished training", job, index, name)
                    finished.add(name)
                    news.set()
        except Exception as e:
            log.error("%s:%d: done queue failed: %s", job, index, str(e).splitlines()[0])
        drained.set()
        news.set()

    threading.Thread(target=drain, daemon=True, name="done-queue").start()
    while not stop.is_set() and not drained.is_set() and not expected() <= set(finished):
        news.wait(POLL_S)
        news.clear()
    return set(finished)
