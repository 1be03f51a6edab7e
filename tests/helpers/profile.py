"""A pytest plugin, loaded only when asked (`-p tests.helpers.profile` with TFCLUSTER_TEST_PROFILE=<directory>):
each test's wall time, CPU seconds and TensorFlow processes. Each process that runs tests (every pytest-xdist
worker, or pytest itself) writes `<directory>/profile-<worker id, or "main">.json` at the end of its session:
a list of {"nodeid", "wall_s", "cpu_s", "tf_processes", "cpu_parts_s"}, in the order its tests ran.

A test's CPU (over setup, call and teardown) is the sum of three parts (`cpu_parts_s`):
- `worker`: the pytest process's own user+system time, less this plugin's sampling thread's;
- `children`: its reaped children's (the CLI subprocesses a test runs; the CPU of a long-lived child such as a
  module's sshd, with what it reaped, lands on the test during which it is reaped);
- `runs`: the processes of the test's runs that are NOT its descendants: tfcluster starts them over SSH
  (detached with setsid: reparented to init) or under Slurm. Every process of a run carries
  TFCLUSTER_RUN_DIR=<workdir>/runs/<run id>/<host>; a run is the test's when the state dir the worker has at
  that moment (TFCLUSTER_STATE_DIR) records it (`runs/<run id>.json`).
A TensorFlow process of a test is one of its run processes or descendants whose /proc/<pid>/maps mentions
tensorflow, counted once, for the test during which it is first seen so (a shared run's task: the first test).

The `runs` part and the TensorFlow processes come from sampling, every SAMPLE_INTERVAL_S: the CPU of a process
that lives less than one interval, and the last interval of each before it exits, are missed. The figures
are a floor. Without -p it costs nothing: nothing imports it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from training.run.layout import RUN_DIR_ENV

PROFILE_DIR_ENV = "TFCLUSTER_TEST_PROFILE"
SAMPLE_INTERVAL_S = 0.5
STATE_DIR_ENV = "TFCLUSTER_STATE_DIR"

ProcessKey = tuple[int, float]  # (pid, create time): a pid alone may be reused


def run_id_of(run_dir: str) -> str | None:
    """The run id in a TFCLUSTER_RUN_DIR value `<workdir>/runs/<run id>/<host>`; None for any other shape."""
    parts = Path(run_dir).parts
    if len(parts) >= 3 and parts[-3] == "runs" and parts[-2] not in ("", ".", ".."):
        return parts[-2]
    return None


def loads_tensorflow(maps: str) -> bool:
    """Whether a process's /proc/<pid>/maps text shows TensorFlow's libraries mapped."""
    return "tensorflow" in maps


def profile_file(directory: Path, worker: str) -> Path:
    return directory / f"profile-{worker}.json"


@dataclass
class _Seen:
    """What the sampler remembers of one process: read once, since reading every environ each time costs."""

    name: str  # an exec changes it (and may change the environment): then it is read again
    run_id: str | None  # of its TFCLUSTER_RUN_DIR; None: no marker (or one of another shape)
    counted_cpu: float = 0.0  # the highest user+system seen and already given to a test
    tensorflow: bool = False


@dataclass
class _TestFigures:
    runs_cpu: float = 0.0
    tf_processes: int = 0


class Sampler:
    """The daemon thread that attributes run processes' CPU and TensorFlow processes to the current test."""

    def __init__(self) -> None:
        self.worker_pid = os.getpid()
        self.own_cpu = 0.0  # this thread's CPU so far: taken out of the worker's own
        self._seen: dict[ProcessKey, _Seen] = {}  # only this thread touches it
        self._test: _TestFigures | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tfcluster-profile", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def begin_test(self) -> tuple[_TestFigures, float]:
        with self._lock:
            self._test = _TestFigures()
            return self._test, self.own_cpu

    def end_test(self) -> float:
        """This thread's CPU so far; the test's figures are final."""
        with self._lock:
            self._test = None
            return self.own_cpu

    def _loop(self) -> None:
        last = time.thread_time()
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self.sample()
            now = time.thread_time()
            with self._lock:
                self.own_cpu += now - last
            last = now

    def sample(self) -> None:
        state_dir = os.environ.get(STATE_DIR_ENV, "")
        live: dict[ProcessKey, tuple[psutil.Process, str]] = {}
        parent_of: dict[int, int] = {}
        for proc in psutil.process_iter():
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    parent_of[proc.pid] = proc.ppid()
                    live[key] = (proc, proc.name())
            except psutil.Error:
                continue
        descendants = _descendants(self.worker_pid, parent_of)
        recorded: dict[str, bool] = {}
        runs_cpu, tf_found = 0.0, 0
        for key, (proc, name) in live.items():
            seen = self._remember(key, proc, name)
            if seen is None:
                continue
            ours = seen.run_id is not None and _recorded(seen.run_id, state_dir, recorded)
            descendant = proc.pid in descendants
            if ours and not descendant:  # a descendant's CPU reaches the worker's children times instead
                runs_cpu += self._cpu_increase(proc, seen)
            if (ours or descendant) and not seen.tensorflow and self._test is not None:
                seen.tensorflow = _maps_show_tensorflow(proc.pid)
                tf_found += int(seen.tensorflow)
        for key in self._seen.keys() - live.keys():
            del self._seen[key]
        with self._lock:
            if self._test is not None:
                self._test.runs_cpu += runs_cpu
                self._test.tf_processes += tf_found

    def _remember(self, key: ProcessKey, proc: psutil.Process, name: str) -> _Seen | None:
        seen = self._seen.get(key)
        if seen is not None and seen.name == name:
            return seen
        try:
            run_dir = proc.environ().get(RUN_DIR_ENV)
        except psutil.AccessDenied:
            run_dir = None  # not ours to read: not a process of this user's runs
        except psutil.Error:
            return None  # gone, or a zombie: nothing left to count
        renewed = _Seen(name=name, run_id=run_id_of(run_dir) if run_dir else None)
        if seen is not None:
            renewed.counted_cpu = seen.counted_cpu  # an exec keeps the process's CPU times: counted already
        self._seen[key] = renewed
        return renewed

    @staticmethod
    def _cpu_increase(proc: psutil.Process, seen: _Seen) -> float:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return 0.0
        total = float(times.user + times.system)
        increase = max(0.0, total - seen.counted_cpu)
        seen.counted_cpu = max(seen.counted_cpu, total)
        return increase


def _descendants(root: int, parent_of: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _recorded(run_id: str, state_dir: str, cache: dict[str, bool]) -> bool:
    if run_id not in cache:
        cache[run_id] = bool(state_dir) and (Path(state_dir) / "runs" / f"{run_id}.json").exists()
    return cache[run_id]


def _maps_show_tensorflow(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return loads_tensorflow(maps.read())
    except OSError:
        return False


class Profile:
    """The plugin object of one process: the figures of the tests it runs, written at the session's end.
    The sampler starts with the first test, so pytest-xdist's controller (which runs none) writes nothing."""

    def __init__(self, directory: Path, worker: str) -> None:
        self.directory = directory
        self.worker = worker
        self.sampler = Sampler()
        self.started = False
        self.tests: list[dict[str, object]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if not self.started:
            self.sampler.start()
            self.started = True
        figures, sampler_before = self.sampler.begin_test()
        before, wall_before = os.times(), time.monotonic()
        try:
            return (yield)
        finally:
            after, wall = os.times(), time.monotonic() - wall_before
            sampler_cpu = self.sampler.end_test() - sampler_before
            worker = max(0.0, after.user + after.system - before.user - before.system - sampler_cpu)
            children = (after.children_user + after.children_system
                        - before.children_user - before.children_system)
            self.tests.append({
                "nodeid": item.nodeid, "wall_s": round(wall, 3),
                "cpu_s": round(worker + children + figures.runs_cpu, 3), "tf_processes": figures.tf_processes,
                "cpu_parts_s": {"worker": round(worker, 3), "children": round(children, 3),
                                "runs": round(figures.runs_cpu, 3)},
            })

    def pytest_sessionfinish(self) -> None:
        if not self.started:
            return
        self.sampler.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        target = profile_file(self.directory, self.worker)
        partial = target.with_name(target.name + ".tmp")
        partial.write_text(json.dumps(self.tests, indent=1) + "\n", encoding="utf-8")
        partial.replace(target)  # a reader never sees half a file


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(PROFILE_DIR_ENV)
    if not directory:
        raise pytest.UsageError(f"-p tests.helpers.profile needs {PROFILE_DIR_ENV}=<directory> to write to")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    config.pluginmanager.register(Profile(Path(directory), worker), "tfcluster-profile")
