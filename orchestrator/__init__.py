"""tfcluster: orchestrator."""
