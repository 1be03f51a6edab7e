"""TensorFlow 2 (eager + tf.function) training for the modes that use TF's own distribution strategies:
`multi-worker-mirrored` (training/tf2/mirrored.py) and `parameter-server-strategy`
(training/tf2/ps_strategy.py). No Keras: the models are tf.Modules, the optimizers plain tf updates."""
