"""Single flight across processes on one database (semula/service/flights.py), on SQLite and PostgreSQL.

Two stores on one database stand for two hosts; each call below runs as its process's leader
(flights.run, past the in-process single flight), so only the database joins them.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace

import pytest

from semula import dialects
from semula.core import errors
from semula.core.fingerprint import fingerprint
from semula.db import connect
from semula.parking import Parking
from semula.service import CLI, Context, entries, flights, projects, record_through
from tests.fake_upstream import FakeUpstream
from tests.integration.test_upstream import CANARY

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "same"}]}
FP = fingerprint(BODY)


@pytest.fixture
def fake():
    with closing(FakeUpstream()) as server:
        yield server


@pytest.fixture
def hosts(store, db_url, settings, fake):
    """Two contexts on one database, each with a store of its own: two hosts."""
    other = connect(db_url, pool_size=4)
    upstream = replace(settings, upstream_key=CANARY, upstream_url=fake.url, poll_interval=0.05)
    yield Context(store, upstream, CLI), Context(other, upstream, CLI)
    other.close()


@pytest.fixture
def shop(hosts):
    return projects.create(hosts[0], {"name": "shop", "record_through": True, "upstream_max_calls": 5})


def led(ctx: Context, project: dict) -> dict:
    """One call as its process's leader."""
    dialect = dialects.get(dialects.CHAT)
    return flights.run(
        ctx,
        project["id"],
        FP,
        1,
        lambda: record_through._forward_once(ctx, project, FP, BODY, BODY, dialect, None),
    )


def in_parallel(hosts, project, n: int) -> list:
    def call(i: int):
        try:
            return led(hosts[i % 2], project)
        except errors.SemulaError as exc:
            return exc

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(call, range(n)))


def test_identical_calls_on_two_hosts_make_one_provider_call_one_entry_one_revision(hosts, shop, fake):
    fake.delay = 0.5
    results = in_parallel(hosts, shop, 6)
    assert len(fake.calls) == 1
    assert {r["response"] for r in results} == {results[0]["response"]} and "upstream says" in (
        results[0]["response"]
    )
    entry = entries.get(hosts[0], entries.lookup(hosts[0], shop["id"], FP)["id"])
    assert len(entry["revisions"]) == 1
    assert hosts[1].store.one("get_upstream_usage", project_id=shop["id"])["calls"] == 1
    assert hosts[0].store.one("get_flight", project_id=shop["id"], fingerprint=FP, seq=1) is None


def test_waiters_on_other_hosts_get_the_leaders_error(hosts, shop, fake):
    fake.mode, fake.delay = "error", 0.5
    results = in_parallel(hosts, shop, 4)
    assert len(fake.calls) == 1
    assert {(r.status, r.code) for r in results} == {(502, "semula_upstream_error")}
    assert len({r.message for r in results}) == 1 and CANARY not in results[0].message
    # The failed flight is over: the next call tries again.
    fake.mode, fake.delay = "ok", 0.0
    assert "upstream says" in led(hosts[1], shop)["response"] and len(fake.calls) == 2


def test_a_waiter_takes_over_when_its_leader_stops_renewing(hosts, shop, fake):
    """A leader that died holds its flight only until its lease ends; then a waiter calls the provider."""
    now = time.time()
    held = dict(project_id=shop["id"], fingerprint=FP, seq=1, workspace_id="wsp_default")
    assert hosts[0].store.run("claim_flight", **held, holder="dead", until=now + 0.5, now=now)
    assert "upstream says" in led(hosts[1], shop)["response"]
    assert len(fake.calls) == 1
    assert hosts[0].store.one("get_flight", project_id=shop["id"], fingerprint=FP, seq=1) is None


def test_a_leader_renews_its_lease_while_the_call_runs(hosts, shop, fake, monkeypatch):
    monkeypatch.setattr(flights, "LEASE", 0.3)
    monkeypatch.setattr(flights, "RENEW_EVERY", 0.05)
    fake.delay = 1.0  # three leases and more
    results = in_parallel(hosts, shop, 4)
    assert len(fake.calls) == 1 and len({r["response"] for r in results}) == 1


def test_notices_wake_waiters_on_postgresql_and_polling_does_on_sqlite(hosts, shop, fake, store):
    """With a poll interval of a minute, a waiter on PostgreSQL is released by the flight's notice."""
    slow = replace(hosts[1], settings=replace(hosts[1].settings, poll_interval=60.0))
    if store.dialect == "sqlite":
        assert not store.on_notice("flights", lambda payload: None)
        return
    fake.delay = 0.5
    leader = threading.Thread(target=led, args=(hosts[0], shop))
    leader.start()
    while not fake.calls:  # the leader holds the flight and is at the provider
        time.sleep(0.01)
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(led, slow, shop)
        assert "upstream says" in waiter.result(timeout=20)["response"]
    leader.join()
    assert len(fake.calls) == 1


def test_ended_flights_are_pruned(hosts, shop):
    now = time.time()
    held = dict(project_id=shop["id"], fingerprint=FP, seq=1, workspace_id="wsp_default")
    hosts[0].store.run("claim_flight", **held, holder="old", until=now - flights.PRUNE_AFTER - 1, now=now)
    assert flights.prune(hosts[0].store, now) == 1
    assert flights.prune(hosts[0].store, now) == 0


def test_a_call_parked_on_one_host_is_released_by_an_answer_through_another(hosts, shop, store, db_url):
    """PostgreSQL: by the resolution's notice, whatever the poll interval; SQLite: by the poll."""
    ctx, other = hosts
    projects.update(ctx, "shop", {"record_through": False})
    interval = 60.0 if store.dialect == "postgresql" else 0.05
    parking = Parking(store, interval)
    now = time.time()
    pending_id = "pnd_flighttest"
    store.run(
        "insert_pending",
        id=pending_id,
        workspace_id="wsp_default",
        project_id=shop["id"],
        fingerprint=FP,
        model="gpt-4o",
        request="{}",
        stream=0,
        now=now,
        api="chat",
        seq=1,
        held_until=now + 30,
        max_misses=10,
    )
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(parking.hold, pending_id, 30)
        while not parking.held:
            time.sleep(0.01)
        other.store.run(
            "resolve_pending",
            id=pending_id,
            workspace_id="wsp_default",
            status="cancelled",
            entry_id=None,
            now=time.time(),
        )
        assert held.result(timeout=20) == ("cancelled", None)
    parking.close()


def test_a_postgresql_flight_claim_and_end_relax_only_their_own_commit(hosts, shop, db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("synchronous_commit is PostgreSQL's")
    import psycopg

    from semula.db.postgres import PG_QUERIES

    key = {"project_id": shop["id"], "fingerprint": FP, "seq": 1, "holder": "h"}
    claim = {**key, "workspace_id": "wsp_default", "until": time.time() + 60, "now": time.time()}
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(PG_QUERIES["claim_flight"], claim).rowcount == 1
        assert conn.execute(PG_QUERIES["claim_flight"], {**claim, "holder": "other"}).rowcount == 0
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert conn.execute(PG_QUERIES["end_flight"], key).rowcount == 1
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"


def test_a_shared_error_keeps_what_the_app_sees_and_nothing_else():
    budget = errors.UpstreamBudget("spent", param="upstream_max_calls")
    shared = flights._shared(json.dumps(flights._shareable(budget)))
    assert (shared.status, shared.code, shared.type, shared.message, shared.param) == (
        429,
        "semula_upstream_budget",
        "rate_limit_error",
        "spent",
        "upstream_max_calls",
    )
    other = flights._shared(json.dumps(flights._shareable(KeyError(CANARY))))
    assert (other.status, other.code) == (502, "semula_upstream_error") and CANARY not in other.message
