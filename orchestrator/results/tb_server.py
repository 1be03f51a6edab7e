"""TensorBoard in a process of its own, tied to the process that started it (orchestrator/results/board.py):

    python -m orchestrator.results.tb_server LOGDIR PORT RELOAD_SECONDS

It serves LOGDIR on 127.0.0.1 only (PORT, or "default": TensorBoard's 6006 or the next free one), prints
its URL as one line on stdout, and exits as soon as its stdin closes: when its parent closes it, exits,
or dies (even by SIGKILL), so no TensorBoard outlives the `tfcluster` command that opened it. TensorBoard's
fast loader runs a separate data server process; the Python loader is used instead, so this process is
all there is. TensorBoard reads event files without TensorFlow (its own stub); it would import TensorFlow
when installed (seconds and hundreds of MB here) unless `tensorboard.compat.notf` exists, the marker of its
TensorFlow-free build, which is therefore provided. Every event file of a run is followed (`reload_multifile`): a restarted task writes a new
file next to its old one, which may still be arriving.
"""

from __future__ import annotations

import os
import sys
import types


def main(argv: list[str]) -> int:
    logdir, port, reload_s = argv
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    from tensorboard import program

    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", logdir, "--host", "127.0.0.1", "--port", port,
                          "--reload_interval", reload_s, "--reload_multifile", "true", "--load_fast", "false"])
    url = board.launch()
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()  # until the parent's end of the pipe closes
    os._exit(0)  # the server's threads are daemons: nothing to wait for


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
