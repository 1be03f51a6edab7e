"""What a user's own program may import: `tfcluster_report` (this directory is on every task's
PYTHONPATH), backed by `report` (stdlib: progress events from any program) and `report_tf` (the Keras
callback and the tf.compat.v1 hook, built with TensorFlow on first use)."""
