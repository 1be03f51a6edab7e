"""An in-memory scripted Transport: tfcluster's commands answered by `ScriptedHost`s, no process, no network.

A fake for what cannot be real in a unit test or on one machine: hundreds of hosts, a network with
20 ms round trips, a connection lost at an exact step. It implements orchestrator.transport.base's
Transport protocol; `ScriptedCluster.opener` is an `Opener` that `start`, `stop`, `status`, `check`
and the collector take in place of the real one:

    cluster = ScriptedCluster(rtt=0.02, connect_rtts=4, cost={"launch": 0.05})
    cluster.host("m1").fail("launch", "lost", after=True)   # the launch ran; its answer never arrives
    result = launch.start(plan, "hosts.toml", opener=cluster.opener)
    cluster.host("m1").supervisors_started                  # 1: the retried launch found the first one

It recognises a command by what the real host would run (training/launcher.py's start conversation,
the read of a run and the stop (orchestrator/run/read_host.py's and sh_stop.py's sh scripts), the agent,
`tail`, `kill`, check's probe) and answers with what the real programs print
(testkit/scripted_session.py holds the start conversation). Latency: a
connection costs `connect_rtts` round trips, a command or an exchange with a running command one, plus
the step's fixed remote `cost` in seconds (time.sleep: no CPU of the orchestrator's).
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from orchestrator.errors import HostError, Reason
from orchestrator.plan.model import ClusterPlan, HostPlan
from orchestrator.run.sh_procs import SIGNAL_MARK
from orchestrator.transport.base import CommandResult, ShellTransport, shell_command
from testkit.scripted_host import Fault, ScriptedHost, Step
from testkit.scripted_session import ScriptedSession, is_start_command
from training.run.layout import host_module
from training.telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, KIND_TASK_STATE, dumps, make_event

READ_MARK = "@@tfc now"  # in orchestrator/run/read_host.py's script only
STOP_MARK = 'echo "TERMINATED $p"'  # in orchestrator/run/sh_stop.py's script only


class ScriptedCluster:
    """The scripted hosts by name (created on first use) and the network between them and us."""

    def __init__(self, *, rtt: float = 0.0, connect_rtts: int = 1, cost: Mapping[str, float] | None = None,
                 agent_interval: float | None = None, agent_batches: int | None = None,
                 journal: str | None = None, plan: ClusterPlan | None = None) -> None:
        self.rtt = rtt
        self.connect_rtts = connect_rtts
        self.cost = dict(cost or {})
        self.agent_interval = agent_interval  # None: the interval the agent was asked for
        self.agent_batches = agent_batches  # None: the agent streams until closed
        self.journal = journal  # every step of every host appended here (shared by worker processes)
        self.hosts: dict[str, ScriptedHost] = {}
        self._lock = threading.Lock()
        # With the plan, hosts know their tasks without parsing every run.json (at 1024 hosts a host's
        # file is ~1 MB: the real host's work, which the simulated one should not charge to our CPU).
        self._tasks: dict[str, list[tuple[str, int]]] | None = None
        if plan is not None:
            self._tasks = {}
            for t in plan.tasks:
                self._tasks.setdefault(t.host, []).append((t.job, t.index))

    def host(self, name: str) -> ScriptedHost:
        with self._lock:
            if name not in self.hosts:
                self.hosts[name] = ScriptedHost(name, journal=self.journal)
                if self._tasks is not None:
                    self.hosts[name].known_tasks = self._tasks.get(name, [])
            return self.hosts[name]

    def opener(self, host: HostPlan) -> ScriptedTransport:
        return ScriptedTransport(self, self.host(host.name))

    def delay(self, step: str, rtts: int = 1) -> float:
        return rtts * self.rtt + self.cost.get(step, 0.0)

    def wait(self, step: str, rtts: int = 1) -> None:
        delay = self.delay(step, rtts)
        if delay > 0:
            time.sleep(delay)  # the step's scripted cost: simulated network and host time


def script_args(command: str) -> list[str]:
    """The values a script of orchestrator/run sets on its first line (`set -- 'a' 'b' ...`)."""
    return shlex.split(command.split("\n", 1)[0])[2:]


def classify(command: str) -> Step | None:
    """Which step a shell command is, by what it runs on the host."""
    if READ_MARK in command:
        return "read"
    if STOP_MARK in command:
        return "stop"
    if command.startswith("tail "):
        return "tail"
    if SIGNAL_MARK in command:
        return "kill"
    return None


def fault_error(host: str, fault: Fault, what: str) -> HostError:
    reasons: dict[str, Reason] = {"refused": "refused", "timeout": "timeout"}
    return HostError(host, reasons.get(fault.kind, "lost"), f"scripted {fault.kind} {what}")


class ScriptedTransport(ShellTransport):
    """One connection to one scripted host; reconnects on the next command after a lost one."""

    def __init__(self, cluster: ScriptedCluster, host: ScriptedHost) -> None:
        self.cluster = cluster
        self.scripted = host
        self.host = host.name
        self.connected = False
        self.warnings: list[str] = []

    # --- connection --------------------------------------------------------------------------------
    def connect(self) -> None:
        if self.connected:
            return
        self.cluster.wait("connect", self.cluster.connect_rtts)
        if self.scripted.down:
            raise HostError(self.host, "refused", "scripted: connection refused (is sshd running?)")
        fault = self.scripted.take_fault("connect")
        if fault is not None:
            raise fault_error(self.host, fault, "connecting")
        with self.scripted.lock:
            self.scripted.connects += 1
        self.connected = True

    def close(self) -> None:
        self.connected = False

    def lost(self, fault: Fault, what: str) -> HostError:
        self.connected = False
        return fault_error(self.host, fault, what)

    # --- commands ----------------------------------------------------------------------------------
    def _counted(self) -> None:
        with self.scripted.lock:
            self.scripted.commands += 1

    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        self.connect()
        self._counted()
        step = classify(command)
        self.cluster.wait(step or "command")
        if step is None:
            return self._result(command, 127, "", f"scripted host: unknown command: {command[:80]}")
        fault = self.scripted.take_fault(step)
        if fault is not None:
            if fault.kind == "exit":
                return self._result(command, fault.exit_code, "", fault.stderr)
            raise self.lost(fault, f"before {step}")
        self.scripted.record(step)
        code, out, err = self._answer(step, command)
        fault = self.scripted.take_fault(step, before=False)
        if fault is not None:
            raise self.lost(fault, f"after {step} ran")
        return self._result(command, code, out, err)

    def _result(self, command: str, code: int, out: str, err: str) -> CommandResult:
        return CommandResult(self.host, command, code, out, err, 0.0)

    def _answer(self, step: Step, command: str) -> tuple[int, str, str]:
        h = self.scripted
        if step == "read":
            return 0, h.read(script_args(command)[0]), ""
        if step == "stop":
            _mark, root, _grace, purge = script_args(command)
            return 0, h.stop(root, purge == "1"), ""
        if step == "tail":
            argv = shlex.split(command)
            headers = "/dev/null" in argv
            out, err = h.tail(argv[argv.index("/dev/null") + 1:] if headers else argv[-1:], headers)
            return (1 if err else 0), out, err
        if step == "kill":
            mark, pid, sig = script_args(command)
            ok = h.signal_pid(mark.partition("=")[2], int(pid), sig)
            return (0, "", "") if ok else (1, "", f"pid {pid}: {SIGNAL_MARK}")
        return 127, "", f"unhandled step {step}"

    def open_session(self, command: str) -> ScriptedSession:
        self.connect()
        if not is_start_command(command):
            raise AssertionError(f"scripted host: unknown conversation: {command[:120]}")
        self._counted()
        self.cluster.wait("session")
        return ScriptedSession(self, command)

    # --- streams -----------------------------------------------------------------------------------
    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ScriptedStream:
        self.connect()
        self._counted()
        self.cluster.wait("stream")
        command = shell_command(argv, env=env, cwd=cwd)
        source: Callable[[ScriptedStream], Iterator[str]]
        if host_module("agent") in argv:
            step: Step = "agent"
            source = partial(self._agent, argv=list(argv))
        elif "tfcluster-probe" in command:
            step = "check"
            source = partial(self._check, argv=list(argv))
        else:
            return ScriptedStream(None, exit_code=127, stderr=f"unknown stream: {command[:80]}")
        fault = self.scripted.take_fault(step)
        if fault is not None:
            if fault.kind == "exit":
                return ScriptedStream(None, exit_code=fault.exit_code, stderr=fault.stderr)
            raise self.lost(fault, f"before {step}")
        self.scripted.record(step)
        return ScriptedStream(source)

    def _check(self, stream: ScriptedStream, argv: list[str]) -> Iterator[str]:
        args = json.loads(argv[-1])
        self.cluster.wait("check", 0)
        yield f"{time.time():.6f}"
        yield json.dumps(self.scripted.check_report([int(port) for port, _address in args["ports"]], args["workdir"]))

    def _agent(self, stream: ScriptedStream, argv: list[str]) -> Iterator[str]:
        h = self.scripted
        root, interval = argv[argv.index("--run-dir") + 1], float(argv[argv.index("--interval") + 1])
        pause = self.cluster.agent_interval if self.cluster.agent_interval is not None else interval
        with h.lock:
            run = h.runs.get(root)
            states = [] if run is None else [h.task_state(t) for t in run.tasks.values()]
        yield dumps(make_event(KIND_HEARTBEAT, h.name, interval_s=interval))
        for s in states:
            yield dumps(make_event(KIND_TASK_STATE, h.name, job=s["job"], task=s["task"], state=s["state"],
                                   pid=s["pid"], exit_code=s["exit_code"], restarts=s["restarts"]))
        batches = 0
        while not stream.closed and (self.cluster.agent_batches is None or batches < self.cluster.agent_batches):
            time.sleep(pause)  # the scripted agent's interval between batches
            if stream.closed:
                return
            fault = h.take_fault("agent", before=False)
            if fault is not None:
                raise self.lost(fault, "while streaming")
            yield dumps(make_event(KIND_HOST_SAMPLE, h.name, cpu_pct=12.5, mem_pct=40.0))
            yield dumps(make_event(KIND_HEARTBEAT, h.name, interval_s=interval))
            batches += 1


class ScriptedStream:
    """A LineStream over a generator of the host's lines."""

    def __init__(self, source: Callable[[ScriptedStream], Iterator[str]] | None, *, exit_code: int = 0,
                 stderr: str = "") -> None:
        self._source = source
        self._final_code = exit_code
        self._exit_code: int | None = None if source is not None else exit_code
        self.stderr_tail = stderr
        self.closed = False

    def lines(self) -> Iterator[str]:
        if self._source is None:
            return
        try:
            yield from self._source(self)
        except HostError:
            self._exit_code = -1
            raise
        self._exit_code = self._final_code if not self.closed else -1

    def close(self) -> None:
        self.closed = True
        if self._exit_code is None:
            self._exit_code = -1

    @property
    def exit_code(self) -> int | None:
        return self._exit_code
