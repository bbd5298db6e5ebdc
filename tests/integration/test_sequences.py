"""Issue 21: replay sessions and sequences through the proxy (Flask's test client), on both databases."""

from __future__ import annotations

import json

import pytest

from semula.core import answers, bundle_format
from semula.core import fingerprint as fp
from semula.core.errors import Conflict
from semula.service import entries, pending, projects
from tests.entry_helpers import request_for, save_entry
from tests.helpers import wait_for
from tests.integration.test_proxy import call_async

BODY = request_for("next step?")
URL = "/p/shop/v1/chat/completions"


def session_url(session: str) -> str:
    return f"/p/shop/s/{session}/v1/chat/completions"


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "mode": "replay", "record_timeout": 30})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def add_answer(ctx, project: str, seq: int, text: str, request=BODY) -> dict:
    """Save answer `seq` of the request's sequence, as an answered parked call would."""
    row = projects.get_row(ctx, project)
    return entries.save(
        ctx.store,
        ctx,
        project_id=row["id"],
        fingerprint=fp.fingerprint(request),
        request=request,
        response=answers.parse_answer({"content": text}, request),
        chunks=None,
        actor="agent",
        summary="test",
        seq=seq,
    )


@pytest.fixture
def three(ctx, shop):
    """BODY recorded with a sequence of three answers."""
    save_entry(ctx, "shop", "next step?", {"content": "one"})
    add_answer(ctx, "shop", 2, "two")
    add_answer(ctx, "shop", 3, "three")


def texts(client, headers, url: str, count: int, body=BODY) -> list[str]:
    out = []
    for _ in range(count):
        r = client.post(url, json=body, headers=headers)
        assert r.status_code == 200, r.json
        out.append(r.json["choices"][0]["message"]["content"])
    return out


def counters(ctx, shop) -> int:
    row = ctx.store.one(
        "session_call_count", project_id=shop["id"], session="a", fingerprint=fp.fingerprint(BODY)
    )
    return row["calls"] if row else 0


def test_the_kth_call_in_a_session_gets_answer_k_and_outside_a_session_answer_one(client, admin, three):
    assert texts(client, admin, session_url("a"), 5) == ["one", "two", "three", "three", "three"]
    assert texts(client, admin, URL, 4) == ["one"] * 4
    header = {**admin, "X-Semula-Session": "by-header"}
    assert texts(client, header, URL, 2) == ["one", "two"]


def test_two_sessions_count_apart_and_a_reset_starts_one_over(client, admin, three):
    assert texts(client, admin, session_url("a"), 2) == ["one", "two"]
    assert texts(client, admin, session_url("b"), 1) == ["one"]
    assert texts(client, admin, session_url("a"), 1) == ["three"]
    reset = client.post("/api/v1/projects/shop/sessions/a/reset", headers=admin)
    assert reset.status_code == 200 and reset.json == {
        "object": "session",
        "project": "shop",
        "session": "a",
        "reset": True,
    }
    assert texts(client, admin, session_url("a"), 1) == ["one"]
    assert texts(client, admin, session_url("b"), 1) == ["two"]


def test_after_last_cycle_and_fail(ctx, client, admin, three):
    projects.update(ctx, "shop", {"after_last": "cycle"})
    assert texts(client, admin, session_url("a"), 7) == ["one", "two", "three", "one", "two", "three", "one"]
    projects.update(ctx, "shop", {"after_last": "fail"})
    client.post("/api/v1/projects/shop/sessions/a/reset", headers=admin)
    assert texts(client, admin, session_url("a"), 3) == ["one", "two", "three"]
    r = client.post(session_url("a"), json=BODY, headers=admin)
    assert r.status_code == 424 and r.json["error"]["code"] == "semula_sequence_exhausted"
    message = r.json["error"]["message"]
    assert "call 4 of this request in session 'a'" in message and "3 answers are recorded" in message
    shop_id = projects.get_row(ctx, "shop")["id"]
    logged = lambda: [r for r in ctx.store.all("calls_in_project", project_id=shop_id) if r["status"] == 424]  # noqa: E731
    assert wait_for(logged, what="the call logged")[0]["outcome"] == "sequence_exhausted"


def test_one_answer_and_repeat_last_is_never_counted(ctx, shop, client, admin):
    save_entry(ctx, "shop", "next step?", {"content": "only"})
    assert texts(client, admin, session_url("a"), 5) == ["only"] * 5
    assert counters(ctx, shop) == 0
    # fail needs the count: the second call is past the last answer.
    projects.update(ctx, "shop", {"after_last": "fail"})
    assert texts(client, admin, session_url("a"), 1) == ["only"]
    assert client.post(session_url("a"), json=BODY, headers=admin).status_code == 424
    assert counters(ctx, shop) == 2


def test_kept_hits_never_serve_a_counted_answer(ctx, shop, client, admin):
    save_entry(ctx, "shop", "next step?", {"content": "one"})
    # Sighted, kept and served kept as a single answer: nothing to count.
    assert texts(client, admin, session_url("a"), 4) == ["one"] * 4
    add_answer(ctx, "shop", 2, "two")  # the entry row changes, so the kept hit is dropped
    assert texts(client, admin, session_url("b"), 6) == ["one", "two", "two", "two", "two", "two"]
    assert texts(client, admin, session_url("c"), 2) == ["one", "two"]


def test_a_replay_miss_in_a_session_names_it_and_the_answers(ctx, client, admin, three):
    r = client.post(session_url("a"), json=request_for("next step!"), headers=admin)
    assert r.status_code == 424
    message = r.json["error"]["message"]
    assert "(3 answers)" in message and "call 1 of this request in session 'a'" in message


@pytest.mark.parametrize(
    "url, headers",
    [
        ("/p/shop/s/bad!name/v1/chat/completions", {}),
        (URL, {"X-Semula-Session": "x" * 65}),
    ],
)
def test_a_bad_session_name_is_refused(client, admin, shop, url, headers):
    r = client.post(url, json=BODY, headers={**admin, **headers})
    assert r.status_code in (400, 404)
    if headers:
        assert r.json["error"]["code"] == "invalid_session"
    assert client.post("/api/v1/projects/shop/sessions/bad!/reset", headers=admin).status_code == 400


def test_sequences_record_parks_the_kth_call_for_answer_k(ctx, shop, client, admin):
    projects.update(ctx, "shop", {"mode": "record", "sequences": "record"})

    def answer_next(text: str, seq: int) -> None:
        rows = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
        assert pending.get(ctx, rows[0]["id"])["seq"] == seq
        pending.answer(ctx, rows[0]["id"], {"content": text})

    for seq, text in ((1, "first"), (2, "second")):
        future = call_async(client, admin, BODY, session_url("a"))
        answer_next(text, seq)
        assert future.result(10).json["choices"][0]["message"]["content"] == text
    # A new session replays the sequence; its third call records answer 3.
    assert texts(client, admin, session_url("b"), 2) == ["first", "second"]
    future = call_async(client, admin, BODY, session_url("b"))
    answer_next("third", 3)
    assert future.result(10).json["choices"][0]["message"]["content"] == "third"
    [entry] = entries.list_entries(ctx, "shop")["data"]
    assert entries.get(ctx, entry["id"])["answers"] == 3
    # Without a session nothing is counted or parked: answer 1, as before sequences.
    assert texts(client, admin, URL, 2) == ["first", "first"]


def test_an_answer_out_of_order_is_refused(ctx, shop):
    save_entry(ctx, "shop", "next step?", {"content": "one"})
    with pytest.raises(Conflict) as raised:
        add_answer(ctx, "shop", 3, "three")
    assert raised.value.code == "sequence_out_of_order" and "answer 2 first" in raised.value.message
    stored = ctx.store.one("entry_by_fingerprint", project_id=shop["id"], fingerprint=fp.fingerprint(BODY))
    assert (
        stored["answers"] == 1 and json.loads(stored["response"])["choices"][0]["message"]["content"] == "one"
    )


def test_a_sequence_is_exported_imported_and_replayed(ctx, client, admin, three):
    from tests.integration.test_bundles import export, import_

    first = export(ctx, "shop")
    assert export(ctx, "shop") == first  # byte-stable
    [item] = json.loads(first)["entries"]
    assert item["response"]["choices"][0]["message"]["content"] == "one"
    later = [a["response"]["choices"][0]["message"]["content"] for a in item["later_answers"]]
    assert (
        later == ["two", "three"]
        and [sorted(a) for a in item["later_answers"]] == [["chunks", "pinned", "response"]] * 2
    )

    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert import_(ctx, "copy", first)["created"] == 1
    assert export(ctx, "copy") == first
    assert import_(ctx, "copy", first)["unchanged"] == 1
    url = "/p/copy/s/x/v1/chat/completions"
    assert texts(client, admin, url, 4) == ["one", "two", "three", "three"]

    # A bundle from before sequences (no later_answers) makes it a sequence of one again.
    older = json.loads(first)
    del older["entries"][0]["later_answers"]
    report = import_(ctx, "copy", json.dumps(older))
    assert report["updated"] == 1
    client.post("/api/v1/projects/copy/sessions/x/reset", headers=admin)
    assert texts(client, admin, url, 2) == ["one", "one"]
    assert bundle_format.VERSION == 1


def test_cli_session_reset(ctx, client, admin, three, db_url, monkeypatch):
    from click.testing import CliRunner

    from semula.surfaces.cli import main

    assert texts(client, admin, session_url("a"), 2) == ["one", "two"]
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    result = CliRunner().invoke(main, ["session", "reset", "shop", "a"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["reset"] is True
    assert texts(client, admin, session_url("a"), 1) == ["one"]
