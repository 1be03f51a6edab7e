"""The start conversation of a scripted host (testkit/scripted_transport.py): what training/launcher.py
and the supervisor's `--detach` launcher say over the one command a host's start is, in memory.

Frames in (`head`, `run`, and after `@send`: `manifest`, after `@need`: one `blob` frame per file), then
maybe `run`/`env` frames and `go <s>` or `abort` (which removes the run dir the host made); lines out
(`@send`, `@need`, `@prepared <run dir>`, `PID <pid>`, state JSON lines, `ALIVE`), each ready one round trip plus
the step's remote cost after what it answers. Faults (ScriptedHost.fail) at "prepare", "ship" and
"launch": `exit` ends the command with that code and stderr instead of the step, `lost` breaks the
connection (with `after=True`: once the step ran), `timeout` leaves the host silent.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections import deque
from typing import Protocol

from orchestrator.errors import HostError
from testkit.scripted_host import Fault, ScriptedHost


class _Latency(Protocol):
    def delay(self, step: str, rtts: int = 1) -> float: ...


class SessionOwner(Protocol):
    """What a session needs of its transport (testkit/scripted_transport.py's ScriptedTransport), named
    here so that the transport imports the session and never the other way round."""

    host: str
    scripted: ScriptedHost
    cluster: _Latency
    connected: bool

LAUNCHER_MARK = "The per-host start program"  # the first words of training/launcher.py, sent as source
_START = re.compile(r"^umask 077\ncd (\S+) 2>/dev/null .*?/runs/(\S+)/(\S+) exec (\S+) -S -c ", re.S)
ABORTED = 3


def is_start_command(command: str) -> bool:
    return LAUNCHER_MARK in command and _START.search(command) is not None


class ScriptedSession:
    def __init__(self, transport: SessionOwner, command: str) -> None:
        match = _START.search(command)
        assert match is not None, command[:200]
        self._t = transport
        self.host = transport.host
        self._h = transport.scripted
        self._workdir = shlex.split(match.group(1))[0]
        self._run_id = shlex.split(match.group(2))[0]
        self._host_name = shlex.split(match.group(3))[0]
        self._in = bytearray()
        self._out: deque[tuple[float, str | None]] = deque()  # (ready at, line; None = end of output)
        self._last = time.monotonic()
        self._stage = "head"
        self._head: dict[str, object] = {}
        self._run_json = b""
        self._manifest: list[list[object]] = []
        self._need: list[str] = []
        self._root = ""
        self._lost_at: float | None = None
        self._ended = False
        self._exit_code: int | None = None
        self._stderr = ""
        self.closed = False

    # --- output ------------------------------------------------------------------------------------
    def _emit(self, line: str | None, step: str = "command") -> None:
        self._last = max(self._last, time.monotonic()) + self._t.cluster.delay(step)
        self._out.append((self._last, line))

    def _end(self, code: int, stderr: str = "", step: str = "command") -> None:
        self._exit_code, self._stderr = code, stderr
        self._emit(None, step)
        self._stage = "ended"

    def _fault(self, fault: Fault, step: str) -> None:
        if fault.kind == "exit":
            self._end(fault.exit_code, fault.stderr, step)
        elif fault.kind == "timeout":
            self._stage = "silent"
        else:
            self._lost_at = max(self._last, time.monotonic()) + self._t.cluster.delay(step)
            self._stage = "silent"

    # --- input -------------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if self.closed or (self._lost_at is not None and time.monotonic() >= self._lost_at):
            raise HostError(self.host, "lost", "scripted: the connection is gone")
        if self._stage == "ended":
            raise HostError(self.host, "lost", "scripted: the command has ended, its input is closed")
        self._in += data
        while self._step():
            pass

    def _frame(self) -> tuple[str, bytes] | None:
        newline = self._in.find(b"\n")
        if newline < 0:
            return None
        name, _, size = self._in[:newline].decode().partition(" ")
        end = newline + 1 + int(size)
        if len(self._in) < end:
            return None
        data = bytes(self._in[newline + 1 : end])
        del self._in[:end]
        return name, data

    def _step(self) -> bool:
        """Take the next complete piece of input for the current stage; False when there is none."""
        if self._stage == "barrier":
            newline = self._in.find(b"\n")
            if newline < 0:
                return False
            word = bytes(self._in[:newline]).decode().split(" ")[0]
            if word in ("run", "env"):  # frames before `go` (re-planned run.json, forwarded variables)
                got = self._frame()
                if got is None:
                    return False
                if word == "run":
                    self._h.write_run_file(self._root, got[1])
                else:
                    self._h.forwarded_env = json.loads(got[1])
                return True
            del self._in[: newline + 1]
            if word == "go":
                self._launch()
            else:
                self._h.remove_unlaunched(self._root)
                self._end(ABORTED)
            return True
        if self._stage == "blobs":
            return self._blob()
        if self._stage not in ("head", "run", "manifest"):
            return False
        got = self._frame()
        if got is None:
            return False
        name, data = got
        assert name == self._stage, f"scripted host: expected {self._stage}, got {name}"
        if name == "head":
            self._head, self._stage = json.loads(data), "run"
        elif name == "run":
            self._run_json = data
            self._prepare()
        else:
            manifest = json.loads(data)
            self._manifest = [*manifest["tree"], *manifest["package"]]
            self._need = sorted({str(f[1]) for f in self._manifest} - self._h.cache)
            self._emit("@need " + " ".join(self._need), "prepare")
            self._stage = "blobs"
            if not self._need:
                self._receive()
        return True

    def _blob(self) -> bool:
        """One `blob <sha> <mode> <size>` frame, its bytes and its `ok` line, once all of it is here."""
        newline = self._in.find(b"\n")
        if newline < 0:
            return False
        _blob, sha, _mode, size = self._in[:newline].decode().split()
        end = newline + 1 + int(size)
        trailer = self._in.find(b"\n", end)
        if trailer < 0:
            return False
        assert bytes(self._in[end:trailer]) == b"ok", "scripted host: a blob without its `ok`"
        del self._in[: trailer + 1]
        self._h.receive_files([sha])
        self._need.remove(sha)
        if not self._need:
            self._receive()
        return True

    # --- the host's side ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        h = self._h
        fault = h.take_fault("prepare")
        if fault is not None:
            self._fault(fault, "prepare")
            return
        self._root, placed = h.prepare(self._workdir, self._run_id, self._host_name, self._tree, self._run_json)
        h.record("prepare")
        if placed:
            self._prepared("prepare")
        else:
            self._emit("@send", "prepare")
            self._stage = "manifest"

    @property
    def _tree(self) -> str:
        """The code tree and the package, as one key (the launcher keeps them apart; nothing here needs to)."""
        return f"{self._head['tree']}+{self._head['package']}"

    def _receive(self) -> None:
        h = self._h
        fault = h.take_fault("ship")
        if fault is not None:
            self._fault(fault, "ship")
            return
        tree = self._tree
        h.build_tree(tree, [str(f[1]) for f in self._manifest])
        h.place_code(self._root, tree)
        h.record("ship")
        self._prepared("ship")

    def _prepared(self, step: str) -> None:
        fault = self._h.take_fault("prepare", before=False)
        if fault is not None:
            self._fault(fault, step)
            return
        if "ports" in self._head:  # the port check (training/probes/port_probe.py), against the host's busy_ports
            self._emit("@ports " + json.dumps(self._ports()), step)
        self._emit(f"@prepared {self._root}", step)
        self._stage = "barrier"

    def _ports(self) -> dict[str, list[object]]:
        busy = self._h.busy_ports
        wanted = self._head["ports"]
        assert isinstance(wanted, list)
        taken: list[object] = [[label, port, "scripted: in use"] for label, _address, port in wanted if port in busy]
        start, count = int(str(self._head.get("free_from", 0))), int(str(self._head.get("free_count", 0)))
        free: list[object] = []
        port = start
        while len(free) < count and port <= 65535:
            if port not in busy:
                free.append(port)
            port += 1
        return {"taken": taken, "free": free}

    def _launch(self) -> None:
        h = self._h
        fault = h.take_fault("launch")
        if fault is not None:
            self._fault(fault, "launch")
            return
        run = h.launch(self._root)
        h.record("launch")
        fault = h.take_fault("launch", before=False)
        if fault is not None:
            self._fault(fault, "launch")
            return
        self._emit(f"PID {run.supervisor_pid}", "launch")
        for line in h.state_lines(run):
            self._emit(line, "output")
        if run.supervisor_alive:
            self._emit("ALIVE", "output")
        self._end(0, step="output")

    # --- Session -----------------------------------------------------------------------------------
    def read_line(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if self._lost_at is not None and self._lost_at <= now:
                self._t.connected = False
                raise HostError(self.host, "lost", "scripted: connection lost while the command ran")
            if self._out and self._out[0][0] <= now:
                line = self._out[0][1]
                if line is None:
                    self._ended = True
                else:
                    self._out.popleft()
                return line
            if now >= deadline:
                raise HostError(self.host, "timeout", f"no answer within {timeout:g}s")
            upcoming = [t for t in (self._out[0][0] if self._out else None, self._lost_at) if t is not None]
            time.sleep(max(0.0, min([*upcoming, deadline]) - now))  # until the next scripted line (scripted time)

    def close_input(self) -> None:
        if self._stage in ("head", "run", "manifest", "blobs", "barrier") and not self.closed:
            self._h.remove_unlaunched(self._root)
            self._end(ABORTED)

    def close(self) -> None:
        self.closed = True

    @property
    def exit_code(self) -> int | None:
        return self._exit_code if self._ended else None

    @property
    def stderr_tail(self) -> str:
        return self._stderr
