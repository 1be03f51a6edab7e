"""Shared connections of the OpenSSH client (ControlMaster) that tests and benchmarks open: closing every
one whose socket is in a control directory of their own, so none outlives them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def close_ssh_masters(directory: str | os.PathLike[str]) -> None:
    """Ask every shared ssh connection whose socket is in `directory` to exit (`ssh -O exit`)."""
    for sock in Path(directory).iterdir() if Path(directory).is_dir() else []:
        if sock.is_socket():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "unused"], capture_output=True,
                           timeout=10, check=False)
