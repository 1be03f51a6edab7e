"""A missing TensorFlow fails the test run: run one TF test module with `import tensorflow` made to fail
(a stand-in package earlier on the path), in a real pytest subprocess, and look at what it reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_tensorflow_fails_the_run_instead_of_skipping(tmp_path: Path) -> None:
    blocker = tmp_path / "tensorflow"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/unit/test_device_placement_tf.py"], check=False, cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0, res.stdout
    assert "TensorFlow is missing" in res.stdout
    assert "skipped" not in res.stdout


def test_no_test_module_skips_on_a_missing_import() -> None:
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
                 if "importorskip" in p.read_text() and p.name != Path(__file__).name]
    assert offenders == []
