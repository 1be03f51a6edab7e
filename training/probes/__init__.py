"""What the orchestrator runs on a host to learn about it, each sent as source or run from the shipped code:
`host_probe` (`check`: python, TF, GPUs, ports, workdir), `port_probe` (can a port be bound: inlined into
the launcher and the host probe), `nic_probe` (plain-TCP link speed for `bench --measure-nic`) and
`link_probe_tf` (the same through TensorFlow's gRPC; the only one that imports TensorFlow). Python 3.6+
and stdlib only, except link_probe_tf."""
