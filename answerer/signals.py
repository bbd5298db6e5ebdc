"""Two-stage stop (rq's worker, procrastinate's signals.on_stop): first signal finishes, second kills."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_stop(first: Callable[[], None], second: Callable[[], None]) -> Iterator[None]:
    """Call `first` on the first SIGTERM or SIGINT and `second` on any later one; restore handlers after.

    The handler runs in the main thread between bytecodes, possibly inside a log call or a lock the
    main thread holds; so it and the callbacks only set events, and never log.
    """
    received = 0

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        (first if received == 1 else second)()

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
