"""Telemetry written by the processes on cluster machines. Stdlib only."""
