"""Entry point of every TF task: `python -m training.task` (cwd = <run>/code, env from the plan).

Reads the environment and run.json (training/run/context.py), configures logging (stderr, which the
supervisor sends to logs/<job>-<task>.log), and dispatches on the mode; each mode sets TensorFlow up as
it needs (the graph modes turn eager execution off, the TF2 strategy modes must keep it on):
- `ps` (graph modes and parameter-server-strategy), in-graph and parameter-server-strategy `worker`:
  serve only (training/cluster/ps.py);
- between-graph `worker` and `chief`: the training loop (training/graph/between_graph.py);
- in-graph `chief`: the single client (training/graph/in_graph.py);
- multi-worker-mirrored `worker` and `chief`: the MultiWorkerMirroredStrategy trainer
  (training/tf2/mirrored.py);
- parameter-server-strategy `chief`: the ClusterCoordinator (training/tf2/ps_strategy.py);
Before any of them, a task the plan gives GPUs (CUDA_VISIBLE_DEVICES not empty: the between-graph and
multi-worker-mirrored workers and training chief, the in-graph and parameter-server-strategy workers whose
servers run the towers) checks that TensorFlow sees that many (training/probes/gpu_check.py): else soft
placement would quietly train on the CPU. A user's own program (`[training] command`) is not checked.
Exit code 0 when training reached its last step (or a serving task saw every finisher, or was stopped);
2 for a setup error (one line); 1 for a training failure (with its traceback in the log); CANNOT_RUN_HERE
(78, sysexits' EX_CONFIG) when the task cannot run on this host as planned and a restart cannot fix it
(one line: host, task, CUDA_VISIBLE_DEVICES, the GPUs TensorFlow saw, the likeliest cause): the
supervisor ends it for good, never restarts it (training/supervisor/policy.py).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from .probes.gpu_check import TeeStderr, gpu_shortfall, planned_gpus, visible_gpus
from .run.context import TaskContext, TaskSetupError
from .run.roles import MIRRORED, PS_STRATEGY
from .supervisor.policy import CANNOT_RUN_HERE

log = logging.getLogger("tfcluster.task")


def configure_logging(name: str) -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s [{name}] %(message)s",
    )


def _drop_stale_step_warning(record: logging.LogRecord) -> bool:
    """TensorFlow's StepCounterHook warns that the global step "has not been increased" when its own
    step read lands before an asynchronous update on the ps (normal in between-graph training): it
    would tell users to fix an optimizer that is fine."""
    return "has not been increased" not in record.getMessage()


def _drop_saver_retracing_warning(record: logging.LogRecord) -> bool:
    """A parameter-server-strategy coordinator traces TF's own checkpoint save function anew at every save
    (MultiDeviceSaver builds it per call), and TF then warns about "excessive retracing": nothing to fix."""
    message = record.getMessage()
    return not ("triggered tf.function retracing" in message and "MultiDeviceSaver" in message)


def skip_eager_keras(ctx: TaskContext) -> None:
    """`import tensorflow` loads Keras 3 eagerly (and matplotlib through it): about 1.3 s of CPU per task
    on a 2-core machine (benchmarks/results/task_import.md), for nothing: the built-in models never touch
    tf.keras. TF skips that load when told to use legacy Keras, and tolerates tf_keras being absent. A
    user's model module (`pkg.module:build`) may use tf.keras: TF then imports as it always does; and the
    user's own value of TF_USE_LEGACY_KERAS wins. Call before TensorFlow is imported."""
    model = str((ctx.plan.get("training") or {}).get("model", "mlp"))
    if ":" not in model:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


class CannotRunHere(Exception):
    """The task cannot run on this host as planned, and a restart would meet the same (one line)."""


def import_tensorflow(ctx: TaskContext) -> Any:
    """`import tensorflow`; for a task the plan gives GPUs, then the check that TensorFlow sees them all,
    with its stderr (where it says why not) kept meanwhile. Raises CannotRunHere with the one line."""
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not planned_gpus(cuda):
        import tensorflow as tf

        return tf
    with TeeStderr() as tee:
        import tensorflow as tf

        seen = visible_gpus(tf)
    problem = gpu_shortfall(tf, f"{ctx.name} on {ctx.host}", cuda, seen, tee.lines)
    if problem is not None:
        raise CannotRunHere(problem)
    log.info("%s: TensorFlow sees the %d GPU(s) of CUDA_VISIBLE_DEVICES=%s", ctx.name, seen, cuda)
    with open(ctx.layout.gpus_seen_file(ctx.job, ctx.index), "w", encoding="utf-8") as f:
        f.write(cuda)  # the supervisor counts this task up for `start` from now on
    return tf


def dispatch(ctx: TaskContext) -> int:
    skip_eager_keras(ctx)
    tf = import_tensorflow(ctx)

    if ctx.mode in (MIRRORED, PS_STRATEGY):
        # TF's Python distribute code logs every checkpoint shard and session config through absl at INFO.
        logging.getLogger("absl").setLevel(logging.WARNING)
    else:
        tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel(logging.WARNING)
    tf.get_logger().addFilter(_drop_stale_step_warning)
    tf.get_logger().addFilter(_drop_saver_retracing_warning)
    if ctx.mode == MIRRORED:
        return _run_mirrored(ctx)
    if ctx.job == "ps" or (ctx.mode in ("in-graph", PS_STRATEGY) and ctx.job == "worker"):
        from .cluster.ps import serve

        return serve(ctx)
    if ctx.mode == PS_STRATEGY:
        if ctx.job != "chief":
            raise TaskSetupError(f"parameter-server-strategy mode has no role for a {ctx.job} task")
        from .tf2 import ps_strategy

        return ps_strategy.run(ctx)
    if ctx.mode == "in-graph":
        if ctx.job != "chief":
            raise TaskSetupError(f"in-graph mode has no role for a {ctx.job} task")
        return _run_in_graph_client(ctx)
    if ctx.job in ("worker", "chief"):
        from .graph.between_graph import run

        return run(ctx)
    raise TaskSetupError(f"unknown job {ctx.job!r}")


def _run_mirrored(ctx: TaskContext) -> int:
    if ctx.job not in ("worker", "chief"):
        raise TaskSetupError(f"multi-worker-mirrored mode has no role for a {ctx.job} task (no ps)")
    from .tf2 import mirrored

    return mirrored.run(ctx)


def _run_in_graph_client(ctx: TaskContext) -> int:
    from .graph import in_graph  # signals the done queues of every ps and worker server itself

    return int(in_graph.run_client(ctx))


def main() -> int:
    # TensorFlow's C++ INFO lines (oneDNN notices, ...) drown the task's own log; warnings and errors
    # stay. Set before TensorFlow is imported; the user's own value (plan env or shell) wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    name = f"{os.environ.get('TFCLUSTER_JOB', '?')}:{os.environ.get('TFCLUSTER_TASK', '?')}"
    configure_logging(name)
    try:
        ctx = TaskContext.from_env()
        log.info("task %s (%s) on host %s, device %s, run %s", ctx.name, ctx.mode, ctx.host, ctx.device,
                 ctx.layout.root)
        code = dispatch(ctx)
    except TaskSetupError as e:
        log.error("%s", e)
        code = 2
    except CannotRunHere as e:
        log.error("%s", e)  # the log's last error line: what `status` and `start` show
        code = CANNOT_RUN_HERE
    except KeyboardInterrupt:
        code = 130
    except Exception:
        log.exception("task %s failed", name)
        code = 1
    return code


if __name__ == "__main__":
    exit_code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: gRPC and TF runtime threads must not keep a finished task alive at interpreter exit.
    os._exit(exit_code)
