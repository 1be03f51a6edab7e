"""Ctrl-C as a terminal delivers it (SIGINT to this process's main thread), for tests of code that does its
work in threads: `press()` returns only once the main thread has taken it (its KeyboardInterrupt raised),
so whatever the pressing thread holds up (a host's progress report, say) keeps the code under test from
finishing first, however loaded the machine. No fixed wait orders the two."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

TAKEN_TIMEOUT_S = 30.0  # only bounds a failure: the main thread never took the interrupt


@contextmanager
def ctrl_c() -> Iterator[Callable[[], None]]:
    taken = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        taken.set()
        raise KeyboardInterrupt

    def press() -> None:
        main = threading.main_thread()
        assert main.ident is not None
        signal.pthread_kill(main.ident, signal.SIGINT)
        if threading.current_thread() is not main:
            assert taken.wait(TAKEN_TIMEOUT_S), "the main thread never took Ctrl-C"

    previous = signal.signal(signal.SIGINT, on_sigint)
    # The handler raises in whatever Python frame the main thread runs next. With the collector on, that can be
    # a gc callback another library installed (hypothesis has one), where the KeyboardInterrupt is swallowed
    # ("Exception ignored in gc_callback") and the code under test never sees its Ctrl-C.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield press
    finally:
        signal.signal(signal.SIGINT, previous)
        if collecting:
            gc.enable()
