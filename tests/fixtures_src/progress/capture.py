"""Regenerates tests/unit/data/progress/*.log: runs each fixture program exactly as the supervisor runs a
task (training.supervisor.children.spawn: stdin /dev/null, stdout and stderr appended to one log file, the plan's
PYTHONUNBUFFERED=1 and TF_CPP_MIN_LOG_LEVEL=1), and writes a README line per file.

    .venv/bin/python -m tests.fixtures_src.progress.capture
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import tensorflow as tf

from training.supervisor.children import Child, spawn

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "unit" / "data" / "progress"
PROGRAMS = {
    "tf1_hooks_tflogger.log": ["tf1_hooks.py"],
    "tf1_hooks_absl.log": ["tf1_hooks.py", "--absl"],
    "keras_fit_verbose1.log": ["keras_fit.py", "--verbose", "1"],
    "keras_fit_verbose2.log": ["keras_fit.py", "--verbose", "2"],
}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}
    keras_version = tf.keras.__version__ if hasattr(tf.keras, "__version__") else "?"
    readme = [f"Captured by tests/fixtures_src/progress/capture.py with TensorFlow {tf.__version__}, "
              f"Keras {keras_version}, Python {sys.version.split()[0]} (stdout+stderr to one file, as the "
              "supervisor runs a task). Do not edit: regenerate.", ""]
    for name, args in PROGRAMS.items():
        log = OUT / name
        log.unlink(missing_ok=True)
        code = Child(spawn([sys.executable, str(HERE / args[0]), *args[1:]], env, str(log))).wait()
        if code != 0:
            print(f"{name}: exit code {code}", file=sys.stderr)
            return 1
        readme.append(f"- {name}: `{' '.join(args)}`")
    (OUT / "README.md").write_text("\n".join(readme) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
