"""How many bytes per second TensorFlow's own gRPC moves between a PS host and a worker host, both ways.

Sent as the source of each host's `python -c` by `tfcluster bench --measure-nic` (nothing shipped), on the
ports the plan gives the cluster's ps:0 and worker:0 (free while no run of the cluster is up):

    python -c SRC serve SPEC               # a TF server as /job:ps/task:0; prints READY, then serves
    python -c SRC dial SPEC SECONDS BYTES  # a TF server as /job:worker/task:0 and a client of it

SPEC is the JSON cluster spec {"ps": ["host:port"], "worker": ["host:port"]}. The dialling side places a
variable of BYTES on the ps and, from two threads at once for SECONDS, pulls it to the worker (a read
reduced there) and pushes a same-sized tensor made on the worker into it (assign_add on the ps): the
traffic of a training step, without the model. It prints one JSON line {"pulled", "pushed", "seconds"}.
Over a real network this is bounded by the NIC; on one machine's loopback by the copies gRPC makes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

Spec = dict[str, list[str]]


def _server(spec: Spec, job: str) -> Any:
    import tensorflow as tf

    return tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=0, start=True)


def serve(spec: Spec) -> None:
    server = _server(spec, "ps")
    print("READY", flush=True)
    server.join()


def dial(spec: Spec, seconds: float, nbytes: int) -> dict[str, float]:
    import tensorflow as tf

    v1 = tf.compat.v1
    server = _server(spec, "worker")
    n = max(1, nbytes // 4)
    with tf.device("/job:ps/task:0"):
        var = v1.get_variable("link_probe", [n], tf.float32, v1.zeros_initializer(), use_resource=True)
    with tf.device("/job:worker/task:0"):
        pull = tf.reduce_sum(var.read_value())
        grad = tf.fill([n], 1e-9)
    with tf.device("/job:ps/task:0"):
        push = var.assign_add(grad).op
    config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"], operation_timeout_in_ms=60_000)
    sess = v1.Session(server.target, config=config)
    sess.run(var.initializer)
    sess.run([pull, push])  # warm-up: connections and kernels
    counts = {"pull": 0, "push": 0}
    deadline = time.monotonic() + seconds

    def loop(op: object, key: str) -> None:
        while time.monotonic() < deadline:
            sess.run(op)
            counts[key] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=loop, args=(pull, "pull")), threading.Thread(target=loop, args=(push, "push"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"pulled": counts["pull"] * n * 4, "pushed": counts["push"] * n * 4, "seconds": time.monotonic() - started}


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    if len(argv) == 2 and argv[0] == "serve":
        serve(json.loads(argv[1]))
        return 0
    if len(argv) == 4 and argv[0] == "dial":
        print(json.dumps(dial(json.loads(argv[1]), float(argv[2]), int(argv[3]))), flush=True)
        os._exit(0)  # the worker server has no clean shutdown; nothing is left to flush
    sys.stderr.write("usage: serve SPEC | dial SPEC SECONDS BYTES\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
