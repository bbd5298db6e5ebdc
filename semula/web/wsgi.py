"""The WSGI entry point gunicorn loads in each worker (never preloaded: gevent must patch first)."""

import sys
from collections.abc import Callable
from typing import Any

import gevent
import gevent.lock

from semula import heavy, logs, metrics
from semula.config import Settings
from semula.service import retention
from semula.web import create_app


def offload(function: Callable[[], Any]) -> Any:
    """Run a function in one of gevent's native threads and return its result here. What it raises is
    raised here, to the request's own error handling: gevent's pool would print it to stderr, with
    its text (a bundle's content, a database's message), outside the JSON log."""

    def captured() -> tuple[bool, Any]:
        try:
            return True, function()
        except Exception as exc:  # handed back whole, raised below
            return False, exc

    done, value = gevent.get_hub().threadpool.apply(captured)
    if not done:
        raise value
    return value


# One large body's pure work at a time in a worker (decision 0074): the others wait their turn in their
# greenlets, so a tenant's heavy requests share the GIL with the event loop, not with each other.
HEAVY_TURN = gevent.lock.Semaphore(1)
SWITCH_INTERVAL = 0.0005  # seconds (decision 0074)


def offload_heavy(function: Callable[[], Any]) -> Any:
    """offload(), one at a time: a large request's parse, check, fingerprint and comparisons."""
    with HEAVY_TURN:
        return offload(function)


settings = Settings.from_env()
logs.setup(settings.log_level, settings.secrets(), settings.log_format)
app = create_app(settings)
store = app.extensions["semula"]["store"]
if settings.change_check == "notify":
    # Before the first request: every context the app makes shares its Versions.
    app.extensions["semula"]["versions"].listen(store)
# Call-log rows are written every 0.1 s. SQLite's calls hold the whole process, so its writes (and the
# WAL checkpoints they trigger, with an fsync) run in one of gevent's native threads instead.
app.extensions["semula"]["calllog"].start(interval=0.1, offload=offload if store.blocks_process else None)
# Session calls counted together (decision 0068): SQLite's writes in a native thread too, so calls
# asked for meanwhile join the next write instead of waiting for the event loop.
app.extensions["semula"]["counts"].offload = offload if store.blocks_process else None
# The per-request metrics are counted in the worker and written with the same rhythm (semula/metrics.py).
metrics.start_batching(interval=0.1)
# A bundle import parses and checks for seconds of CPU: in a native thread, the event loop keeps
# serving this worker's other requests meanwhile (Python switches threads every few milliseconds).
app.extensions["semula"]["offload"] = offload
# A request with a large body: its parse, check, fingerprint and a miss's comparisons in a native thread
# too, one at a time, so one tenant's heavy requests do not hold the loop every other request waits on.
app.extensions["semula"]["proxy"].offload = offload_heavy
# And in another process, through that thread: the worker's helper (semula.heavy), started at its first
# large body, so the thread only waits on a pipe, without the GIL, for the request's check and fingerprint.
app.extensions["semula"]["proxy"].helper = heavy.Helper()
# With a native thread busy, the event loop waits for the GIL after each of its system calls until the
# thread is asked to let go: every switch interval (Python's default is 5 ms; a light request makes a
# dozen such calls). At 0.5 ms a light request's p99 beside heavy ones was about half as long.
sys.setswitchinterval(SWITCH_INTERVAL)
# Retention of the call log and of session counters: every worker prunes hourly in small batches
# (docs/retention.md).
retention.start_pruner(store, settings.log_retention_days, session_days=settings.session_retention_days)
