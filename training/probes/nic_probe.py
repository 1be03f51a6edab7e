"""A short TCP transfer between two hosts, both ways at once: how many bytes per second their link carries.

Not shipped as a file: `tfcluster bench --measure-nic` sends this module's source to each host's own
`python -c` (like training/probes/host_probe.py), so it runs on any Python 3.6+ with the standard library only.

    python -c SRC serve SECONDS           # listens on every interface (as TF's servers do), prints
                                          # "PORT <n>", accepts one connection, then sends and receives
                                          # for SECONDS and prints one JSON line
    python -c SRC dial HOST PORT SECONDS  # connects, sends and receives for SECONDS, prints one JSON line

Each side sends from one thread and receives on another (a parameter server pulls variables out while
gradients come in); the JSON line is {"sent": bytes, "received": bytes, "seconds": s}.
"""

import contextlib
import json
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def _pump(sock, seconds):
    # type: (socket.socket, float) -> dict[str, float]
    """Send and receive at once for `seconds`; returns the counts."""
    counts = {"sent": 0, "received": 0}  # type: dict[str, float]
    payload = b"\0" * CHUNK
    deadline = time.monotonic() + seconds

    def send():
        # type: () -> None
        try:
            while time.monotonic() < deadline:
                sock.sendall(payload)
                counts["sent"] += CHUNK
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    started = time.monotonic()
    sender.start()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    received_until = started
    while True:
        try:
            n = sock.recv_into(view)
        except OSError:
            break
        if not n:
            break
        if time.monotonic() <= deadline:
            counts["received"] += n
            received_until = time.monotonic()
    sender.join()
    counts["seconds"] = max(received_until, deadline) - started
    return counts


def serve(seconds):
    # type: (float) -> None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", 0))
    listener.listen(1)
    listener.settimeout(60.0)
    print("PORT %d" % listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    conn.settimeout(seconds + 30.0)
    with conn:
        print(json.dumps(_pump(conn, seconds)), flush=True)
    listener.close()


def dial(host, port, seconds):
    # type: (str, int, float) -> None
    sock = socket.create_connection((host, port), timeout=30.0)
    sock.settimeout(seconds + 30.0)
    with sock:
        print(json.dumps(_pump(sock, seconds)), flush=True)


def main(argv):
    # type: (list[str]) -> int
    if len(argv) == 2 and argv[0] == "serve":
        serve(float(argv[1]))
        return 0
    if len(argv) == 4 and argv[0] == "dial":
        dial(argv[1], int(argv[2]), float(argv[3]))
        return 0
    sys.stderr.write("usage: serve SECONDS | dial HOST PORT SECONDS\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
