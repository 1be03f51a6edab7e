"""The replication modes (`[cluster] mode`, `--mode`): their names, and where each runs its chief, alone,
so the command line can offer them without importing the schema (pydantic) for every command."""

from __future__ import annotations

from typing import Literal

Mode = Literal["between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy"]
# Modes whose chief job is a separate client or coordinator on the CPU; in the others the chief trains.
CLIENT_CHIEF_MODES: tuple[Mode, ...] = ("in-graph", "parameter-server-strategy")
TRAINING_CHIEF_MODES: tuple[Mode, ...] = ("between-graph", "multi-worker-mirrored")
