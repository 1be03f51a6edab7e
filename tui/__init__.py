"""tfcluster: tui."""
