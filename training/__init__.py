"""tfcluster: training."""
