"""One module per CLI command group; each exposes `register(app: typer.Typer) -> None`."""
