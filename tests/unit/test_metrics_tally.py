"""Per-request metrics counted in the worker and written in one go (semula.metrics.Tally): a flush
writes exactly what counting each request directly would have written."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from semula import metrics

LATENCIES = [0.0001, 0.0005, 0.00051, 0.001, 0.003, 0.02, 0.1, 0.1000001, 4.9, 30.0, 7200.0]


def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in REGISTRY.collect()
        if family.name in ("semula_requests", "semula_request_seconds", "semula_proxy_calls")
        for s in family.samples
        if not s.name.endswith("_created")
    }


def moved(before, after):
    return {k: round(v - before.get(k, 0.0), 9) for k, v in after.items() if v != before.get(k, 0.0)}


@pytest.fixture
def batched(monkeypatch):
    monkeypatch.setattr(metrics, "_tally", metrics.Tally())


def count(surface="proxy"):
    for seconds in LATENCIES:
        metrics.count_request(surface, "/tally-test", 200, "hit", seconds)
        metrics.count_call("tally-test")


def counted_directly(monkeypatch, surface, as_surface, times=1):
    """What counting each request would write, under `as_surface`'s label, `times` over."""
    monkeypatch.setattr(metrics, "_tally", None)
    before = samples()
    count(surface)
    rename = {("surface", surface): ("surface", as_surface)}
    return {
        (name, tuple(rename.get(label, label) for label in labels)): v * times
        for (name, labels), v in moved(before, samples()).items()
    }


def test_a_flush_writes_what_counting_each_request_would_have(monkeypatch):
    expected = counted_directly(monkeypatch, "tally-direct", "tally-batched")
    monkeypatch.setattr(metrics, "_tally", metrics.Tally())
    before = samples()
    count("tally-batched")
    assert moved(before, samples()) == {}  # nothing written until the flush
    metrics.flush()
    batched = moved(before, samples())
    # The calls counter moved by the same amount in both runs, under the same labels.
    assert batched == expected and len(batched) > len(LATENCIES) // 2


def test_the_buckets_are_the_ones_histogram_observe_would_choose(batched):
    reference = Histogram(
        "tally_reference", "", buckets=metrics.LATENCY_BOUNDS[:-1], registry=CollectorRegistry()
    )
    for seconds in LATENCIES:
        reference.observe(seconds)
        metrics._tally.observe("x", seconds)
    counts = metrics._tally.latency["x"]
    assert counts[0] == pytest.approx(sum(LATENCIES))
    assert counts[1:] == [b.get() for b in reference._buckets]


def test_flushing_without_batching_writes_nothing_and_keeps_nothing(monkeypatch):
    monkeypatch.setattr(metrics, "_tally", None)
    before = samples()
    metrics.flush()
    assert moved(before, samples()) == {}


def test_a_flush_that_fails_part_way_writes_the_rest_at_the_next_flush(monkeypatch):
    expected = counted_directly(monkeypatch, "tally-direct-again", "tally-failing", times=2)
    monkeypatch.setattr(metrics, "_tally", metrics.Tally())
    before = samples()
    count("tally-failing")
    real = metrics._latency_child

    def failing(surface):
        raise OSError("No space left on device")

    monkeypatch.setattr(metrics, "_latency_child", failing)  # the counters are written, then it fails
    with pytest.raises(OSError):
        metrics.flush()
    assert 0 < len(moved(before, samples())) < len(expected)
    count("tally-failing")  # counted while the disk was full
    monkeypatch.setattr(metrics, "_latency_child", real)
    metrics.flush()
    assert moved(before, samples()) == pytest.approx(expected)
