"""What the orchestrator runs on a host to bring a run's results back: `sender` (files under some
directories, streamed as lines, resumable). Stdlib only; sent as source, so it also runs where no code
of the run is left."""
