"""A between-graph trainer's TF server and its sessions' master: as a task of the cluster every task started
with, or as one joining a running cluster after `tfcluster resize` (issue 37).

Why: TensorFlow's gRPC runtime has the receiving side pull each tensor, so a ps must reach a worker to take
its gradients, and a ps knows only the cluster its server started with: a worker added by a resize is
"No worker known as /job:worker/replica:0/task:N" to it. TensorFlow's own remedy, used here, is ClusterSpec
propagation: the session's ConfigProto carries the whole current cluster (`cluster_def`, from this task's
run.json), the master sends it with every CreateWorkerSession, and each task the session uses builds that
session's worker cache from it. `share_session_state_in_clusterspec_propagation` keeps those sessions on the
ps's own resources: the variables, the global step and the done queues the other tasks use. Nobody restarts.

Contract:
- `start_server(ctx, device_filters)` -> TaskServer. A run never resized (run.json's resize serial 0): the
  server of `ctx.cluster_spec` under the task's own job and index, sessions on `server.target`, no cluster
  carried: exactly as before resizes existed.
- A resized run (serial above 0), for every between-graph training task that starts in it (a new worker, or
  a kept one its supervisor restarts later: whichever cluster each ps started with, the session names every
  task): TensorFlow requires the master to find itself in `cluster_def` under a job and index other than the
  ones its server booted with, so the server boots on the task's port as the only task of a job of its own
  (BOOT_JOB), and the sessions' master is the task's address as the cluster names it
  (`grpc://<dial address>:<port>`; the devices then are `/job:<job>/task:<index>` as planned).
- `TaskServer.config(...)`: a session config for any session of this task (the training session, the done
  tokens: training/cluster/ps.py signal_done), with the cluster when it joins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from ..run.context import TaskContext
from .devices import session_config

BOOT_JOB = "tfcluster_boot"  # the job a joining task's server boots as: never a job of the plan


@dataclass(frozen=True)
class TaskServer:
    server: Any  # the started tf.distribute.Server
    master: str  # the target of this task's sessions
    cluster: dict[str, list[str]] | None  # the cluster its sessions carry (None: its server's own)

    @property
    def joins(self) -> bool:
        return self.cluster is not None

    def config(self, device_filters: Iterable[str]) -> Any:
        return session_config(device_filters=device_filters, cluster=self.cluster)


def start_server(ctx: TaskContext, device_filters: Iterable[str]) -> TaskServer:
    filters = list(device_filters)
    # The server's default config never carries a cluster: only the sessions do.
    config = session_config(device_filters=filters)
    if ctx.resize_serial <= 0:
        server = tf.distribute.Server(tf.train.ClusterSpec(ctx.cluster_spec), job_name=ctx.job,
                                      task_index=ctx.index, protocol="grpc", config=config, start=True)
        return TaskServer(server, server.target, None)
    address = ctx.cluster_spec[ctx.job][ctx.index]
    server = tf.distribute.Server(tf.train.ClusterSpec({BOOT_JOB: [address]}), job_name=BOOT_JOB, task_index=0,
                                  protocol="grpc", config=config, start=True)
    return TaskServer(server, f"grpc://{address}", ctx.cluster_spec)
