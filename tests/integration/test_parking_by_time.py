"""Many held calls polled by time (issue 52, docs/decisions/0080-held-calls-at-scale.md).

Past `by_ids` held calls, a Parking asks which calls were resolved since its last look rather than
asking after each held call by id; it still asks by id after the calls held since its last look, and
after every held call once per sweep. Notices are switched off here (as on SQLite), so only the polls
these tests make release anything.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from semula.parking import Parking
from semula.service import pending as pending_service
from semula.service import projects
from tests.agent_helpers import park
from tests.helpers import wait_for


@pytest.fixture
def shop(ctx):
    projects.create(ctx, {"name": "shop"})
    return "shop"


@pytest.fixture
def parking(store, monkeypatch):
    monkeypatch.setattr(store, "on_notice", lambda *args, **kwargs: False)
    parking = Parking(store, 60.0, by_ids=2)  # the loop's own turn is a minute away: the tests poll
    yield parking
    parking.close()


@pytest.fixture
def statements(store, monkeypatch):
    """The names of the statements store.all runs."""
    names: list[str] = []
    all_ = store.all

    def spy(name, **params):
        names.append(name)
        return all_(name, **params)

    monkeypatch.setattr(store, "all", spy)
    return names


def answer_late(ctx, pending_id: str, monkeypatch, seconds: float = 100.0) -> None:
    """Answer as a commit (or a clock) running `seconds` late would: resolved_at that far back."""
    with monkeypatch.context() as m:
        m.setattr(pending_service, "now", lambda: time.time() - seconds)
        pending_service.answer(ctx, pending_id, {"content": "late"})


def test_many_held_calls_are_released_by_one_poll_by_time(ctx, shop, parking, statements):
    ids = [park(ctx, shop, f"call {n}") for n in range(12)]
    with ThreadPoolExecutor(len(ids)) as pool:
        holds = [pool.submit(parking.hold, pending_id, 60) for pending_id in ids]
        wait_for(lambda: parking.held == len(ids), what="12 holds")
        assert parking.poll_once() == 0  # the first look asks after each by id
        assert statements == ["resolved_among"]
        for pending_id in ids:
            pending_service.answer(ctx, pending_id, {"content": "answered elsewhere"})
        statements.clear()
        assert parking.poll_once() == len(ids)
        assert statements == ["resolved_since"]  # one look by time, no id asked after
        assert [hold.result(timeout=10)[0] for hold in holds] == ["answered"] * len(ids)


def test_a_call_resolved_before_its_hold_began_is_asked_after_by_id(
    ctx, shop, parking, statements, monkeypatch
):
    ids = [park(ctx, shop, f"call {n}") for n in range(3)]
    late = park(ctx, shop, "answered before anyone held it")
    with ThreadPoolExecutor(4) as pool:
        holds = [pool.submit(parking.hold, pending_id, 60) for pending_id in ids]
        wait_for(lambda: parking.held == 3, what="3 holds")
        parking.poll_once()
        # Answered long before the look by time reaches back (a request that parked, then waited to hold).
        answer_late(ctx, late, monkeypatch)
        held_late = pool.submit(parking.hold, late, 60)
        wait_for(lambda: parking.held == 4, what="the late hold")
        statements.clear()
        assert parking.poll_once() == 1
        assert sorted(statements) == ["resolved_among", "resolved_since"]
        assert held_late.result(timeout=10)[0] == "answered"
        for pending_id in ids:
            pending_service.cancel(ctx, pending_id)
        assert parking.poll_once() == 3
        assert [hold.result(timeout=10)[0] for hold in holds] == ["cancelled"] * 3


def test_a_commit_later_than_the_margin_is_caught_by_the_sweep_or_a_lost_notice(
    ctx, shop, parking, statements, monkeypatch
):
    ids = [park(ctx, shop, f"call {n}") for n in range(4)]
    with ThreadPoolExecutor(len(ids)) as pool:
        holds = [pool.submit(parking.hold, pending_id, 60) for pending_id in ids]
        wait_for(lambda: parking.held == len(ids), what="4 holds")
        parking.poll_once()
        answer_late(ctx, ids[0], monkeypatch)
        assert parking.poll_once() == 0  # older than the look by time reaches back
        assert parking.poll_once(sweep=True) == 1
        answer_late(ctx, ids[1], monkeypatch)
        assert parking.poll_once() == 0
        parking.noticed(None)  # notices were lost: the next poll asks after every held call
        assert parking.poll_once() == 1
        assert [hold.result(timeout=10)[0] for hold in holds[:2]] == ["answered"] * 2
        for pending_id in ids[2:]:
            pending_service.cancel(ctx, pending_id)
        assert parking.poll_once() == 2
