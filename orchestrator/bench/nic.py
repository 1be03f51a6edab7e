"""Measure the link a parameter server uses: a short transfer both ways at once between the host of the
plan's ps:0 and the host of its worker:0, two ways:

- `tcp` (training/probes/nic_probe.py): plain sockets, what the wire and the kernels allow (an iperf);
- `tf-grpc` (training/probes/link_probe_tf.py): TensorFlow's own gRPC pulling a variable from the ps and pushing
  a tensor of the same size into it, on the ports the plan gives ps:0 and worker:0: what a training step's
  transfers can reach. Over a real network both are bounded by the NIC; on one machine's loopback the
  second is bounded by the copies gRPC makes, which is what limits a loopback PS.

Each probe is sent as the source of the host's own `python -c` (nothing shipped). The server side runs as
a stream, closed (killed) when the client side is done. The result is bytes per second in and out
together, the quantity the scaling model (orchestrator/bench/scaling.py) compares PS traffic with.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import HostError
from orchestrator.plan.model import ClusterPlan, HostPlan, TaskPlan
from orchestrator.transport.base import LineStream, Transport
from orchestrator.transport.factory import Opener, transport_for
from training.probes import link_probe_tf, nic_probe

TCP_SOURCE = Path(nic_probe.__file__).read_text(encoding="utf-8")
TF_SOURCE = Path(link_probe_tf.__file__).read_text(encoding="utf-8")
TF_PROBE_BYTES = 16_000_000
Method = Literal["tcp", "tf-grpc"]


@dataclass(frozen=True)
class LinkMeasurement:
    method: Method
    server: str  # host names: the ps host, the worker host
    client: str
    seconds: float
    client_sent_Bps: float  # worker host -> ps host (gradients)
    client_received_Bps: float  # ps host -> worker host (variables)

    @property
    def both_ways_Bps(self) -> float:
        return self.client_sent_Bps + self.client_received_Bps

    @property
    def gbps_each_way(self) -> float:
        return self.both_ways_Bps / 2 * 8 / 1e9

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "both_ways_Bps": self.both_ways_Bps, "gbps_each_way": self.gbps_each_way}


def probe_tasks(plan: ClusterPlan) -> tuple[TaskPlan, TaskPlan]:
    """The plan's ps:0 and worker:0 (the link every step of worker 0 crosses)."""
    try:
        return plan.task("ps", 0), plan.task("worker", 0)
    except KeyError:
        raise HostError("?", "error", "--measure-nic needs a plan with a ps task and a worker task") from None


@contextlib.contextmanager
def _serving(transport: Transport, argv: list[str], host: str, ready: str) -> Iterator[LineStream]:
    """The probe's server side as a stream, until its `ready` line; closed (killed) on the way out."""
    stream = transport.stream(argv)
    try:
        lines = stream.lines()
        first = next((line for line in lines if line.strip()), "")
        if not first.startswith(ready):
            raise HostError(host, "remote", f"link probe did not start: {first.strip()[:200] or 'no output'}")
        threading.Thread(target=lambda: [None for _ in lines], daemon=True).start()  # keep draining
        yield stream
    finally:
        with contextlib.suppress(Exception):
            stream.close()


def _answer(stdout: str, host: str) -> dict[str, Any]:
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise HostError(host, "remote", f"link probe answer unreadable: {exc}") from None
    if not isinstance(answer, dict):
        raise HostError(host, "remote", "link probe answer is not an object")
    return answer


def measure_link(plan: ClusterPlan, method: Method, seconds: float = 3.0, opener: Opener = transport_for,
                 timeout: float = 120.0) -> LinkMeasurement:
    ps, worker = probe_tasks(plan)
    server, client = plan.host(ps.host), plan.host(worker.host)
    server_t, client_t = opener(server), opener(client)
    try:
        if method == "tcp":
            return _tcp(server, client, server_t, client_t, seconds, timeout)
        return _tf(ps, worker, server, client, server_t, client_t, seconds, timeout)
    finally:
        for t in (server_t, client_t):
            with contextlib.suppress(Exception):
                t.close()


def _tcp(server: HostPlan, client: HostPlan, server_t: Transport, client_t: Transport, seconds: float,
         timeout: float) -> LinkMeasurement:
    argv = [server.python, "-c", TCP_SOURCE, "serve", f"{seconds:g}"]
    stream = server_t.stream(argv)
    try:
        first = next((line for line in stream.lines() if line.strip()), "")
        if not first.startswith("PORT "):
            raise HostError(server.name, "remote", f"link probe did not start: {first.strip()[:200] or 'no output'}")
        port = first.split()[1]
        dial = client_t.run([client.python, "-c", TCP_SOURCE, "dial", server.dial_address or server.address, port,
                             f"{seconds:g}"], timeout=timeout).check("remote", "link probe (tcp)")
    finally:
        with contextlib.suppress(Exception):
            stream.close()
    answer = _answer(dial.stdout, client.name)
    took = float(answer["seconds"]) or seconds
    return LinkMeasurement("tcp", server.name, client.name, took, float(answer["sent"]) / took,
                           float(answer["received"]) / took)


def _tf(ps: TaskPlan, worker: TaskPlan, server: HostPlan, client: HostPlan, server_t: Transport,
        client_t: Transport, seconds: float, timeout: float) -> LinkMeasurement:
    spec = json.dumps({"ps": [ps.target], "worker": [worker.target]})
    with _serving(server_t, [server.python, "-c", TF_SOURCE, "serve", spec], server.name, "READY"):
        dial = client_t.run([client.python, "-c", TF_SOURCE, "dial", spec, f"{seconds:g}", str(TF_PROBE_BYTES)],
                            timeout=timeout, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).check("remote", "link probe (tf-grpc)")
    answer = _answer(dial.stdout, client.name)
    took = float(answer["seconds"]) or seconds
    return LinkMeasurement("tf-grpc", server.name, client.name, took, float(answer["pushed"]) / took,
                           float(answer["pulled"]) / took)
