"""Prometheus metrics, correct across gunicorn workers.

`semula serve` points PROMETHEUS_MULTIPROC_DIR at a fresh directory before gunicorn starts,
so every worker writes its samples there and /metrics sums them; without it (tests, a
single process) the default in-process registry is used. The gauges that describe the database
(parked calls, record-through budgets) are read from it at scrape time by `StoreCollector`, on one
host of those that share the database: the holder of the `metrics` lease (decision 0057).

Label values are bounded: route templates, statuses, outcomes, kinds, and project names (which the
operator bounds); never a fingerprint, a call id or a token. Every series is in docs/operations.md.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import socket
import threading
import time
import weakref
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
FAULTS = Counter("semula_faults", "Faults injected by X-Semula-Fault, by kind", ["kind"])
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
    "Parked-call lifecycle events: parked, claimed, answered, cancelled, released, timeout, abandoned, "
    "app_gone",
    ["event"],
)
# A worker's kept answers (semula/service/hits.py), read off its caches at each flush (KeptHits).
KEPT_HITS = Counter(
    "semula_kept_hits",
    "Replay hits answered from a worker's kept answers, without reading the entry (a share of "
    'semula_proxy_calls_total{outcome="hit"})',
)
KEPT_EVICTED = Counter(
    "semula_kept_evicted", "Kept answers and noted requests dropped to stay within SEMULA_HIT_CACHE_MB"
)
KEPT_BYTES = Gauge(
    "semula_kept_bytes",
    "Bytes the workers' kept answers hold, counted against SEMULA_HIT_CACHE_MB each",
    multiprocess_mode="livesum",
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


def _call_child(outcome: str) -> Any:
    """CALLS for one outcome, its child kept: labels() takes a lock and builds a key every time."""
    child = _calls_by_outcome.get(outcome)
    if child is None:
        child = _calls_by_outcome[outcome] = CALLS.labels(outcome)
    return child


def _request_child(key: tuple[str, int, str]) -> Any:
    child = _requests.get(key)
    if child is None:
        child = _requests[key] = REQUESTS.labels(key[0], str(key[1]), key[2])
    return child


def _latency_child(surface: str) -> Any:
    hist = _latency.get(surface)
    if hist is None:
        hist = _latency[surface] = REQUEST_SECONDS.labels(surface)
    return hist


class Tally:
    """The per-request series counted in plain dicts and written to prometheus_client in one go.

    In the server each increment of a prometheus_client value takes a lock, asks the kernel for the
    process id and writes into a memory-mapped file: the three series every proxied request moves
    cost ~8 µs of a replay hit's ~120 µs of server CPU under load, measured with and without this
    side by side (bench/RESULTS.md, session 8). Counted here,
    they cost a dict update each, and `flush()` writes each label set's sum once per interval. A
    scrape therefore sees the other workers' requests of the last interval (0.1 s in the server) a
    little later; the worker that serves the scrape flushes its own first. Only the gevent worker
    batches (semula/web/wsgi.py): its flusher and its requests take turns on one thread, so a swap of
    the dicts cannot lose a count.
    """

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.requests: dict[tuple[str, int, str], int] = {}
        self.latency: dict[str, list[float]] = {}  # surface -> [sum, count per bucket ...]

    def observe(self, surface: str, seconds: float) -> None:
        counts = self.latency.get(surface)
        if counts is None:
            counts = self.latency[surface] = [0.0] * (len(LATENCY_BOUNDS) + 1)
        counts[0] += seconds
        # The bucket Histogram.observe() counts it in: the first upper bound at or above it.
        counts[1 + bisect.bisect_left(LATENCY_BOUNDS, seconds)] += 1

    def flush(self) -> None:
        """Write the counts, each taken out once written: a failure part-way leaves here only what
        was not written yet, and flush() counts it again."""
        for outcome in list(self.calls):
            _call_child(outcome).inc(self.calls[outcome])
            del self.calls[outcome]
        for key in list(self.requests):
            _request_child(key).inc(self.requests[key])
            del self.requests[key]
        for surface in list(self.latency):
            counts = self.latency[surface]
            hist = _latency_child(surface)
            if counts[0]:
                hist._sum.inc(counts[0])
                counts[0] = 0.0
            for index, bucket in enumerate(hist._buckets, 1):
                if counts[index]:
                    bucket.inc(counts[index])
                    counts[index] = 0
            del self.latency[surface]

    def add(self, other: Tally) -> None:
        """Count another tally's counts here too."""
        for outcome, n in other.calls.items():
            self.calls[outcome] = self.calls.get(outcome, 0) + n
        for key, n in other.requests.items():
            self.requests[key] = self.requests.get(key, 0) + n
        for surface, counts in other.latency.items():
            mine = self.latency.setdefault(surface, [0.0] * len(counts))
            for index, n in enumerate(counts):
                mine[index] += n


class KeptHits:
    """The kept-hit caches of this process, whose counts are written to their series at each flush.

    A cache counts in plain ints (HitCache.served, .evicted), which cost a request nothing of
    prometheus_client's; what they moved since the last flush is added to the counters, and the
    bytes they hold set the gauge. Caches are held weakly: an app a test made and dropped goes with
    its cache.
    """

    def __init__(self) -> None:
        self._written: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

    def watch(self, cache: Any) -> None:
        self._written.setdefault(cache, (0, 0))

    def flush(self) -> None:
        held = 0
        for cache, (served, evicted) in list(self._written.items()):
            now_served, now_evicted = cache.served, cache.evicted
            if now_served != served:
                KEPT_HITS.inc(now_served - served)
            if now_evicted != evicted:
                KEPT_EVICTED.inc(now_evicted - evicted)
            self._written[cache] = (now_served, now_evicted)
            held += cache.held_bytes
        KEPT_BYTES.set(held)


KEPT = KeptHits()


def watch_kept(cache: Any) -> None:
    """Report a HitCache's kept hits, evictions and bytes on /metrics (written at each flush)."""
    KEPT.watch(cache)


LATENCY_BOUNDS = (*REQUEST_SECONDS._upper_bounds,)
_tally: Tally | None = None  # counts not yet written, when batched


def count_call(outcome: str) -> None:
    """One proxied call's outcome."""
    if _tally is not None:
        _tally.calls[outcome] = _tally.calls.get(outcome, 0) + 1
    else:
        _call_child(outcome).inc()


def count_request(surface: str, route: str, status: int, outcome: str, seconds: float) -> None:
    """One served request: its counter and its latency."""
    key = (route, status, outcome)
    if _tally is not None:
        _tally.requests[key] = _tally.requests.get(key, 0) + 1
        _tally.observe(surface, seconds)
        return
    _request_child(key).inc()
    _latency_child(surface).observe(seconds)


def flush() -> None:
    """Write what was counted since the last flush (when batched), and the kept hits' series."""
    global _tally
    try:
        if _tally is not None:
            tally, _tally = _tally, Tally()
            try:
                tally.flush()
            except BaseException:
                _tally.add(tally)  # not written (a full disk): written with the next interval's counts
                raise
    finally:
        KEPT.flush()


def start_batching(interval: float = 0.1) -> None:
    """Count the per-request series in this process and write them every interval seconds (a
    greenlet under gevent), and at exit."""
    global _tally
    _tally = Tally()

    def run() -> None:
        while True:
            time.sleep(interval)
            try:
                flush()
            except Exception:  # a bug must not stop the metrics for the life of the process
                logger.exception("metrics flush failed")

    threading.Thread(target=run, name="semula-metrics-flush", daemon=True).start()
    atexit.register(flush)


def pending_event(event: str) -> None:
    PENDING_EVENTS.labels(event).inc()


def _database_error(kind: str) -> None:
    DATABASE_ERRORS.labels(kind).inc()


db.ERROR_LISTENERS.append(_database_error)


# s the host that served the database's gauges keeps serving them without another scrape: longer
# than any sensible scrape interval, short enough that another host takes over soon after it is gone.
EXPORTER_LEASE = 120.0


def server_id() -> str:
    """This server (a gunicorn master and its workers; or this process alone), among all of the hosts."""
    shared = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))  # a worker of `semula serve`
    return f"{socket.gethostname()}/{os.getppid() if shared else os.getpid()}"


class StoreCollector:
    """Gauges read from the database at scrape time: one query per scrape, none per request.

    Several hosts on one database would each export the same values, and a sum() over them would
    count them once per host. So only the host that holds the `metrics` lease serves them (taken at a
    scrape when free or lapsed, renewed by each scrape of its holder), and every host says whether it
    is that one (`semula_database_gauges_exporter`): when it is gone, another host's next scrape past
    EXPORTER_LEASE takes over.
    """

    def __init__(self, store: db.Store, holder: str | None = None):
        self.store = store
        self.holder = holder or server_id()

    def collect(self) -> Iterator[Metric]:
        exporter = GaugeMetricFamily(
            "semula_database_gauges_exporter",
            "1 when this host serves the gauges read from the database (one host of those sharing it does)",
        )
        try:
            at = time.time()
            lease = dict(name="metrics", holder=self.holder, until=at + EXPORTER_LEASE, now=at)
            serving = bool(self.store.run("take_lease", **lease))
        except db.DatabaseError as exc:
            logger.warning(
                "metrics read failed", extra={"error": type(exc).__name__, "detail": exc.describe()}
            )
            serving = False
        exporter.add_metric([], 1 if serving else 0)
        yield exporter
        if serving:
            yield from self._gauges()

    def _gauges(self) -> Iterator[Metric]:
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
        abandoned = GaugeMetricFamily(
            "semula_parked_abandoned_calls",
            "Parked calls nobody waits for (their client went away); still answerable",
            labels=labels,
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
            abandoned.add_metric(key, row["abandoned"])
            calls.add_metric(key, row["upstream_calls"])
            tokens.add_metric(key, row["upstream_tokens"])
            if row["upstream_max_calls"] is not None:
                calls_left.add_metric(key, max(0, row["upstream_max_calls"] - row["upstream_calls"]))
            if row["upstream_max_tokens"] is not None:
                tokens_left.add_metric(key, max(0, row["upstream_max_tokens"] - row["upstream_tokens"]))
        yield from (parked, oldest, timeout, expired, abandoned, calls, tokens, calls_left, tokens_left)


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
    try:
        flush()  # this worker's own counts are current; the others' at most one interval behind
    except Exception:  # a bug here must not cost the scrape the series written so far
        logger.exception("metrics flush failed")
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
