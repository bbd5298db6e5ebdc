"""Prometheus metrics, correct across gunicorn workers.

`semula serve` points PROMETHEUS_MULTIPROC_DIR at a fresh directory before gunicorn starts,
so every worker writes its samples there and /metrics sums them; without it (tests, a
single process) the default in-process registry is used.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

CALLS = Counter("semula_proxy_calls", "Proxied chat completions by outcome", ["outcome"])
_calls_by_outcome: dict[str, Counter] = {}
MISSES = Counter("semula_misses", "Requests that found no entry")
HELD = Gauge("semula_held_calls", "Calls held waiting for an answer", multiprocess_mode="livesum")
POLL_SECONDS = Histogram(
    "semula_poll_seconds",
    "Duration of one poll of the pending table",
    buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 2),
)
RELEASE_SECONDS = Histogram(
    "semula_answer_release_seconds",
    "From an answer's commit to the release of a call held for it",
    buckets=(0.005, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5),
)


def count_call(outcome: str) -> None:
    """CALLS for one outcome, its child kept: labels() takes a lock and builds a key every time."""
    child = _calls_by_outcome.get(outcome)
    if child is None:
        child = _calls_by_outcome[outcome] = CALLS.labels(outcome)
    child.inc()


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
