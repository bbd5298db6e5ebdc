"""The gauges read from the database, with several hosts on it: one host serves them (the `metrics`
lease), so a sum over every host's /metrics counts each project once. Both dialects."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from semula import metrics
from semula.service import pending, projects
from tests.helpers import metric_samples

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def scrape(collector: metrics.StoreCollector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    return metric_samples(generate_latest(registry).decode())


def summed(pages: list[dict], name: str) -> float:
    """What sum(name) gives over every host's page."""
    return sum(v for page in pages for (n, _), v in page.items() if n == name)


def test_one_host_serves_the_database_gauges_and_another_takes_over_when_it_is_gone(ctx, store):
    shop = projects.get_row(ctx, projects.create(ctx, {"name": "shop"})["name"])
    for n in range(3):
        pending.park(ctx, shop, f"v1:{n}", REQUEST, False)
    hosts = [metrics.StoreCollector(store, holder=f"host-{n}") for n in range(3)]
    for _ in range(2):  # scrape after scrape, the same host serves them
        pages = [scrape(host) for host in hosts]
        assert summed(pages, "semula_database_gauges_exporter") == 1
        assert summed(pages, "semula_parked_calls") == 3
        assert pages[0][("semula_database_gauges_exporter", frozenset())] == 1
    # host-0 is gone: once its lease lapses (here at once), the next host scraped serves them.
    assert store.run("take_lease", name="metrics", holder="host-0", until=0, now=0)
    pages = [scrape(host) for host in hosts[1:]]
    assert summed(pages, "semula_database_gauges_exporter") == 1
    assert summed(pages, "semula_parked_calls") == 3
    assert pages[0][("semula_database_gauges_exporter", frozenset())] == 1
