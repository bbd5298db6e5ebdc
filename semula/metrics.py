"""Prometheus metrics, correct across gunicorn workers.

`semula serve` points PROMETHEUS_MULTIPROC_DIR at a fresh directory before gunicorn starts,
so every worker writes its samples there and /metrics sums them; without it (tests, a
single process) the default in-process registry is used. The gauges that describe the database
(parked calls, record-through budgets) are read from it at scrape time by `StoreCollector`.

Label values are bounded: route templates, statuses, outcomes, kinds, and project names (which the
operator bounds); never a fingerprint, a call id or a token. Every series is in docs/operations.md.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

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
from prometheus_client.core import GaugeMetricFamily, Metric

from semula import db

logger = logging.getLogger("semula.metrics")

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
REQUESTS = Counter(
    "semula_requests", "HTTP requests by route template, status and outcome", ["route", "status", "outcome"]
)
_requests: dict[tuple[str, int, str], Any] = {}
REQUEST_SECONDS = Histogram(
    "semula_request_seconds",
    "Time to the response, by surface (proxy: the OpenAI routes; api: everything else), held calls included",
    ["surface"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120, 600, 3600),
)
_latency: dict[str, Any] = {}
PENDING_EVENTS = Counter(
    "semula_pending_events",
    "Parked-call lifecycle events: parked, claimed, answered, cancelled, released, timeout, app_gone",
    ["event"],
)
ANSWERS = Counter("semula_answers", "Answers saved for parked calls, by actor kind", ["actor"])
RECORD_THROUGH = Counter(
    "semula_record_through_calls",
    "Record-through misses by project and result (forwarded, budget, dry_run, error)",
    ["project", "result"],
)
DATABASE_ERRORS = Counter("semula_database_errors", "Database errors by kind", ["kind"])
POOL_IN_USE = Gauge(
    "semula_db_pool_in_use", "Database connections checked out (PostgreSQL)", multiprocess_mode="livesum"
)
ANSWERER_RUNS = Counter(
    "semula_answerer_runs", "Answerer daemon runs by result (served by the daemon itself)", ["result"]
)


def count_call(outcome: str) -> None:
    """CALLS for one outcome, its child kept: labels() takes a lock and builds a key every time."""
    child = _calls_by_outcome.get(outcome)
    if child is None:
        child = _calls_by_outcome[outcome] = CALLS.labels(outcome)
    child.inc()


def count_request(surface: str, route: str, status: int, outcome: str, seconds: float) -> None:
    """One served request: its counter and its latency, children kept as in count_call."""
    key = (route, status, outcome)
    child = _requests.get(key)
    if child is None:
        child = _requests[key] = REQUESTS.labels(route, str(status), outcome)
    child.inc()
    hist = _latency.get(surface)
    if hist is None:
        hist = _latency[surface] = REQUEST_SECONDS.labels(surface)
    hist.observe(seconds)


def pending_event(event: str) -> None:
    PENDING_EVENTS.labels(event).inc()


def _database_error(kind: str) -> None:
    DATABASE_ERRORS.labels(kind).inc()


db.ERROR_LISTENERS.append(_database_error)


class StoreCollector:
    """Gauges read from the database at scrape time: one query per scrape, none per request."""

    def __init__(self, store: db.Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        labels = ["workspace", "project"]
        parked = GaugeMetricFamily("semula_parked_calls", "Calls parked and not yet resolved", labels=labels)
        oldest = GaugeMetricFamily(
            "semula_parked_oldest_age_seconds", "Age of the oldest parked call (0 when none)", labels=labels
        )
        timeout = GaugeMetricFamily(
            "semula_project_record_timeout_seconds", "The project's record_timeout", labels=labels
        )
        expired = GaugeMetricFamily(
            "semula_claims_expired", "Parked calls whose claim lease ran out unanswered", labels=labels
        )
        calls = GaugeMetricFamily("semula_upstream_calls", "Record-through calls spent", labels=labels)
        tokens = GaugeMetricFamily("semula_upstream_tokens", "Record-through tokens spent", labels=labels)
        calls_left = GaugeMetricFamily(
            "semula_upstream_calls_left", "Record-through calls left (projects with a cap)", labels=labels
        )
        tokens_left = GaugeMetricFamily(
            "semula_upstream_tokens_left", "Record-through tokens left (projects with a cap)", labels=labels
        )
        at = time.time()
        try:
            rows = self.store.all("metrics_projects", now=at)
        except db.DatabaseError as exc:
            logger.warning(
                "metrics read failed", extra={"error": type(exc).__name__, "detail": exc.describe()}
            )
            return
        for row in rows:
            key = [row["workspace"], row["project"]]
            parked.add_metric(key, row["parked"])
            oldest.add_metric(key, max(0.0, at - row["oldest"]) if row["oldest"] is not None else 0.0)
            timeout.add_metric(key, row["record_timeout"])
            expired.add_metric(key, row["claims_expired"])
            calls.add_metric(key, row["upstream_calls"])
            tokens.add_metric(key, row["upstream_tokens"])
            if row["upstream_max_calls"] is not None:
                calls_left.add_metric(key, max(0, row["upstream_max_calls"] - row["upstream_calls"]))
            if row["upstream_max_tokens"] is not None:
                tokens_left.add_metric(key, max(0, row["upstream_max_tokens"] - row["upstream_tokens"]))
        yield from (parked, oldest, timeout, expired, calls, tokens, calls_left, tokens_left)


def start_sampler(store: db.Store, interval: float = 5.0) -> None:
    """Sample this process's pool use every interval seconds (a greenlet under gevent)."""
    in_use = getattr(store, "pool_in_use", None)
    if in_use is None:
        return

    def run() -> None:
        while True:
            value = in_use()
            if value is not None:
                POOL_IN_USE.set(value)
            time.sleep(interval)

    threading.Thread(target=run, name="semula-metrics", daemon=True).start()


def render(store: db.Store | None = None) -> tuple[bytes, str]:
    """The exposition text: every worker's samples (or this process's), then the database gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    if store is not None:
        extra = CollectorRegistry()
        extra.register(StoreCollector(store))
        body += generate_latest(extra)
    return body, CONTENT_TYPE_LATEST
