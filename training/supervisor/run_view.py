"""What this host's supervisor knows of the whole run: every task's final exit (its own and, through the
peer channel, every other host's), the run's outcome once the success policy decides it, and the
group restarts announced by peers. See training/supervisor/policy.py for the rules and
training/supervisor/peers.py for the channel."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .peers import PeerChannel
from .policy import outcome

if TYPE_CHECKING:
    from typing import Any


MIN_KEY_BYTES = 16


def channel_key(text: object) -> bytes:
    """The run's key from run.json, or b"" when it is missing, not hex or too short to sign with."""
    try:
        key = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        return b""
    return key if len(key) >= MIN_KEY_BYTES else b""


class RunView:
    def __init__(self, run: dict[str, Any], host: str) -> None:
        self.plan = run["plan"]
        self.run_id = str(run.get("run_id", ""))
        self.host = host
        self.key = channel_key(run.get("channel_key"))
        self.finals: dict[str, dict[str, Any]] = {}
        self.outcome: str | None = None
        self.channel: PeerChannel | None = None
        # No channel where the plan has one (our control port taken, or no key): the run cannot be
        # watched from here, so this host's tasks fail at once with this line (training/supervisor/core.py).
        self.channel_error: str | None = None

    def open_channel(self, log: Callable[[str], None], marks_file: str | None = None) -> None:
        """Listen for peers and reach them, when the plan gives this host a control port; never without
        the run's key. `marks_file`: the channel's sequence numbers (peer_marks.py)."""
        hosts = {h["name"]: h for h in self.plan.get("hosts", [])}
        me = hosts.get(self.host, {})
        if not me.get("control_port"):
            return
        if not self.key:
            self.channel_error = (f"run.json of {self.host} holds no valid peer channel key (at least "
                                  f"{MIN_KEY_BYTES} bytes, hex): without it the hosts cannot agree on the run's "
                                  "end; start the run again with this tfcluster")
            log(self.channel_error)
            return
        peers = self._peers()
        listen = (me.get("dial_address") or me["address"], int(me["control_port"]))
        try:
            self.channel = PeerChannel(self.run_id, self.host, self.key, listen, peers, log, marks_file)
        except OSError:
            # Another program (another run?) holds our control port: tell the peers, hear nothing.
            self.channel_error = f"port {listen[1]} (this host's supervisor) is in use by another process on {self.host}"
            self.channel = PeerChannel(self.run_id, self.host, self.key, None, peers, log, marks_file)

    def _peers(self) -> dict[str, tuple[str, int]]:
        return {h["name"]: (h.get("dial_address") or h["address"], int(h["control_port"]))
                for h in self.plan.get("hosts", []) if h["name"] != self.host and h.get("control_port")}

    def replan(self, run: dict[str, Any]) -> None:
        """A resize (training/supervisor/resize.py): the run's plan is now run.json's; the policy decides
        over its tasks (a removed task's exit is no longer news), the peers are its hosts."""
        self.plan = run["plan"]
        names = {f"{t['job']}-{t['index']}" for t in self.plan.get("tasks", [])}
        self.finals = {name: final for name, final in self.finals.items() if name in names}
        if self.channel is not None:
            self.channel.set_peers(self._peers())
        self._decide()

    def task_final(self, name: str, code: int | None, stopped_by: str | None) -> None:
        self.finals[name] = {"code": code, "stopped_by": stopped_by}
        if self.channel is not None:
            self.channel.broadcast("final", task=name, code=code, stopped_by=stopped_by)
        self._decide()

    def peers_group_restart(self, epoch: int, cause: str) -> None:
        if self.channel is not None:
            self.channel.broadcast("group-restart", epoch=epoch, cause=cause)

    def poll(self) -> Iterator[tuple[str, int]]:
        """Apply what the peers said since the last poll; yields ("group-restart", epoch) to act on."""
        if self.channel is None:
            return
        while True:
            try:
                message = self.channel.inbox.get_nowait()
            except queue.Empty:
                break
            if message.get("kind") == "final" and isinstance(message.get("task"), str):
                self.finals.setdefault(message["task"], {"code": message.get("code"),
                                                         "stopped_by": message.get("stopped_by")})
                self._decide()
            elif message.get("kind") == "group-restart" and isinstance(message.get("epoch"), int):
                yield "group-restart", message["epoch"]
            elif message.get("kind") == "ended":
                self.channel.forget(str(message.get("from")))

    def _decide(self) -> None:
        if self.outcome is None:
            self.outcome = outcome(self.plan, self.finals)
            if self.outcome is not None and self.channel is not None:
                self.channel.stop_listening()  # nothing left to learn: free the port for the next run

    def close(self, flush_timeout: float) -> None:
        """Deliver what the peers have not acknowledged yet (bounded: a dead peer cannot keep us)."""
        if self.channel is not None:
            self.channel.stop_listening()
            self.channel.broadcast("ended")  # peers stop telling us anything, and need not wait for us
            with contextlib.suppress(Exception):
                deadline = time.monotonic() + flush_timeout
                while self.channel.undelivered() and time.monotonic() < deadline:
                    list(self.poll())  # a peer's own "ended" releases what we still owe it
                    self.channel.flush(0.1)
            self.channel.close()
