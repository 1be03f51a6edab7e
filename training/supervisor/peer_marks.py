"""The peer channel's memory across a supervisor's restarts: what makes a replayed message worthless.

Every message a supervisor sends carries the next number of its own sequence; a receiver accepts from
each sender only numbers above the highest it accepted before (its high-water mark) and acknowledges
the others without acting on them (a retry of something it already has, or a replay). Both are kept in
one small file in the host's state dir, rewritten atomically before anything depends on them: the
sender's counter before a message with that number leaves, the receiver's mark before the message is
acted on or acknowledged. So a supervisor started again for the same run neither reuses a number its
peers have already seen (its news would be dropped) nor accepts a message it already acted on. Senders
send each peer their messages in order on one connection, so numbers arrive in order. Stdlib only.
"""

from __future__ import annotations

import threading

from .files import read_json, write_json_atomic


class PeerMarks:
    def __init__(self, path: str | None) -> None:
        """`path` None: kept in memory only (a channel in a test, or a host without a state dir)."""
        self.path = path
        data = (read_json(path) if path else None) or {}
        sent = data.get("sent")
        seen = data.get("seen")
        self.sent = sent if isinstance(sent, int) and sent >= 0 else 0
        self.seen: dict[str, int] = ({k: v for k, v in seen.items() if isinstance(k, str) and isinstance(v, int)}
                                     if isinstance(seen, dict) else {})
        self._lock = threading.Lock()

    def next_seq(self) -> int:
        """The number for the next message we send, on disk before the message exists."""
        with self._lock:
            self.sent += 1
            self._save()
            return self.sent

    def accept(self, sender: str, seq: int) -> bool:
        """True once per (sender, number above its mark): act on it. False: seen before, or a replay."""
        with self._lock:
            if seq <= self.seen.get(sender, 0):
                return False
            self.seen[sender] = seq
            self._save()
            return True

    def _save(self) -> None:
        if self.path:
            write_json_atomic(self.path, {"sent": self.sent, "seen": self.seen})
