"""`check`'s watchdog on one probe (orchestrator/run/probe_stream.py), over a real local shell: a probe that
says it is importing TensorFlow gets the import's budget on top of the probe's timeout; one silent past
its timeout is ended and named a timeout. Time is what is under test: the budgets are parameters here."""

from __future__ import annotations

import time

import pytest

from orchestrator.errors import HostError
from orchestrator.run.probe_stream import DATE_COMMAND, read_probe
from orchestrator.transport.local import LocalTransport
from training.probes.host_probe import IMPORTING_TF


def test_a_probe_importing_tensorflow_gets_the_imports_budget_beyond_its_timeout() -> None:
    # the "import" (a sleep) outlasts the probe's timeout: only the import's budget lets it finish
    script = f'{DATE_COMMAND}\necho "{IMPORTING_TF}"\nsleep 3\necho "{{}}"'
    out = read_probe("h", LocalTransport("h"), ["/bin/sh", "-c", script], timeout=2.0, clock=time.time,
                     tf_import_s=60.0)
    assert out.lines == ["{}"]  # neither the clock's line nor the marker
    assert out.remote_clock > 0 and out.sent <= out.clock_line_at


def test_a_silent_probe_is_ended_at_its_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(HostError) as err:
        read_probe("h", LocalTransport("h"), ["/bin/sh", "-c", "sleep 60"], timeout=1.0, clock=time.time,
                   tf_import_s=60.0)
    assert err.value.reason == "timeout" and "within 1s" in str(err.value) and "TensorFlow" not in str(err.value)
    assert time.monotonic() - started < 30  # ended by the watchdog, not by the command


def test_an_import_past_its_budget_is_ended_and_says_so() -> None:
    script = f'echo "{IMPORTING_TF}"\nsleep 60'
    with pytest.raises(HostError) as err:
        read_probe("h", LocalTransport("h"), ["/bin/sh", "-c", script], timeout=1.0, clock=time.time,
                   tf_import_s=1.0)
    assert err.value.reason == "timeout" and "1s more for TensorFlow's import" in str(err.value)
