"""The collector: one agent stream per host (Transport.stream), typed events into a queue, ClusterState out.

Each host has a thread that runs `python -m training.agent` in the run's code dir; one StreamPump
thread (pump.py) reads and parses every SSH stream's lines, the host's thread waiting meanwhile (other
transports' streams are read by the host's thread itself).
The hosts are the run's as its local record says, followed through resizes (reshape.py): a host that
joins gets a stream as one at start does; a host that leaves has its stream retired (nothing more of it
reaches the state) and its rows go.
When the stream ends or cannot be opened, a `StreamDown` is queued (the state marks the host
unreachable after 3 intervals, keeping its last values) and the thread reconnects with backoff. A
stream that goes silent without closing (a dead network path) is closed by the watchdog in `poll`.
`poll()` runs on the caller's thread (the UI's): it drains the queue into the state and ticks it.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Callable

from orchestrator.errors import HostError, TfclusterError
from orchestrator.monitor.events import Event, EventParser, HeartbeatEvent, StreamDown, StreamUp
from orchestrator.monitor.pump import StreamPump
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.reshape import RecordWatch, Reshape, where
from orchestrator.monitor.resize_notes import say_resizes
from orchestrator.plan.model import HostPlan
from orchestrator.plan.names import task_name
from orchestrator.run.records import RunRecord
from orchestrator.run.sh_procs import signal_script
from orchestrator.transport.base import CommandResult, LineStream, Transport
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.ssh_channel import SSHLineStream
from training.run.layout import RunLayout, host_module
from training.telemetry.state_files import HoldReport
from training.telemetry.wire import StateFileError

BACKOFF_MAX_S = 30.0
SILENT_INTERVALS = 5  # no line at all for this long: the stream is treated as dead and reopened
PUMPED_WAIT_S = 30.0  # a pumped stream's thread checks this often that its pump still runs (a safety net)


def agent_argv(python: str, run_dir: str, host: str, interval: float) -> list[str]:
    return [python, "-m", host_module("agent"), "--run-dir", run_dir, "--host", host, "--interval", f"{interval:g}"]


class HostStream(threading.Thread):
    """Keeps one host's agent stream open for as long as the collector runs."""

    def __init__(self, host: HostPlan, run_dir: str, python: str, interval: float,
                 out: queue.SimpleQueue[tuple[float, Event]], opener: Opener, stop: threading.Event,
                 pump: StreamPump) -> None:
        super().__init__(name=f"agent-{host.name}", daemon=True)
        self.host = host
        self.run_dir = run_dir
        self.python = python
        self.interval = interval
        self.out = out
        self.opener = opener
        self.stop_event = stop
        self.pump = pump
        self.parser = EventParser()
        self.last_line = time.monotonic()
        self.connected = False
        self.heartbeats = 0  # since the collector started (for --once: enough data seen)
        self.connects = 0
        self.retired = False  # its host left the run (a resize): it ends, and queues nothing more
        self._stream: LineStream | None = None
        self._transport: Transport | None = None
        self._lock = threading.Lock()
        self._put_lock = threading.Lock()  # (not _lock: that one is held while connecting)

    def _put(self, ev: Event) -> None:
        with self._put_lock:  # the lock retire() takes: once it returned, nothing more is queued
            if not self.retired:
                self.out.put((time.time(), ev))

    def _halted(self) -> bool:
        return self.retired or self.stop_event.is_set()

    def retire(self) -> None:
        """Its host left the run: nothing more of it reaches the state; its stream closes (off this thread:
        closing may block on SSH) and the thread ends instead of reconnecting."""
        with self._put_lock:
            self.retired = True
        threading.Thread(target=self.close_stream, daemon=True).start()

    def run(self) -> None:
        backoff = 1.0
        while not self._halted():
            started = time.monotonic()
            reason = self._one_stream()
            self._put(StreamDown(time.time(), self.host.name, reason))
            self._close()
            if self._halted():
                break
            if time.monotonic() - started > 10 * self.interval:
                backoff = 1.0  # it had been working: retry soon
            self.stop_event.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _one_stream(self) -> str:
        argv = agent_argv(self.python, self.run_dir, self.host.name, self.interval)
        try:
            with self._lock:
                if self._transport is None:
                    self._transport = self.opener(self.host)
                transport = self._transport
            stream = transport.stream(argv, cwd=RunLayout(self.run_dir).lib)
            with self._lock:
                self._stream = stream
            if self._halted():
                return "stopped"
            self.connected = True
            self.connects += 1
            self.last_line = time.monotonic()
            self._put(StreamUp(time.time(), self.host.name))
            if isinstance(stream, SSHLineStream):
                failed = self._pumped(stream)
                if failed is not None:
                    return failed
            else:
                for line in stream.lines():
                    self._take([line])
                    if self._halted():
                        return "stopped"
            tail = getattr(stream, "stderr_tail", "").strip().splitlines()
            why = f": {tail[-1][:200]}" if tail else ""
            return f"agent stream ended (exit {stream.exit_code}){why}"
        except TfclusterError as exc:
            return exc.one_line()
        except Exception as exc:  # a broken host must never take the collector down
            return f"{type(exc).__name__}: {exc}"
        finally:
            self.connected = False

    def _pumped(self, stream: SSHLineStream) -> str | None:
        """Wait while the pump reads the stream: None when it ended cleanly, else why it failed."""
        done = threading.Event()
        why: list[str | None] = []

        def ended(reason: str | None) -> None:
            why.append(reason)
            done.set()

        self.pump.add(stream, self._take, ended)
        while not done.wait(PUMPED_WAIT_S):
            if not self.pump.is_alive():
                return "stopped"
        return "stopped" if self._halted() else why[0]

    def _take(self, lines: list[str]) -> None:
        """Parse and queue lines (on the pump's thread, or this one's)."""
        self.last_line = time.monotonic()
        for line in lines:
            ev = self.parser.parse(line)
            if ev is not None:
                if isinstance(ev, HeartbeatEvent):
                    self.heartbeats += 1
                self._put(ev)

    def close_stream(self) -> None:
        """Close the current stream (from any thread); the run loop then reconnects."""
        with self._lock:
            stream = self._stream
            self._stream = None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _close(self) -> None:
        self.close_stream()
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()


class Collector:
    """A StateSource over live agent streams. `start()` opens them; `close()` ends every thread. With a
    `watch` on the run's record, it follows the run's resizes (reshape.py)."""

    def __init__(self, state: ClusterState, hosts: list[HostPlan], run_dirs: dict[str, str],
                 pythons: dict[str, str], interval: float = 1.0, opener: Opener | None = None,
                 clock: Callable[[], float] = time.time, watch: RecordWatch | None = None) -> None:
        if opener is None:
            opener = transport_for
        self.state = state
        self.interval = interval
        self.clock = clock
        self.opener = opener
        self.hosts = {h.name: h for h in hosts}
        self.run_dirs = run_dirs
        self.pythons = {h.name: pythons.get(h.name, h.python) for h in hosts}
        self._queue: queue.SimpleQueue[tuple[float, Event]] = queue.SimpleQueue()
        self._stop = threading.Event()
        # Lines are applied once per interval: read twice per interval, not once per packet.
        self._pump = StreamPump(interval / 2, self._stop)
        self.streams = [HostStream(h, run_dirs[h.name], self.pythons[h.name], interval, self._queue,
                                   opener, self._stop, self._pump) for h in hosts]
        self._aux: dict[str, Transport] = {}  # for logs and actions, separate from the streams
        self._aux_lock = threading.Lock()
        self.watch = watch
        self._started = False

    @classmethod
    def for_record(cls, record: RunRecord, interval: float = 1.0, opener: Opener | None = None) -> Collector:
        """From a run record: its plan, hosts and the run dirs resolved on each host at start."""
        hosts = list(record.plan.hosts)
        placed = {h.name: where(record, h) for h in hosts}
        state = ClusterState.from_plan(record.plan, record.run_id, interval)
        state.record_status = record.status
        say_resizes(state, record)
        return cls(state, hosts, {n: d for n, (d, _) in placed.items()}, {n: p for n, (_, p) in placed.items()},
                   interval, opener, watch=RecordWatch(record))

    def start(self) -> Collector:
        self._started = True
        self._pump.start()
        for s in self.streams:
            s.start()
        return self

    def poll(self) -> ClusterState:
        st = self.state
        change = self.watch.changed() if self.watch is not None else None
        if change is not None:  # before the drain: nothing of a host that left is applied after it
            for s in self.streams:
                if s.host.name in change.hosts_removed:
                    s.retire()
        try:
            while True:
                arrival, ev = self._queue.get_nowait()
                st.apply(ev, arrival)
        except queue.Empty:
            pass
        if change is not None:
            self._reshape(change)
        st.malformed = sum(s.parser.malformed for s in self.streams)
        silent = SILENT_INTERVALS * self.interval
        now_m = time.monotonic()
        for s in self.streams:
            if s.connected and now_m - s.last_line > silent:
                s.last_line = now_m
                threading.Thread(target=s.close_stream, daemon=True).start()  # closing may block on SSH
        st.tick(self.clock())
        return st

    def _reshape(self, change: Reshape) -> None:
        """The run's new shape: the state made the new plan's, streams for the hosts that joined."""
        change.apply(self.state)
        gone = set(change.hosts_removed)
        self.streams = [s for s in self.streams if s.host.name not in gone]
        for name in gone:
            for table in (self.hosts, self.run_dirs, self.pythons):
                table.pop(name, None)
            with self._aux_lock:
                aux = self._aux.pop(name, None)
            if aux is not None:
                threading.Thread(target=aux.close, daemon=True).start()
        for h in change.hosts_added:
            self.hosts[h.name] = h
            self.run_dirs[h.name], self.pythons[h.name] = where(change.record, h)
            s = HostStream(h, self.run_dirs[h.name], self.pythons[h.name], self.interval, self._queue,
                           self.opener, self._stop, self._pump)
            self.streams.append(s)
            if self._started:
                s.start()

    def wait_for_data(self, heartbeats: int = 3, timeout: float = 30.0) -> ClusterState:
        """Poll until every host sent `heartbeats` heartbeats, or the timeout: what `--once` shows."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.heartbeats >= heartbeats for s in self.streams):
                break
            time.sleep(min(0.1, self.interval))
            self.poll()
        return self.poll()

    # -- logs and actions, over their own connection ---------------------------------------------------

    def _aux_transport(self, host: str) -> Transport:
        with self._aux_lock:
            t = self._aux.get(host)
            if t is None:
                t = self._aux[host] = self.opener(self.hosts[host])
            return t

    def _aux_run(self, host: str, command: list[str] | str, timeout: float = 10.0,
                 cwd: str | None = None) -> CommandResult:
        """An argv, or a shell script (a str), on the host's connection for logs and actions."""
        try:
            transport = self._aux_transport(host)
            if isinstance(command, str):
                return transport.run_shell(command, timeout=timeout)
            return transport.run(command, timeout=timeout, cwd=cwd)
        except HostError:
            with self._aux_lock:
                t = self._aux.pop(host, None)
            if t is not None:
                with contextlib.suppress(Exception):
                    t.close()
            raise

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]:
        tv = self.state.tasks.get(task_name(job, task))
        if tv is None or tv.host not in self.run_dirs:
            return []
        path = RunLayout(self.run_dirs[tv.host]).log_file(job, task)
        res = self._aux_run(tv.host, ["tail", "-n", str(int(lines)), path])
        if not res.ok:
            return [f"(cannot read {path}: {res.stderr.strip()[:200]})"]
        return str(res.stdout).splitlines()

    def signal_task(self, job: str, task: int, sig: str) -> str:
        tv = self.state.tasks.get(task_name(job, task))
        if tv is None:
            return f"{task_name(job, task)}: no such task"
        if tv.pid is None or tv.state in ("exited", "unreachable"):
            return f"{tv.name}: no running process to signal ({tv.state})"
        if tv.host not in self.run_dirs:
            return f"{tv.name}: no such host {tv.host}"
        res = self._aux_run(tv.host, signal_script(self.run_dirs[tv.host], tv.pid, sig))
        if not res.ok:
            return f"{tv.name}: kill -{sig} {tv.pid} failed: {res.stderr.strip()[:200]}"
        return f"{tv.name} (pid {tv.pid} on {tv.host}): sent SIG{sig}"

    def stop_task(self, job: str, task: int) -> str:
        """Stop for good: one command on the task's host writes its hold file, then SIGTERMs every process
        of the task (training/supervisor/hold.py); its supervisor never starts it again."""
        tv = self.state.tasks.get(task_name(job, task))
        if tv is None or tv.host not in self.run_dirs:
            return f"{task_name(job, task)}: no such task"
        if tv.state in ("exited", "unreachable"):
            return f"{tv.name}: nothing to stop ({tv.state})"
        run_dir = self.run_dirs[tv.host]
        argv = [self.pythons[tv.host], "-S", "-m", host_module("supervisor.hold"), "--run-dir", run_dir,
                "--job", job, "--task", str(int(task))]
        res = self._aux_run(tv.host, argv, cwd=RunLayout(run_dir).lib)
        if not res.ok:
            return f"{tv.name}: stop for good failed: {(res.stderr.strip().splitlines() or ['?'])[-1][:200]}"
        try:
            report = HoldReport.decode(json.loads(res.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError, StateFileError) as exc:
            return f"{tv.name}: held, but its host's answer is unreadable ({exc})"
        if not report.terminated:
            return f"{tv.name} on {tv.host}: held (no process of it was running); it will not be started again"
        pids = ", ".join(str(p) for p in report.terminated)
        return f"{tv.name} on {tv.host}: stopped for good (held; SIGTERM to pid {pids})"

    def close(self) -> None:
        self._stop.set()
        for s in self.streams:
            threading.Thread(target=s.close_stream, daemon=True).start()
        for s in self.streams:
            if s.ident is not None:  # a Ctrl-C can land inside start(), before every thread began
                s.join(timeout=5)
        with self._aux_lock:
            aux, self._aux = self._aux, {}
        for t in aux.values():
            with contextlib.suppress(Exception):
                t.close()


class CollectorActions:
    """TaskActions through the collector: the host's supervisor restarts a task that died by signal.

    restart = SIGTERM (the task exits; the supervisor starts it again by its restart policy);
    kill = SIGKILL (the same, without a chance to clean up);
    stop = stop for good (the hold file, then SIGTERM: the supervisor never starts it again)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def restart_task(self, job: str, task: int) -> str:
        return self.collector.signal_task(job, task, "TERM")

    def kill_task(self, job: str, task: int) -> str:
        return self.collector.signal_task(job, task, "KILL")

    def stop_task(self, job: str, task: int) -> str:
        return self.collector.stop_task(job, task)
