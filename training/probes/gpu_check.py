"""Does TensorFlow see the GPUs the plan gives a task? If not, one line saying so, and the likeliest why.

A built-in task the plan gives GPUs (its CUDA_VISIBLE_DEVICES is not empty: one GPU per comma-separated
entry) runs this before it trains (training/task.py); `check` runs it once per host for the GPUs of the
host's built-in tasks (training/probes/host_probe.py). Without it, soft placement would quietly run the
GPU towers on the CPU at a fraction of the speed, with `status` saying `running`.

- `visible_gpus(tf)`: THE one place that reads the GPUs TensorFlow sees
  (`tf.config.list_physical_devices("GPU")`); tests that need GPUs this machine lacks fake only this.
- `TeeStderr`: TensorFlow says why it found no GPU on its C++ stderr (file descriptor 2), not through any
  Python API; within the block every line still goes to stderr (the task's log) and is also kept.
- `likely_cause(built_with_cuda, lines)`: the cause, from `tf.test.is_built_with_cuda()` and those lines
  (pure: tested on recorded TensorFlow lines).
- `gpu_problem(who, cuda_visible_devices, seen, cause)`: the one line the task fails with, `status`
  shows and `check` reports: who (`worker:0 on gpu-a`), CUDA_VISIBLE_DEVICES, what TensorFlow saw, why.

Inlined into host_probe's source when `check` sends it (orchestrator/run/inline_source.py): standard
library only, Python 3.6+, no `__future__` import, type comments, and no TensorFlow import of its own
(the caller passes its `tensorflow` module).
"""

import os
import sys
import threading
from typing import Any  # noqa: F401 - named in type comments

KEEP_LINES = 400  # of TensorFlow's stderr while the GPUs are listed: its reasons come first, all short

CPU_ONLY_BUILD = "this TensorFlow is a CPU-only build (tensorflow-cpu?): install tensorflow[and-cuda]"
NO_REASON = "TensorFlow logged no reason (TF_CPP_MIN_LOG_LEVEL=0 shows more): does nvidia-smi list them?"
# (what TensorFlow's own stderr says, the cause it means), most specific first
_CAUSES = (
    ("CUDA driver version is insufficient", "the NVIDIA driver is older than this TensorFlow's CUDA needs "
                                            "(\"CUDA driver version is insufficient\"): update the driver"),
    ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the NVIDIA driver's kernel module and library differ "
                                          "(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH): reboot or reinstall the driver"),
    ("does not match DSO version", "the NVIDIA driver's kernel module and library differ "
                                   "(\"does not match DSO version\"): reboot or reinstall the driver"),
    ("Could not load dynamic library", "CUDA libraries not found (\"Could not load dynamic library\"): "
                                       "install tensorflow[and-cuda] or the CUDA and cuDNN it needs"),
    ("Cannot dlopen some GPU libraries", "CUDA libraries not found (\"Cannot dlopen some GPU libraries\"): "
                                         "install tensorflow[and-cuda] or the CUDA and cuDNN it needs"),
    ("CUDA_ERROR_NO_DEVICE", "the CUDA driver finds no GPU (CUDA_ERROR_NO_DEVICE): are the indexes in "
                             "CUDA_VISIBLE_DEVICES this machine's?"),
    ("Could not find cuda drivers", "no NVIDIA driver found (\"Could not find cuda drivers\"): install it"),
    ("failed call to cuInit", "the CUDA driver did not start (\"failed call to cuInit\"): see nvidia-smi"),
)


def planned_gpus(cuda_visible_devices):
    # type: (str | None) -> int
    """How many GPUs CUDA_VISIBLE_DEVICES gives: one per comma-separated entry; empty or unset = none."""
    return len([d for d in (cuda_visible_devices or "").split(",") if d.strip()])


def visible_gpus(tf):
    # type: (Any) -> int
    """The GPUs this TensorFlow sees (under the process's CUDA_VISIBLE_DEVICES)."""
    return len(tf.config.list_physical_devices("GPU"))


def likely_cause(built_with_cuda, tf_lines):
    # type: (bool, list[str]) -> str
    """Why TensorFlow saw fewer GPUs than planned, from its build and what it printed on stderr."""
    if not built_with_cuda:
        return CPU_ONLY_BUILD
    text = "\n".join(tf_lines)
    for said, cause in _CAUSES:
        if said in text:
            return cause
    return NO_REASON


def gpu_problem(who, cuda_visible_devices, seen, cause):
    # type: (str, str, int, str) -> str
    gpus = "GPU" if seen == 1 else "GPUs"
    return f"{who}: CUDA_VISIBLE_DEVICES={cuda_visible_devices} but TensorFlow sees {seen} {gpus}: {cause}"


def gpu_shortfall(tf, who, cuda_visible_devices, seen, tf_lines):
    # type: (Any, str, str, int, list[str]) -> str | None
    """The problem line when TensorFlow saw fewer GPUs than CUDA_VISIBLE_DEVICES gives, else None."""
    if seen >= planned_gpus(cuda_visible_devices):
        return None
    cause = likely_cause(bool(tf.test.is_built_with_cuda()), tf_lines)
    return gpu_problem(who, cuda_visible_devices, seen, cause)


class TeeStderr:
    """Within the block, whatever anything in this process writes to file descriptor 2 still goes there
    and is also kept in `lines` (the last KEEP_LINES), complete once the block has ended."""

    def __init__(self):
        # type: () -> None
        self.lines = []  # type: list[str]
        self._saved = -1
        self._thread = None  # type: threading.Thread | None

    def __enter__(self):
        # type: () -> TeeStderr
        sys.stderr.flush()
        self._saved = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._thread = threading.Thread(target=self._copy, args=(read_end,), name="tee-stderr", daemon=True)
        self._thread.start()
        return self

    def _copy(self, read_end):
        # type: (int) -> None
        pending = b""
        try:
            while True:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                _write_all(self._saved, chunk)
                *done, pending = (pending + chunk).split(b"\n")
                self.lines = (self.lines + [line.decode("utf-8", "replace") for line in done])[-KEEP_LINES:]
        finally:
            os.close(read_end)
            if pending:
                self.lines = [*self.lines, pending.decode("utf-8", "replace")][-KEEP_LINES:]

    def __exit__(self, *exc):
        # type: (object) -> None
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # fd 2 held the pipe's last write end: the copier now reads its end
        if self._thread is not None:
            # a child started inside the block may still hold the pipe: then keep what came so far
            self._thread.join(timeout=5.0)
            if not self._thread.is_alive():
                os.close(self._saved)


def _write_all(fd, data):
    # type: (int, bytes) -> None
    while data:
        data = data[os.write(fd, data):]
