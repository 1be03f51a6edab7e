"""The supervisors' peer channel: every host's supervisor tells every other one what only it can see.

Why: a run ends, fails or restarts as a whole (the success policy, multi-worker-mirrored's group
restart), but each supervisor sees only its own host's tasks, and the orchestrator may be gone. So each
supervisor listens on its host's `control_port` (from the plan) and sends its news to every peer:

    {"run": <run id>, "from": <host>, "seq": n, "kind": "final" | "group-restart" | "ended", ...}\\t<hmac>\\n

Each line is signed with the run's key (HMAC-SHA256; the key is in the hosts' run.json, 0600, never
in the local record or the plan) and carries the run id: a message from another run, or unsigned, is
dropped; so is a channel without a key (training/supervisor/run_view.py refuses to open one). A
receiver answers `ok <seq>` per signed line of this run. Delivery is at-least-once: a sender thread
keeps every unacknowledged message per peer and retries with backoff (a peer host may be down for a
while); a receiver acts on each sender's numbers above the highest it acted on, and on nothing else:
a retry or a replayed line is acknowledged and ignored, also by a supervisor started again for the
run (training/supervisor/peer_marks.py keeps the numbers in the host's state dir). Stdlib only;
nothing here blocks the supervisor's loop (it drains `inbox` each poll).
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from typing import TYPE_CHECKING

from .peer_marks import PeerMarks

if TYPE_CHECKING:
    from typing import Any

CONNECT_TIMEOUT_S = 2.0
BACKOFF_MAX_S = 10.0
MAX_LINE = 64 * 1024
BIND_SETTLE_S = 2.0


def sign(key: bytes, body: str) -> str:
    import hashlib  # here: a supervisor that never hears or sends news does not pay for them at start
    import hmac

    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def encode(key: bytes, message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), sort_keys=True)
    return f"{body}\t{sign(key, body)}\n".encode()


def decode(key: bytes, run_id: str, line: bytes) -> dict[str, Any] | None:
    """The message of a signed line of this run, or None (another run's, unsigned, malformed)."""
    try:
        body, _, mac = line.decode().rstrip("\n").rpartition("\t")
        import hmac

        if not body or not hmac.compare_digest(mac, sign(key, body)):
            return None
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(message, dict) or message.get("run") != run_id:
        return None
    return message


class PeerChannel:
    """Listen for peers' messages (`inbox`) and deliver ours to every peer (`broadcast`)."""

    def __init__(self, run_id: str, host: str, key: bytes, listen: tuple[str, int] | None,
                 peers: dict[str, tuple[str, int]], log: Any = None, marks_file: str | None = None) -> None:
        """`listen` None: send only (this host could not take its control port). `marks_file`: where the
        sequence numbers survive a restart (PeerMarks)."""
        if not key:
            raise ValueError("no peer channel without the run's key")
        self.run_id = run_id
        self.host = host
        self.key = key
        self.peers = peers  # host name -> (address, port), this host excluded
        self.inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._log = log or (lambda text: None)
        self._marks = PeerMarks(marks_file)
        self._pending: dict[str, list[tuple[int, bytes]]] = {name: [] for name in peers}
        self._gone: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ending = False  # at the end a refused connection means the peer is gone, not starting
        self._server = self._bind(listen) if listen is not None else None
        self._threads = [threading.Thread(target=self._send_loop, name="peers-out", daemon=True)]
        if self._server is not None:
            self._threads.append(threading.Thread(target=self._serve, name="peers-in", daemon=True))
        for t in self._threads:
            t.start()

    # -- sending ----------------------------------------------------------------------------------
    def broadcast(self, kind: str, **fields: Any) -> None:
        with self._lock:
            seq = self._marks.next_seq()
            line = encode(self.key, {"run": self.run_id, "from": self.host, "seq": seq, "kind": kind,
                                     "t": time.time(), **fields})
            for name in self._pending:
                if name not in self._gone:
                    self._pending[name].append((seq, line))
        self._wake.set()

    def forget(self, peer: str) -> None:
        """That peer's supervisor has ended (it said so): nothing more to tell it."""
        with self._lock:
            if peer in self._pending:
                self._pending[peer] = []
                self._gone.add(peer)

    def set_peers(self, peers: dict[str, tuple[str, int]]) -> None:
        """A resize (training/supervisor/resize.py): the run's hosts are now these. A new peer is told
        from now on; a peer that left is told nothing more."""
        with self._lock:
            for name in peers.keys() - self.peers.keys():
                self._pending[name] = []
            for name in self.peers.keys() - peers.keys():
                self._pending.pop(name, None)
            self.peers = dict(peers)
        self._wake.set()

    def undelivered(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._pending.values())

    def flush(self, timeout: float) -> bool:
        """Wait until every peer acknowledged everything (or `timeout`): True when nothing is pending."""
        deadline = time.monotonic() + timeout
        while self.undelivered() and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.05)
        return not self.undelivered()

    def _send_loop(self) -> None:
        next_try: dict[str, float] = {}
        delay: dict[str, float] = {}
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            for name, address in list(self.peers.items()):  # a resize may change them meanwhile
                with self._lock:
                    batch = list(self._pending.get(name, ()))
                delay.setdefault(name, 0.2)
                if not batch or time.monotonic() < next_try.get(name, 0.0):
                    continue
                acked = self._deliver(address, batch)
                if acked is None:  # refused while ending: its supervisor is gone, nobody to tell
                    self.forget(name)
                    continue
                with self._lock:
                    if name not in self._gone and name in self._pending:
                        self._pending[name] = [m for m in self._pending[name] if m[0] not in acked]
                if len(acked) < len(batch):
                    next_try[name] = time.monotonic() + delay[name]
                    delay[name] = min(delay[name] * 2, BACKOFF_MAX_S)
                    self._wake.set()  # come back when the backoff expires
                else:
                    delay[name] = 0.2

    def _deliver(self, address: tuple[str, int], batch: list[tuple[int, bytes]]) -> set[int] | None:
        """The sequence numbers the peer acknowledged; None when it refused us at the end."""
        acked: set[int] = set()
        try:
            with socket.create_connection(address, timeout=CONNECT_TIMEOUT_S) as sock:
                sock.sendall(b"".join(line for _, line in batch))
                sock.shutdown(socket.SHUT_WR)
                reply = b""
                while chunk := sock.recv(4096):
                    reply += chunk
        except ConnectionRefusedError:
            return None if self._ending else acked
        except OSError:
            return acked
        for word in reply.decode(errors="replace").split("\n"):
            if word.startswith("ok ") and word[3:].isdigit():
                acked.add(int(word[3:]))
        return acked

    # -- receiving --------------------------------------------------------------------------------
    def _bind(self, listen: tuple[str, int]) -> socket.socket:
        """On the address the peers dial; on every interface when that address is not this machine's
        (NAT, or a name that resolves elsewhere). A previous run's supervisor may take a moment to let
        the port go: OSError only when it stays taken for BIND_SETTLE_S."""
        deadline = time.monotonic() + BIND_SETTLE_S
        while True:
            try:
                return self._bind_once(listen)
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def _bind_once(self, listen: tuple[str, int]) -> socket.socket:
        for address in (listen[0], "0.0.0.0"):
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind((address, listen[1]))
            except OSError:
                server.close()
                if address == "0.0.0.0":
                    raise
                continue
            server.listen(64)
            server.settimeout(0.5)
            return server
        raise OSError(f"cannot listen on port {listen[1]}")  # pragma: no cover - the loop raises first

    def _serve(self) -> None:
        while not self._stop.is_set():
            server = self._server
            if server is None:
                return
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(CONNECT_TIMEOUT_S)
                with contextlib.suppress(OSError):
                    self._receive(conn)

    def _receive(self, conn: socket.socket) -> None:
        data = b""
        while len(data) < MAX_LINE * 64 and (chunk := conn.recv(65536)):
            data += chunk
        replies = []
        for line in data.split(b"\n"):
            message = decode(self.key, self.run_id, line) if line else None
            if message is None:
                if line:
                    self._log("dropped a peer message that is not this run's (or not signed)")
                continue
            sender, seq = str(message.get("from")), message.get("seq")
            if not isinstance(seq, int):
                continue
            if self._marks.accept(sender, seq):  # on disk before it is acted on or acknowledged
                self.inbox.put(message)
            replies.append(f"ok {seq}\n")
        conn.sendall("".join(replies).encode())

    def stop_listening(self) -> None:
        """The end: take no more messages (and free the control port for the next run at once); from now
        on a peer that refuses us has ended too."""
        self._ending = True
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.close()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self.stop_listening()
