"""Every tfcluster command is a fresh process, and fan-out at scale is measured on the whole CLI
(benchmarks/results/fanout.md): its start-up must not import the heavy libraries only some commands use.
matplotlib alone cost 0.43 s of CPU per command when `bench` imported it at registration."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("matplotlib", "numpy", "tensorflow", "textual")


def test_the_cli_starts_without_heavy_imports() -> None:
    code = ("import sys, tfcluster.cli; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "", f"imported at CLI start-up: {out.stdout.strip()}"
