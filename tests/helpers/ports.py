"""Free TCP port blocks for tests that start TensorFlow servers (ports are unique across the cluster).

The implementation lives in orchestrator/ports.py (the CLI's demo needs it too); tests keep importing it
from here."""

from __future__ import annotations

from orchestrator.run.local_ports import free_port_block

__all__ = ["free_port_block"]
