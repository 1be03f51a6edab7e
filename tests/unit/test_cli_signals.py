"""A CLI ended by SIGTERM or SIGHUP takes the Ctrl-C path (exit 130) and says which signal ended it, so that
an "interrupted" nobody asked for names its sender's signal; a Ctrl-C says plain "interrupted". Real signals,
sent to this process while `main()` runs a stand-in command (the commands' own paths are the integration
tests')."""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tfcluster import cli


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize(("sig", "said"), [(signal.SIGTERM, "interrupted (SIGTERM)"),
                                           (signal.SIGHUP, "interrupted (SIGHUP)"),
                                           (signal.SIGINT, "interrupted")])
def test_a_signal_ends_the_cli_with_130_naming_it(sig: signal.Signals, said: str, restored_handlers: None,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever pytest was started with

    def command(standalone_mode: bool) -> int:
        os.kill(os.getpid(), sig)
        time.sleep(30)  # the signal's handler raises long before
        return 0

    monkeypatch.setattr(cli, "app", command)
    # The handler raises in whatever Python frame the main thread runs next: with the collector on, that
    # can be a gc callback another library installed (hypothesis has one), where the exception is swallowed.
    gc.disable()
    try:
        with pytest.raises(SystemExit) as ended:
            cli.main()
    finally:
        gc.enable()
    assert ended.value.code == 130
    assert capsys.readouterr().err.strip() == said
