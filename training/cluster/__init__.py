"""The TensorFlow cluster pieces both trainer families use (graph/ and tf2/): the standard server of a ps or
serving worker and its done queues (`ps`), device strings and session configs (`devices`), greedy-by-bytes
PS placement (`placement`, also used by the orchestrator's PS-load estimate), the straggler's slowdown
(`straggler`) and the optimizers (`optimizers`). Imported by TF tasks only."""
