"""A run's TensorBoard on this machine: its event files followed here, a local TensorBoard reading them.

Chosen over a TensorBoard on the chief's host behind an SSH port forward (DESIGN.md, "TensorBoard"): each
task writes its run on its own host, so only a copy here shows every task side by side; nothing is
needed on the hosts (`tensorflow-cpu` does not install `tensorboard`); and it keeps working once the run
has stopped or its hosts are gone. `Board(record).open()`:
1. syncs the run's event files once into `<run's local dir>/tensorboard/` (orchestrator/results/follow.py);
2. starts TensorBoard there (orchestrator/results/tb_server.py: 127.0.0.1 only, ends with this process);
3. writes the run's board state file (orchestrator/results/board_state.py), so that another command
   (`dash --once --json`, the dashboard's key) finds the open board instead of opening a second one;
4. follows the files every `interval` until `close()`, which stops the follower (killing its commands on
   the hosts), ends TensorBoard and removes the state file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import socket
import subprocess
import sys
import time

from orchestrator.errors import TfclusterError, UsageError
from orchestrator.results import board_state
from orchestrator.results.follow import ChangeCallback, SummaryFollower
from orchestrator.run import records
from orchestrator.transport.factory import Opener, transport_for

INSTALL_HINT = "pip install 'tfcluster[tensorboard]'"


def check_installed() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError(f"tensorboard is not installed here: {INSTALL_HINT}")


def check_port(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror or exc})") from None


class Board:
    def __init__(self, record: records.RunRecord, *, port: int | None = None, interval: float = 5.0,
                 opener: Opener = transport_for, on_change: ChangeCallback | None = None,
                 startup_timeout: float = 120.0) -> None:
        self.record = record
        self.port = port
        self.startup_timeout = startup_timeout
        self.local = records.local_dir(record.run_id)
        self.logdir = self.local / "tensorboard"
        self.follower = SummaryFollower(record, self.logdir, interval=interval, opener=opener, on_change=on_change)
        self.url = ""
        self._server: subprocess.Popen[bytes] | None = None

    def open(self) -> Board:
        check_installed()
        if self.port is not None:
            check_port(self.port)
        self.local.mkdir(exist_ok=True, mode=0o700)
        self.logdir.mkdir(exist_ok=True, mode=0o700)
        try:
            self.follower.sync()
            server_pid = self._start_server()
            board_state.write(self.record.run_id, self.url, server_pid)
            self.follower.start()
        except BaseException:
            self.close()
            raise
        return self

    def runs(self) -> list[str]:
        """The TensorBoard runs copied so far (directories holding event files), as TensorBoard names them."""
        return sorted({p.parent.relative_to(self.logdir).as_posix() for p in self.logdir.rglob("*tfevents*")})

    def _start_server(self) -> int:
        """Start TensorBoard, wait for its URL; returns its pid."""
        log = os.open(self.local / "tensorboard.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.results.tb_server", str(self.logdir),
                 str(self.port) if self.port is not None else "default", f"{max(1.0, self.follower.interval):g}"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        finally:
            os.close(log)
        assert self._server.stdout is not None
        fd = self._server.stdout.fileno()
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                raise TfclusterError(f"TensorBoard did not start: {self._log_tail()}")
            line += chunk
        self.url = line.decode().strip()
        return self._server.pid

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = (self.local / "tensorboard.log").read_text(errors="replace").strip().splitlines()
            if lines:
                return lines[-1][-300:]
        return "no output (see its log beside the run record)"

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.poll() is None and not self.follower.gone

    def close(self) -> None:
        """Stop following, end TensorBoard, remove the state file. Idempotent."""
        self.follower.close()
        server, self._server = self._server, None
        if server is not None:
            assert server.stdin is not None
            assert server.stdout is not None
            with contextlib.suppress(OSError):
                server.stdin.close()  # its signal to exit
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            server.stdout.close()
            board_state.remove_mine(self.record.run_id)
