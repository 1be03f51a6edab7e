"""Built-in models and the user's own (`module.path:build`). Graph-mode TensorFlow (tf.compat.v1)."""
