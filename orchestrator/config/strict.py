"""The base of every hosts.toml section: unknown keys are errors and TOML's types are taken as they are."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Every section rejects unknown keys (a typo must never be silently ignored) and takes TOML's own
    types as they are: `port = "22"` or `gpus = [true]` is an error, not a silent conversion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)  # built on first use: start-up
