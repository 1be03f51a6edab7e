"""Prometheus text exposition of ClusterState (`tfcluster dash --prometheus PORT`): tasks (with their GPU
use and `on CPU?`: monitor/gpu_use.py), hosts (with their GPUs), PS traffic, totals.

The UI thread renders the text on each poll (the state is only read there); the HTTP thread serves the
last rendering, so scraping never touches the live state.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.source import StateSource
from orchestrator.monitor.task_state import LIVENESS_STATES


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items()) + "}"


def render(st: ClusterState) -> str:
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, rows: list[tuple[str, float | None]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in rows:
            if value is not None:
                out.append(f"{name}{labels} {value:g}")

    tasks = sorted(st.tasks.values(), key=lambda t: t.name)
    tl = {t.name: _labels(task=t.name, job=t.job, host=t.host) for t in tasks}
    metric("tfcluster_task_steps_per_second", "gauge", "Smoothed local steps per second.",
           [(tl[t.name], t.steps_per_s) for t in tasks])
    metric("tfcluster_task_examples_per_second", "gauge", "Smoothed examples per second.",
           [(tl[t.name], t.examples_per_s) for t in tasks])
    metric("tfcluster_task_global_step", "gauge", "Last global step the task reported.",
           [(tl[t.name], t.global_step) for t in tasks])
    metric("tfcluster_task_loss", "gauge", "Last loss the task reported.", [(tl[t.name], t.loss) for t in tasks])
    metric("tfcluster_task_restarts", "gauge", "Restarts by the supervisor.",
           [(tl[t.name], float(t.restarts)) for t in tasks])
    metric("tfcluster_task_data_age_seconds", "gauge", "Age of the task's last data.",
           [(tl[t.name], t.age_s) for t in tasks])
    metric("tfcluster_task_state", "gauge", "1 for the task's current liveness state.",
           [(_labels(task=t.name, job=t.job, host=t.host, state=s), 1.0 if t.state == s else 0.0)
            for t in tasks for s in LIVENESS_STATES])
    gl = {(t.name, g.index): _labels(task=t.name, job=t.job, host=t.host, gpu=str(g.index))
          for t in tasks for g in t.gpu_use}
    metric("tfcluster_task_gpu_memory_mib", "gauge", "GPU memory the task's own processes hold on each GPU.",
           [(gl[t.name, g.index], g.task_mem_mb) for t in tasks for g in t.gpu_use])
    metric("tfcluster_task_gpu_utilization_percent", "gauge", "Utilisation of each GPU the task uses or is planned on.",
           [(gl[t.name, g.index], g.util_pct) for t in tasks for g in t.gpu_use])
    metric("tfcluster_task_on_cpu_suspected", "gauge",
           "1: planned on a GPU, settled, and its processes hold no GPU memory (on CPU?).",
           [(tl[t.name], 1.0 if t.on_cpu_suspected else 0.0) for t in tasks if t.gpu_use])
    hosts = sorted(st.hosts.values(), key=lambda h: h.name)
    gpus = [(_labels(host=h.name, gpu=str(g.index)), g) for h in hosts for g in h.gpus]
    metric("tfcluster_host_gpu_utilization_percent", "gauge", "GPU utilisation.", [(lb, g.util_pct) for lb, g in gpus])
    metric("tfcluster_host_gpu_memory_used_mib", "gauge", "GPU memory used by every process.",
           [(lb, g.mem_used_mb) for lb, g in gpus])
    metric("tfcluster_host_gpu_temperature_celsius", "gauge", "GPU temperature.", [(lb, g.temp_c) for lb, g in gpus])
    metric("tfcluster_host_gpu_power_watts", "gauge", "GPU power draw.", [(lb, g.power_w) for lb, g in gpus])
    metric("tfcluster_host_cpu_percent", "gauge", "Host CPU use.", [(_labels(host=h.name), h.cpu_pct) for h in hosts])
    metric("tfcluster_host_mem_percent", "gauge", "Host memory use.", [(_labels(host=h.name), h.mem_pct) for h in hosts])
    metric("tfcluster_host_reachable", "gauge", "1 when the host's agent stream is current.",
           [(_labels(host=h.name), 1.0 if h.reachable else 0.0) for h in hosts])
    rows: list[tuple[str, float | None]] = []
    for p in sorted(st.ps.values(), key=lambda p: p.name):
        rows += [(_labels(ps=p.name, host=p.host, direction="in", source="measured"), p.measured_in),
                 (_labels(ps=p.name, host=p.host, direction="out", source="measured"), p.measured_out),
                 (_labels(ps=p.name, host=p.host, direction="in", source="accounted"), p.accounted_in),
                 (_labels(ps=p.name, host=p.host, direction="out", source="accounted"), p.accounted_out)]
    metric("tfcluster_ps_bytes_per_second", "gauge", "PS task traffic, measured by the kernel or accounted by workers.",
           rows)
    metric("tfcluster_global_step", "gauge", "Highest global step reported.", [("", st.global_step)])
    metric("tfcluster_examples_per_second", "gauge", "Cluster examples per second (running tasks).",
           [("", st.examples_per_s)])
    metric("tfcluster_malformed_lines_total", "counter", "Telemetry lines that could not be parsed.",
           [("", float(st.malformed))])
    return "\n".join(out) + "\n"


class PrometheusExporter:
    def __init__(self, port: int, address: str = "127.0.0.1") -> None:
        self.text = "# no data yet\n"
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = exporter.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the dashboard owns the terminal

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="prometheus", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> PrometheusExporter:
        self._thread.start()
        return self

    def update(self, st: ClusterState) -> None:
        self.text = render(st)

    def wrap(self, source: StateSource) -> StateSource:
        return _Exporting(source, self)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Exporting:
    """A StateSource that refreshes the exporter's text on every poll."""

    def __init__(self, inner: StateSource, exporter: PrometheusExporter) -> None:
        self.inner = inner
        self.exporter = exporter

    def poll(self) -> ClusterState:
        st = self.inner.poll()
        self.exporter.update(st)
        return st

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]:
        return self.inner.task_log(job, task, lines)

    def close(self) -> None:
        self.inner.close()
