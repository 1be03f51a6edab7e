"""The multi-worker-mirrored trainer with several replicas in one task, as a task that sees several GPUs has
them (MultiWorkerMirroredStrategy takes every visible local GPU): here a MirroredStrategy over two logical
CPUs, in a process of its own (logical devices are set before TensorFlow starts). Each replica draws its own
batch, the chief's values are broadcast once (not once per local replica), and the task counts the examples
of all its replicas. Needs TensorFlow: fails where it is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests import requires

requires.tensorflow()

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, types
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from training.tf2.mirrored import MirroredTrainer
from training.tf2.settings import TrainSettings

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
settings = TrainSettings(model="mlp", model_args={}, batch_size=4, steps=10, optimizer="sgd", learning_rate=0.1,
                         seed=0, checkpoint_dir="unused", checkpoint_every_steps=None, checkpoint_every_secs=None,
                         summary_every_steps=100, progress_interval=1.0)
trainer = MirroredTrainer(types.SimpleNamespace(is_chief=True, name="chief:0"), settings, strategy)
before = [w.numpy().copy() for w in trainer.model.weights]
trainer._broadcast(tf.constant(True))
kept = all(np.allclose(a, w.numpy()) for a, w in zip(before, trainer.model.weights))
trainer._local = strategy.experimental_local_results  # every replica's loss, not only the first one's
loss, _, step = tf.function(trainer._step_fn)(tf.constant(0.0))
print(json.dumps({"local": trainer.local_replicas, "replicas": trainer.workers, "kept": kept,
                  "losses": [float(x) for x in loss], "step": int(step[0])}))
"""


def test_two_local_replicas_draw_their_own_batches_and_the_chief_broadcasts_once() -> None:
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert (out["local"], out["replicas"]) == (2, 2)
    assert out["kept"]  # the chief's first replica alone sends its values: not doubled by the second
    first, second = out["losses"]
    assert first != second  # the replicas' batches differ: each is its own shard
    assert out["step"] == 1
