"""tfcluster_report: tell tfcluster how your own training program progresses. Stdlib only.

    from tfcluster_report import report
    for step in range(steps):
        loss = train_step(batch)
        report(loss=loss, examples=len(batch))      # microseconds; events written by a thread

    model.fit(x, y, callbacks=[tfcluster_report.TfclusterCallback(batch_size=64)])            # Keras
    tf.compat.v1.train.MonitoredTrainingSession(hooks=[tfcluster_report.TfclusterHook(loss)])  # TF1

Contract (details in training/public/report.py and training/public/report_tf.py, which this module re-exports):
- `report(step=None, loss=None, examples=None, global_step=None)`: `step` is this process's cumulative
  step count (default: previous + 1), `examples` the examples since the previous call (summed),
  `global_step` the cluster's step as last seen (default: `step`), `loss` the last loss. The dashboard,
  `dash --once --json`, Prometheus and `status` show it like the built-in trainer's progress.
- `close()` writes the last step now (otherwise done at exit); `current_step()` is the count so far.
- `TfclusterCallback` (Keras) and `TfclusterHook` (tf.compat.v1 SessionRunHook) import TensorFlow
  when first used; importing this module never does.
- Outside tfcluster (no TFCLUSTER_* environment) every call does nothing, after one warning.

It ships with tfcluster's code on every host: the supervisor puts this directory on the tasks'
PYTHONPATH (the run's lib/), and this module finds tfcluster's package beside it.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Any

# tfcluster's own package: on the hosts this file sits beside it in the run's lib/, where it is shipped under
# a private name (so that a program's own `training` package never collides with it); in a checkout, this
# file is in the package's public/.
HOST_PACKAGE = "_tfcluster_training"  # training/run/layout.py's (a test keeps the two equal)
_HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(_HERE, HOST_PACKAGE)):
    _PACKAGE_PARENT, _PACKAGE = _HERE, HOST_PACKAGE
else:
    _PACKAGE_PARENT, _PACKAGE = os.path.split(os.path.dirname(_HERE))


def _implementation() -> Any:
    if _PACKAGE_PARENT not in sys.path:
        sys.path.append(_PACKAGE_PARENT)  # last: never shadows the program's own modules
    try:
        return importlib.import_module(f"{_PACKAGE}.public.report")
    except ImportError:
        return None


_impl = _implementation()

if _impl is not None:
    report = _impl.report
    close = _impl.close
    current_step = _impl.current_step
else:  # another `training` package shadows tfcluster's: say so once, then stay out of the way
    warnings.warn(f"tfcluster_report: cannot import tfcluster's package {_PACKAGE} from {_PACKAGE_PARENT}; "
                  "report() does nothing", RuntimeWarning, stacklevel=2)

    def report(step: Any = None, loss: Any = None, examples: Any = None, global_step: Any = None) -> None:
        return None

    def close() -> None:
        return None

    def current_step() -> int:
        return 0


def __getattr__(name: str) -> Any:
    """TfclusterCallback and TfclusterHook, built (with TensorFlow) on first use."""
    if name in ("TfclusterCallback", "TfclusterHook") and _impl is not None:
        return importlib.import_module(f"{_PACKAGE}.public.report_tf").tf_class(name)
    raise AttributeError(f"module 'tfcluster_report' has no attribute {name!r}")


__all__ = ["close", "current_step", "report"]  # (not the TF classes: `import *` must not import TensorFlow)
