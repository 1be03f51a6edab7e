"""The TF1 graph-mode trainers (tf.compat.v1): `between_graph` (every worker its own client, variables on
the ps), `in_graph` (one client, one tower per worker device) and their checkpointing (`checkpointing`:
a restarted chief joins the variables the ps still hold). Imported by `training.task` in a TF task."""
