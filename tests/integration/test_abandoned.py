"""Abandoned calls (issue 49, docs/decisions/0063-abandoned-calls.md): a parked call nobody waits for
any more shows as abandoned in the service, REST, the CLI, the dashboard and the metrics, and stays
answerable. Both dialects; tests/acceptance/test_record_replay.py kills a real client."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from semula import metrics
from semula.parking import GONE, Parking, client_gone
from semula.service import pending as pending_service
from semula.service import projects
from semula.surfaces.cli import main
from semula.web import create_app
from tests.agent_helpers import in_process_client, park
from tests.helpers import metric_samples, wait_for


def listed(ctx, **filters) -> dict[str, bool]:
    """The pending calls listed with these filters: id -> abandoned."""
    return {p["id"]: p["abandoned"] for p in pending_service.list_pending(ctx, **filters)["data"]}


@pytest.fixture
def shop(ctx):
    projects.create(ctx, {"name": "shop"})
    return "shop"


def test_a_held_call_whose_client_went_away_is_let_go_abandoned_and_still_answerable(ctx, store, shop):
    pending_id, other = park(ctx, shop, "left"), park(ctx, shop, "waited for")
    parking = Parking(store, 60.0)  # the loop's own look is a minute away: check_clients is called here
    client_left = threading.Event()
    try:
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(parking.hold, pending_id, 60, client_left.is_set)
            waited = pool.submit(parking.hold, other, 60, lambda: False)
            wait_for(lambda: parking.held == 2, what="two holds")
            assert parking.check_clients() == 0
            assert listed(ctx) == {pending_id: False, other: False}
            client_left.set()
            assert parking.check_clients() == 1
            assert held.result(timeout=10) == (GONE, None)
            assert listed(ctx) == {pending_id: True, other: False}
            assert listed(ctx, abandoned=True) == {pending_id: True}
            assert listed(ctx, abandoned=False) == {other: False}
            answered = pending_service.answer(ctx, pending_id, {"content": "recorded all the same"})
            assert answered["status"] == "answered" and answered["entry_id"] and not answered["abandoned"]
            assert listed(ctx, status="all", abandoned=True) == {}
            pending_service.answer(ctx, other, {"content": "for the one waiting"})
            # Released by this poll, or on PostgreSQL perhaps already by the answer's notice.
            released = parking.poll_once()
            assert waited.result(timeout=10)[0] == "answered"
            assert released == 1 or store.dialect == "postgresql"
    finally:
        parking.close()


def test_a_call_whose_holder_stopped_renewing_is_abandoned_and_a_new_client_takes_it_back(
    ctx, store, shop, monkeypatch
):
    monkeypatch.setattr(pending_service, "HOLD_LEASE", 0.5)
    row = projects.get_row(ctx, shop)
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "killed worker"}]}
    pending_id = pending_service.park(ctx, row, "v1:killed", request, False)
    assert listed(ctx) == {pending_id: False}
    # Nobody renews it (its worker was killed): once the lease lapses, nobody waits for it.
    wait_for(lambda: listed(ctx)[pending_id], timeout=10, what="the lease to lapse")
    # A client sending the same request again joins the row and waits for it.
    monkeypatch.setattr(pending_service, "HOLD_LEASE", 60.0)
    assert pending_service.park(ctx, row, "v1:killed", request, False) == pending_id
    assert listed(ctx) == {pending_id: False}


def test_renewal_keeps_held_calls_waited_for_and_a_timeout_lets_go(ctx, store, shop, monkeypatch):
    pending_id = park(ctx, shop, "renewed")
    store.run("hold_among", ids=json.dumps([pending_id]), until=time.time() - 1)  # lapsed
    parking = Parking(store, 60.0)
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(parking.hold, pending_id, 1.0)
            wait_for(lambda: parking.held == 1, what="the hold")
            parking.renew()
            assert listed(ctx) == {pending_id: False}
            assert held.result(timeout=10) is None  # the hold timed out: the client got its 504
        assert listed(ctx) == {pending_id: True}
    finally:
        parking.close()


def test_rest_cli_dashboard_and_metrics_show_abandoned_calls(app, client, ctx, store, shop, make_token):
    left, waited = park(ctx, shop, "left"), park(ctx, shop, "waited for")
    pending_service.hold_among(store, [left], time.time())
    editor = make_token("editor", scope="record")

    rest = client.get("/api/v1/pending?abandoned=true", headers=editor).json
    assert [(p["id"], p["abandoned"]) for p in rest["data"]] == [(left, True)]
    rest = client.get("/api/v1/pending?abandoned=false", headers=editor).json
    assert [(p["id"], p["abandoned"]) for p in rest["data"]] == [(waited, False)]
    refused = client.get("/api/v1/pending?abandoned=maybe", headers=editor)
    assert refused.status_code == 400 and refused.json["error"]["param"] == "abandoned"

    cli_client = in_process_client(app, editor)
    human = CliRunner().invoke(main, ["pending"], obj={"client": cli_client})
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["ID", "PROJECT", "API", "MODEL", "STATUS", "CLIENT", "AGE", "CLAIMED"]
    assert {line.split()[0]: line.split()[5] for line in lines[1:]} == {left: "abandoned", waited: "waiting"}
    only = CliRunner().invoke(main, ["pending", "--abandoned", "--json"], obj={"client": cli_client})
    assert [p["id"] for p in json.loads(only.stdout)["data"]] == [left]

    registry = CollectorRegistry()
    registry.register(metrics.StoreCollector(store, holder="test"))
    samples = metric_samples(generate_latest(registry).decode())
    gauge = {
        dict(labels)["project"]: v
        for (n, labels), v in samples.items()
        if n == "semula_parked_abandoned_calls"
    }
    assert gauge == {"shop": 1}


def test_the_dashboard_labels_abandoned_calls(ctx, store, settings, shop):
    ui_client = create_app(replace(settings, auth=False), store).test_client()
    left, waited = park(ctx, shop, "left"), park(ctx, shop, "waited for")
    pending_service.hold_among(store, [left], time.time())
    queue = ui_client.get("/ui/p/shop/pending").get_data(as_text=True)
    rows = {line for line in queue.splitlines() if "pnd_" in line and "href" in line and "stream" not in line}
    assert any(left in r and ">abandoned<" in r for r in rows)
    assert not any(waited in r and ">abandoned<" in r for r in rows)
    assert ">abandoned<" in ui_client.get(f"/ui/pending/{left}").get_data(as_text=True)
    assert ">abandoned<" not in ui_client.get(f"/ui/pending/{waited}").get_data(as_text=True)


def test_client_gone_reads_a_closed_connection_as_gone_and_an_open_one_not():
    assert client_gone(None) is None
    ours, theirs = socket.socketpair()
    with ours, theirs:
        gone = client_gone(ours)
        assert gone is not None and gone() is False
        theirs.sendall(b"GET / HTTP/1.1\r\n")  # a pipelined request: its client still waits
        assert gone() is False and ours.gettimeout() is None
        theirs.close()
        assert gone() is False  # the pipelined bytes come first
        ours.recv(100)
        assert gone() is True


def test_a_call_held_by_two_processes_is_abandoned_only_when_the_last_holder_lets_go(ctx, store, shop):
    """Identical requests to two workers (or hosts) share one pending row: one's client going away
    leaves the call waited for by the other, with no window in which it shows as abandoned; the
    other's going lets it go (decision 0074, migration 0027)."""
    row = projects.get_row(ctx, shop)
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "asked twice"}]}

    def send():  # a request parking the call, or joining it
        return pending_service.park(ctx, row, "v1:twice", request, False)

    pending_id = send()
    assert send() == pending_id
    first, second = Parking(store, 60.0), Parking(store, 60.0)  # two processes' holders
    first_left, second_left = threading.Event(), threading.Event()
    try:
        with ThreadPoolExecutor(2) as pool:
            held_first = pool.submit(first.hold, pending_id, 60, first_left.is_set)
            held_second = pool.submit(second.hold, pending_id, 60, second_left.is_set)
            wait_for(lambda: first.held == 1 and second.held == 1, what="both holds")
            first_left.set()
            assert first.check_clients() == 1
            assert held_first.result(timeout=10) == (GONE, None)
            assert listed(ctx) == {pending_id: False}  # the other process's client still waits
            second_left.set()
            assert second.check_clients() == 1
            assert held_second.result(timeout=10) == (GONE, None)
            assert listed(ctx) == {pending_id: True}
            # A client sending it again takes it back, as its one holder: its timeout lets it go again.
            again, epoch = pending_service.park_held(ctx, row, "v1:twice", request, False)
            assert again == pending_id and listed(ctx) == {pending_id: False}
            assert pool.submit(first.hold, pending_id, 0.1, None, epoch).result(timeout=10) is None
            assert listed(ctx) == {pending_id: True}
    finally:
        first.close()
        second.close()


def holders(ctx, pending_id) -> int:
    return ctx.store.one("get_pending", id=pending_id, workspace_id=ctx.principal.workspace_id)["holders"]


@pytest.mark.parametrize("first_goes", ["after its renewal", "before its renewal"])
def test_a_holder_that_could_not_renew_is_counted_again_and_the_count_stays_exact(
    ctx, store, shop, first_goes
):
    """A process whose renewals failed past the lease (its database unreachable) still holds the call; a
    request joining it meanwhile counts from 1 in a new epoch. The first process's next renewal adds its
    holder back, so the joiner going leaves the call waited for; a holder going before that renewal takes
    nothing from the new count it is not in (decision 0074, migration 0029)."""
    row = projects.get_row(ctx, shop)
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "renewals failed"}]}

    def send():  # a request parking the call, or joining it: (id, epoch)
        return pending_service.park_held(ctx, row, "v1:unrenewed", request, False)

    pending_id, first_epoch = send()
    first, second = Parking(store, 60.0), Parking(store, 60.0)  # two processes' holders
    first_left, second_left = threading.Event(), threading.Event()
    try:
        with ThreadPoolExecutor(2) as pool:
            held_first = pool.submit(first.hold, pending_id, 60, first_left.is_set, first_epoch)
            wait_for(lambda: first.held == 1, what="the first hold")
            # The first process's renewals fail for longer than the lease: it lapses while it holds.
            pending_service.hold_among(store, [pending_id], time.time() - 1)
            assert listed(ctx) == {pending_id: True}
            joined, second_epoch = send()
            assert joined == pending_id and second_epoch == first_epoch + 1 and holders(ctx, pending_id) == 1
            held_second = pool.submit(second.hold, pending_id, 60, second_left.is_set, second_epoch)
            wait_for(lambda: second.held == 1, what="the second hold")
            if first_goes == "after its renewal":
                first.renew()  # the database is back: the first holder is counted again
                assert holders(ctx, pending_id) == 2
                first.renew()  # counted once
                assert holders(ctx, pending_id) == 2
                second_left.set()
                assert second.check_clients() == 1
                assert held_second.result(timeout=10) == (GONE, None)
                assert listed(ctx) == {pending_id: False}  # the first process's client still waits
                first_left.set()
                assert first.check_clients() == 1
                assert held_first.result(timeout=10) == (GONE, None)
            else:
                first_left.set()
                assert first.check_clients() == 1
                assert held_first.result(timeout=10) == (GONE, None)
                assert holders(ctx, pending_id) == 1
                assert listed(ctx) == {pending_id: False}  # the second process's client still waits
                second_left.set()
                assert second.check_clients() == 1
                assert held_second.result(timeout=10) == (GONE, None)
            assert listed(ctx) == {pending_id: True} and holders(ctx, pending_id) == 0
    finally:
        first.close()
        second.close()
