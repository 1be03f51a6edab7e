"""An in-memory scripted Transport: tfcluster's commands answered by `ScriptedHost`s, no process, no network.

A fake for what cannot be real in a unit test or on one machine: hundreds of hosts, a network with
20 ms round trips, a connection lost at an exact step. It implements orchestrator.transport.base's
Transport protocol; `ScriptedCluster.opener` is an `Opener` that `start`, `stop`, `status`, `check`
and the collector take in place of the real one:

    cluster = ScriptedCluster(rtt=0.02, connect_rtts=4, cost={"launch": 0.05})
    cluster.host("m1").fail("launch", "lost", after=True)   # the launch ran; its answer never arrives
    result = launch.start(plan, "hosts.toml", opener=cluster.opener)
    cluster.host("m1").supervisors_started                  # 1: the retried launch found the first one

It recognises a command by what the real host would run (`training.supervisor --detach`, `--probe`,
`--stop`, `rm -rf`, the agent, `tail`, `kill`, check's probe) and answers with the same output the real
programs print. Latency: every connection costs `connect_rtts` round trips and every command one, plus
the step's fixed remote `cost` (seconds; time.sleep, so it costs the orchestrator no CPU).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from orchestrator.errors import HostError, Reason
from orchestrator.plan.model import HostPlan
from orchestrator.transport.base import CommandResult, ShellTransport, shell_command
from testkit.scripted_host import Fault, ScriptedHost, Step
from training.telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, KIND_TASK_STATE, dumps, make_event

WARM_MARK = "TFCLUSTER-CODE-TREE-READY"  # orchestrator.run.launch's answer for a host that has the tree
_RUN_DIR = re.compile(r"--run-dir ('[^']*'|[^\s;]+)")
_HASH = re.compile(r"cache/([0-9a-f]{64})\b")
_STATE_GLOB = re.compile(r"for f in (\S+?)/\*\.json")
_TREE = re.compile(r"cache/trees/([0-9a-f]{32})\b")


class ScriptedCluster:
    """The scripted hosts by name (created on first use) and the network between them and us."""

    def __init__(self, *, rtt: float = 0.0, connect_rtts: int = 1, cost: Mapping[str, float] | None = None,
                 agent_interval: float | None = None, agent_batches: int | None = None) -> None:
        self.rtt = rtt
        self.connect_rtts = connect_rtts
        self.cost = dict(cost or {})
        self.agent_interval = agent_interval  # None: the interval the agent was asked for
        self.agent_batches = agent_batches  # None: the agent streams until closed
        self.hosts: dict[str, ScriptedHost] = {}
        self._lock = threading.Lock()

    def host(self, name: str) -> ScriptedHost:
        with self._lock:
            if name not in self.hosts:
                self.hosts[name] = ScriptedHost(name)
            return self.hosts[name]

    def opener(self, host: HostPlan) -> ScriptedTransport:
        return ScriptedTransport(self, self.host(host.name))

    def wait(self, step: str, rtts: int = 1) -> None:
        delay = rtts * self.rtt + self.cost.get(step, 0.0)
        if delay > 0:
            time.sleep(delay)


def _token(command: str, pattern: re.Pattern[str]) -> str | None:
    match = pattern.search(command)
    return shlex.split(match.group(1))[0] if match else None


def classify(command: str) -> Step | None:
    """Which step a shell command is, by what it runs on the host."""
    if "training.supervisor" in command:
        for flag, step in (("--detach", "launch"), ("--probe", "probe"), ("--stop", "stop")):
            if flag in command:
                return step  # type: ignore[return-value]
    if WARM_MARK in command:
        return "prepare"
    if "cache/trees/" in command or "tar -xf" in command:
        return "ship"
    if "/state/*.json" in command:
        return "states"
    if command.startswith("rm -rf"):
        return "purge"
    if command.startswith("tail "):
        return "tail"
    if command.startswith("kill "):
        return "kill"
    return None


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
            raise self._error(fault, "connecting")
        with self.scripted.lock:
            self.scripted.connects += 1
        self.connected = True

    def close(self) -> None:
        self.connected = False

    def _error(self, fault: Fault, what: str) -> HostError:
        self.connected = False
        reasons: dict[str, Reason] = {"refused": "refused", "timeout": "timeout"}
        return HostError(self.host, reasons.get(fault.kind, "lost"), f"scripted {fault.kind} {what}")

    def _fault(self, step: Step, before: bool) -> Fault | None:
        """The armed fault of this step that fires now (before the step runs, or after it ran)."""
        with self.scripted.lock:
            for fault in self.scripted.faults:
                fires_before = fault.kind == "exit" or not fault.after
                if fault.step == step and fault.times > 0 and fires_before == before:
                    fault.times -= 1
                    return fault
        return None

    # --- commands ----------------------------------------------------------------------------------
    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        self.connect()
        step = classify(command)
        self.cluster.wait(step or "command")
        if step is None:
            return self._result(command, 127, "", f"scripted host: unknown command: {command[:80]}")
        fault = self._fault(step, before=True)
        if fault is not None:
            if fault.kind == "exit":
                return self._result(command, fault.exit_code, "", fault.stderr)
            raise self._error(fault, f"before {step}")
        with self.scripted.lock:
            self.scripted.steps.append(step)
        code, out, err = self._answer(step, command, stdin or b"")
        fault = self._fault(step, before=False)
        if fault is not None:
            raise self._error(fault, f"after {step} ran")
        return self._result(command, code, out, err)

    def _result(self, command: str, code: int, out: str, err: str) -> CommandResult:
        return CommandResult(self.host, command, code, out, err, 0.0)

    def _answer(self, step: Step, command: str, stdin: bytes) -> tuple[int, str, str]:
        h = self.scripted
        root = _token(command, _RUN_DIR)
        if step == "prepare":
            return self._prepare(command, stdin)
        if step == "ship":
            return self._ship(command, stdin)
        if step == "launch":
            assert root is not None
            try:
                run = h.launch(root)
            except FileNotFoundError as exc:
                return 1, "", str(exc)
            lines = [f"PID {run.supervisor_pid}", *h.state_lines(run), *(["ALIVE"] if run.supervisor_alive else [])]
            return 0, "\n".join(lines) + "\n", ""
        if step == "states":
            state_dir = _token(command, _STATE_GLOB)
            polled = h.runs.get((state_dir or "").rsplit("/state", 1)[0])
            if polled is None:
                return 0, "", ""
            return 0, "\n".join([*h.state_lines(polled), *(["ALIVE"] if polled.supervisor_alive else [])]) + "\n", ""
        if step in ("probe", "stop"):
            assert root is not None
            return 0, json.dumps(h.probe(root) if step == "probe" else h.stop(root)) + "\n", ""
        if step == "purge":
            h.purge(shlex.split(command)[-1])
            return 0, "", ""
        if step == "tail":
            log = h.log_lines(shlex.split(command)[-1])
            if log is None:
                return 1, "", "tail: cannot open: No such file or directory"
            return 0, "".join(line + "\n" for line in log), ""
        if step == "kill":
            _, _, sig, pid = shlex.split(command)[:4]
            ok = h.signal_pid(int(pid), sig)
            return (0, "", "") if ok else (1, "", f"kill: ({pid}) - No such process")
        return 127, "", f"unhandled step {step}"

    def _prepare(self, command: str, stdin: bytes) -> tuple[int, str, str]:
        h = self.scripted
        workdir = h.path(shlex.split(command)[2])
        run_rel = re.search(r"(runs/[^/' ]+)/code", command)
        tree = _TREE.search(command)
        assert run_rel is not None, command
        assert tree is not None, command
        root = f"{workdir}/{run_rel.group(1)}"
        h.make_run_dir(root)
        if h.place_code(root, tree.group(1)):
            h.write_run_file(root, stdin)
            return 0, f"{workdir}\n{WARM_MARK}\n", ""
        listing = [*sorted(h.cache), "trees"]
        return 0, "\n".join([workdir, *listing]) + "\n", ""

    def _ship(self, command: str, stdin: bytes) -> tuple[int, str, str]:
        h = self.scripted
        tree = _TREE.search(command)
        if tree is None:  # the archive's extraction: its files arrived with put_file
            return 0, "", ""
        h.build_tree(tree.group(1), _HASH.findall(command))
        code_dir = re.search(r"cp -alf \S+ ('[^']*'|\S+)/ ", command)
        assert code_dir is not None, command
        root = shlex.split(code_dir.group(1))[0].rsplit("/code", 1)[0]
        h.place_code(root, tree.group(1))
        if stdin:
            h.write_run_file(root, stdin)
        return 0, "", ""

    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        self.connect()
        self.cluster.wait("ship")
        with tarfile.open(local_path) as tar:
            self.scripted.receive_files([m.name for m in tar.getmembers()])

    # --- streams -----------------------------------------------------------------------------------
    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ScriptedStream:
        self.connect()
        self.cluster.wait("stream")
        command = shell_command(argv, env=env, cwd=cwd)
        source: Callable[[ScriptedStream], Iterator[str]]
        if "training.agent" in argv:
            step: Step = "agent"
            source = partial(self._agent, argv=list(argv))
        elif "tfcluster-probe" in command:
            step = "check"
            source = partial(self._check, argv=list(argv))
        else:
            return ScriptedStream(self, iter(()), exit_code=127, stderr=f"unknown stream: {command[:80]}")
        fault = self._fault(step, before=True)
        if fault is not None:
            if fault.kind == "exit":
                return ScriptedStream(self, iter(()), exit_code=fault.exit_code, stderr=fault.stderr)
            raise self._error(fault, f"before {step}")
        with self.scripted.lock:
            self.scripted.steps.append(step)
        return ScriptedStream(self, None, source=source, step=step)

    def _check(self, stream: ScriptedStream, argv: list[str]) -> Iterator[str]:
        args = json.loads(argv[-1])
        yield f"{time.time():.6f}"
        yield json.dumps(self.scripted.check_report(args["ports"], args["workdir"]))

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
            time.sleep(pause)
            if stream.closed:
                return
            if self._fault("agent", before=False) is not None:
                raise HostError(self.host, "lost", "scripted: connection lost while streaming")
            yield dumps(make_event(KIND_HOST_SAMPLE, h.name, cpu_pct=12.5, mem_pct=40.0))
            yield dumps(make_event(KIND_HEARTBEAT, h.name, interval_s=interval))
            batches += 1


class ScriptedStream:
    """A LineStream over a generator of the host's lines."""

    def __init__(self, transport: ScriptedTransport, lines: Iterator[str] | None, *,
                 source: Callable[[ScriptedStream], Iterator[str]] | None = None, step: Step | None = None,
                 exit_code: int = 0, stderr: str = "") -> None:
        self._transport = transport
        self._lines = lines if lines is not None else iter(())
        self._source = source
        self.step = step
        self._final_code = exit_code
        self._exit_code: int | None = None if source is not None else exit_code
        self.stderr_tail = stderr
        self.closed = False

    def lines(self) -> Iterator[str]:
        lines = self._source(self) if self._source is not None else self._lines
        try:
            yield from lines
        except HostError:
            self._exit_code = -1
            raise
        self._exit_code = self._final_code if not self.closed else -1

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            if self._exit_code is None:
                self._exit_code = -1

    @property
    def exit_code(self) -> int | None:
        return self._exit_code
