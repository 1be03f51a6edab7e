"""The replication modes (`[cluster] mode`, `--mode`): their names alone, so the command line can offer
them without importing the schema (pydantic) for every command."""

from __future__ import annotations

from typing import Literal

Mode = Literal["between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy"]
