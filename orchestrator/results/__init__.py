"""A run's results on this machine: `pull` (checkpoints, logs, summaries copied here) and `board` (a local
TensorBoard over the run's event files, followed while it runs). Both reach the hosts only through the
transport the run record names (`remote_files`: one command per host, no SFTP) and find what to copy in
`sources`, so a run reached another way (e.g. through a batch job) only needs another opener."""
