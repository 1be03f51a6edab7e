"""tfcluster: the command-line interface (Typer) on top of `orchestrator/` and `tui/`."""
