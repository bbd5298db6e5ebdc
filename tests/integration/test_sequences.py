"""Issue 21: replay sessions and sequences through the proxy (Flask's test client), on both databases."""

from __future__ import annotations

import json
import threading

import pytest

from semula.core import answers, bundle_format
from semula.core import fingerprint as fp
from semula.core.errors import Conflict
from semula.service import Context, entries, pending, projects, sequences
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


def test_a_counted_request_is_kept_as_a_sequence_and_a_change_is_seen_at_once(ctx, client, admin, three, app):
    """Decision 0068: a kept sequence counts each call and serves the kept answer its number gets."""
    cache = app.wsgi_app.hits
    assert texts(client, admin, session_url("a"), 3) == ["one", "two", "three"]
    sequences_kept = [kept for _, kept in cache.held() if kept.sequence is not None]
    assert [kept.sequence for kept in sequences_kept] == [(3, "repeat_last")]
    served = cache.served
    assert texts(client, admin, session_url("a"), 3) == ["three"] * 3
    assert cache.served == served + 3  # counted, and answered kept
    assert counters(ctx, projects.get_row(ctx, "shop")) == 6
    # Another session starts at answer 1, kept or not; a reset starts this one over.
    assert texts(client, admin, session_url("b"), 4) == ["one", "two", "three", "three"]
    client.post("/api/v1/projects/shop/sessions/a/reset", headers=admin)
    assert texts(client, admin, session_url("a"), 2) == ["one", "two"]
    # A new answer 2 (through another path than the proxy) is seen by the very next call.
    add_answer(ctx, "shop", 2, "two, again")
    assert texts(client, admin, session_url("b"), 1) == ["three"]
    client.post("/api/v1/projects/shop/sessions/b/reset", headers=admin)
    assert texts(client, admin, session_url("b"), 3) == ["one", "two, again", "three"]
    # So is a fourth answer and a change of after_last.
    add_answer(ctx, "shop", 4, "four")
    assert texts(client, admin, session_url("b"), 2) == ["four", "four"]
    projects.update(ctx, "shop", {"after_last": "cycle"})
    assert texts(client, admin, session_url("b"), 3) == ["two, again", "three", "four"]


def test_a_kept_sequence_is_checked_by_the_statement_that_counts_its_call(
    ctx, client, admin, three, store, monkeypatch
):
    """Decision 0068: a kept sequence's call reads no change counter of its own: the count's statement
    reads it. A call whose kept sequence a change made stale is counted once and goes the whole way."""
    assert texts(client, admin, session_url("a"), 3) == ["one", "two", "three"]
    reads: list[str] = []
    version = type(store).version
    monkeypatch.setattr(type(store), "version", lambda self, ws: reads.append(ws) or version(self, ws))
    served = app_hits(client).served
    assert texts(client, admin, session_url("a"), 2) == ["three"] * 2
    assert reads == [] and app_hits(client).served == served + 2
    add_answer(ctx, "shop", 3, "three, again")
    assert texts(client, admin, session_url("a"), 2) == ["three, again"] * 2
    assert counters(ctx, projects.get_row(ctx, "shop")) == 7  # each call counted once
    assert app_hits(client).served == served + 3  # the first after the change went the whole way


def app_hits(client):
    return client.application.wsgi_app.hits


def test_calls_counted_together_get_distinct_numbers_in_the_order_they_asked(ctx, shop):
    """Decision 0068: the calls asked for while a write is in flight are counted by the next one."""
    counts = sequences.Counts()
    keys = [(shop["id"], "s", f"v1:{n}") for n in range(3)]
    writes: list[int] = []

    def waiting() -> int:
        """The calls asked for while the first write is in flight (the next round's)."""
        round_ = counts.rounds.waiting(ctx.principal.workspace_id)
        return sum(round_.asked.values()) if round_ is not None else 0

    def offload(write):
        if not writes:  # the first write waits until five more calls have asked
            wait_for(lambda: waiting() == 5)
        writes.append(1)
        return write()

    counts.offload = offload
    got: dict[int, tuple] = {}

    def call(number: int, key: tuple) -> None:
        got[number] = (key, counts.count(ctx, key)[0])

    first = threading.Thread(target=call, args=(0, keys[0]))
    first.start()
    wait_for(lambda: counts.rounds.flying(ctx.principal.workspace_id))
    others = []
    for number, key in enumerate([keys[0], keys[1], keys[0], keys[2], keys[1]], start=1):
        thread = threading.Thread(target=call, args=(number, key))
        thread.start()
        wait_for(lambda n=number: waiting() == n)
        others.append(thread)
    for thread in [first, *others]:
        thread.join(timeout=30)
    assert len(writes) == 2  # one call, then five together
    assert [got[n] for n in range(6)] == [
        (keys[0], 1),
        (keys[0], 2),
        (keys[1], 1),
        (keys[0], 3),
        (keys[2], 1),
        (keys[1], 2),
    ]
    # A process counting alone (the CLI) goes on from there.
    assert sequences.count(ctx, *keys[1]) == 3


def test_counts_of_two_processes_racing_never_repeat_a_number(ctx, shop):
    """Two processes' Counts (each with its own rounds) and one caller without, on one counter and on
    others: each counter's numbers are 1..n, none twice."""
    processes = [sequences.Counts(), sequences.Counts(), None]
    keys = [(shop["id"], "race", f"v1:{n}") for n in range(3)]
    got: list[tuple] = []
    lock = threading.Lock()

    def run(worker: int) -> None:
        mine = Context(ctx.store, ctx.settings, ctx.principal, counts=processes[worker % 3])
        for step in range(25):
            key = keys[(worker + step) % len(keys)]
            number = sequences.count(mine, *key)
            with lock:
                got.append((key, number))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for key in keys:
        numbers = sorted(number for k, number in got if k == key)
        assert numbers == list(range(1, 51))


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
        (URL, {"X-Semula-Session": ".."}),
        ("/p/shop/s/../v1/chat/completions", {}),
        ("/p/shop/s/./v1/chat/completions", {}),
    ],
)
def test_a_bad_session_name_is_refused(client, admin, shop, url, headers):
    r = client.post(url, json=BODY, headers={**admin, **headers})
    assert r.status_code in (400, 404)
    if headers or "/s/." in url:
        assert r.json["error"]["code"] == "invalid_session", r.json
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


# One answer of a sequence on every surface (decision 0041): REST here, the CLI, MCP and the dashboard below.


def entry_id_of(ctx) -> str:
    return entries.list_entries(ctx, "shop")["data"][0]["id"]


def said_by(answer: dict) -> str:
    return answer["answer"]["content"]


def test_rest_shows_edits_and_reverts_one_answer_with_its_own_revisions(ctx, client, admin, three):
    entry_id = entry_id_of(ctx)
    whole = client.get(f"/api/v1/entries/{entry_id}", headers=admin).json
    assert [(a["seq"], said_by(a)) for a in whole["sequence"]] == [(1, "one"), (2, "two"), (3, "three")]
    r = client.get(f"/api/v1/entries/{entry_id}/answers/2", headers=admin)
    assert r.status_code == 200, r.json
    assert r.json["object"] == "entry.answer" and said_by(r.json) == "two" and r.json["revision"] == 1
    assert [(v["seq"], v["number"]) for v in r.json["revisions"]] == [(2, 1)]

    r = client.patch(
        f"/api/v1/entries/{entry_id}/answers/2", json={"content": "TWO", "summary": "louder"}, headers=admin
    )
    assert r.status_code == 200, r.json
    assert said_by(r.json) == "TWO" and r.json["revision"] == 2
    assert [(v["number"], v["summary"]) for v in r.json["revisions"]] == [(1, "test"), (2, "louder")]
    assert texts(client, admin, session_url("a"), 3) == ["one", "TWO", "three"]
    # Answer 1 and 3 are untouched, and the entry is unreviewed again, as after any edit.
    assert client.get(f"/api/v1/entries/{entry_id}", headers=admin).json["revision"] == 1
    r = client.post(f"/api/v1/entries/{entry_id}/answers/2/revert", json={"revision": 1}, headers=admin)
    assert r.status_code == 200 and said_by(r.json) == "two" and r.json["revision"] == 3
    # Validated as any answer is.
    r = client.patch(f"/api/v1/entries/{entry_id}/answers/3", json={"tool_calls": "nope"}, headers=admin)
    assert r.status_code == 422 and r.json["error"]["param"].startswith("tool_calls")
    assert said_by(client.get(f"/api/v1/entries/{entry_id}/answers/3", headers=admin).json) == "three"
    r = client.get(f"/api/v1/entries/{entry_id}/answers/4", headers=admin)
    assert r.status_code == 404 and r.json["error"]["code"] == "answer_not_found"
    actions = [(e["action"], e["fields"]) for e in client.get("/api/v1/audit", headers=admin).json["data"]]
    assert ("entry.edit", ["answers[2].response"]) in actions and (
        "entry.revert",
        ["answers[2].response"],
    ) in actions


def test_rest_reorders_and_deletes_answers_with_their_revisions(ctx, client, admin, three):
    entry_id = entry_id_of(ctx)
    client.patch(f"/api/v1/entries/{entry_id}/answers/3", json={"content": "THREE"}, headers=admin)
    r = client.post(f"/api/v1/entries/{entry_id}/answers/reorder", json={"order": [3, 1, 2]}, headers=admin)
    assert r.status_code == 200, r.json
    assert [said_by(a) for a in r.json["sequence"]] == ["THREE", "one", "two"]
    # Each answer keeps its revisions: the moved answer 3 is answer 1 now, with both of its own.
    first = client.get(f"/api/v1/entries/{entry_id}/answers/1", headers=admin).json
    assert first["revision"] == 2 and [v["number"] for v in first["revisions"]] == [1, 2]
    assert texts(client, admin, session_url("a"), 3) == ["THREE", "one", "two"]
    assert texts(client, admin, URL, 1) == ["THREE"]

    r = client.delete(f"/api/v1/entries/{entry_id}/answers/1", headers=admin)
    assert r.status_code == 200 and r.json["answers"] == 2
    assert [said_by(a) for a in r.json["sequence"]] == ["one", "two"]
    assert [(v["seq"], v["number"]) for v in r.json["revisions"]] == [(1, 1), (2, 1)]
    client.post("/api/v1/projects/shop/sessions/a/reset", headers=admin)
    assert texts(client, admin, session_url("a"), 3) == ["one", "two", "two"]
    client.delete(f"/api/v1/entries/{entry_id}/answers/2", headers=admin)
    r = client.delete(f"/api/v1/entries/{entry_id}/answers/1", headers=admin)
    assert r.status_code == 409 and r.json["error"]["code"] == "last_answer"
    for bad in ([1, 1], [2], "1", [1, 2]):
        r = client.post(f"/api/v1/entries/{entry_id}/answers/reorder", json={"order": bad}, headers=admin)
        assert r.status_code == 400 and r.json["error"]["param"] == "order", bad
    actions = [e["action"] for e in client.get("/api/v1/audit", headers=admin).json["data"]]
    assert "entry.answers.reorder" in actions and actions.count("entry.answer.delete") == 2


def test_rest_pins_one_answer_against_re_recording(ctx, shop, client, admin, three):
    entry_id = entry_id_of(ctx)
    r = client.post(f"/api/v1/entries/{entry_id}/answers/2/pin", headers=admin)
    assert r.status_code == 200 and r.json["pinned"] is True
    assert client.get(f"/api/v1/entries/{entry_id}", headers=admin).json["pinned"] is False
    with pytest.raises(Conflict) as raised:
        add_answer(ctx, "shop", 2, "re-recorded")
    assert raised.value.code == "entry_pinned"
    assert client.post(f"/api/v1/entries/{entry_id}/answers/2/unpin", headers=admin).json["pinned"] is False
    add_answer(ctx, "shop", 2, "re-recorded")
    # Pinning answer 1 pins the entry, as before sequences.
    assert client.post(f"/api/v1/entries/{entry_id}/answers/1/pin", headers=admin).json["pinned"] is True
    assert client.get(f"/api/v1/entries/{entry_id}", headers=admin).json["pinned"] is True


def test_answer_routes_keep_the_entry_rules(ctx, client, make_token, three):
    entry_id = entry_id_of(ctx)
    viewer = make_token("viewer")
    assert client.get(f"/api/v1/entries/{entry_id}/answers/2", headers=viewer).status_code == 200
    for method, path, body in [
        ("patch", "answers/2", {"content": "x"}),
        ("post", "answers/2/pin", None),
        ("delete", "answers/2", None),
        ("post", "answers/reorder", {"order": [2, 1, 3]}),
    ]:
        r = getattr(client, method)(f"/api/v1/entries/{entry_id}/{path}", json=body, headers=viewer)
        assert r.status_code == 403, (method, path)
    projects.create(ctx, {"name": "other"})
    bound = make_token("admin", project="other")
    assert client.get(f"/api/v1/entries/{entry_id}/answers/2", headers=bound).status_code == 404


def test_cli_shows_edits_pins_reorders_and_deletes_one_answer(ctx, client, admin, three, db_url, monkeypatch):
    from click.testing import CliRunner

    from semula.surfaces.cli import main

    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    entry_id = entry_id_of(ctx)

    def run(*args: str) -> dict:
        result = CliRunner().invoke(main, ["entry", "answer", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert said_by(run("show", entry_id, "3")) == "three"
    edited = run("edit", entry_id, "3", "--content", "THREE", "--summary", "by hand")
    assert said_by(edited) == "THREE" and [v["summary"] for v in edited["revisions"]] == ["test", "by hand"]
    assert run("revert", entry_id, "3", "1")["revision"] == 3
    assert run("pin", entry_id, "2")["pinned"] is True and run("unpin", entry_id, "2")["pinned"] is False
    assert [said_by(a) for a in run("reorder", entry_id, "2", "3", "1")["sequence"]] == [
        "two",
        "three",
        "one",
    ]
    assert [said_by(a) for a in run("delete", entry_id, "2", "--yes")["sequence"]] == ["two", "one"]
    assert texts(client, admin, session_url("a"), 3) == ["two", "one", "one"]
    missing = CliRunner().invoke(main, ["entry", "answer", "show", entry_id, "3"])
    assert missing.exit_code != 0 and "no answer 3" in missing.output
