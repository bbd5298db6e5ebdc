"""Kept replay hits (semula.service.hits): a repeat skips the entry query, and a change is seen at once.

Each change is made through a second store on the same database, as another server process would
make it, and the very next request must see it.

At the end, kept hits checked by notice (SEMULA_CHANGE_CHECK=notify, decision 0047): on PostgreSQL a
kept hit reads no change counter while the process listens, a change made by another process is seen
once its notice has come, and while the listening is lost every kept hit reads the counter again, so
a change is seen by the very next request. On SQLite Versions.listen() changes nothing: its check
reads no database, and a change is seen by the next request as always.
"""

from __future__ import annotations

import gc
import io
import json
import re
import sqlite3
import sys
import threading
import time
from dataclasses import replace

import psycopg
import pytest

from semula.db import QUERIES, connect
from semula.service import Context, bundles, entries, hits, projects, replay
from semula.service.calllog import CallLog
from semula.service.versions import ChangeCache, Versions
from tests.entry_helpers import request_for, save_entry
from tests.helpers import metric_samples, metric_value

URL = "/p/shop/v1/chat/completions"
BODY = request_for("hello")


@pytest.fixture
def shop(ctx):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    return save_entry(ctx, "shop", "hello", {"content": "first"})


@pytest.fixture
def other(ctx, db_url):
    """The service layer over a store of its own: what another semula process would do."""
    store = connect(db_url, pool_size=2)
    yield replace(ctx, store=store)
    store.close()


@pytest.fixture
def entry_queries(store, monkeypatch):
    """The names of the queries the app runs through store.one and store.all, in order; an entry lookup
    (service.versions: entries_at_version on PostgreSQL) is entry_by_fingerprint once per fingerprint."""
    seen: list[str] = []
    one, every = store.one, store.all

    def counting(name, /, **params):
        seen.append(name)
        return one(name, **params)

    def counting_all(name, /, **params):
        if name == "entries_at_version":
            seen.extend(["entry_by_fingerprint"] * len(params["fingerprints"]))
        else:
            seen.append(name)
        return every(name, **params)

    monkeypatch.setattr(store, "one", counting)
    monkeypatch.setattr(store, "all", counting_all)
    return seen


def answer(client, headers, body=BODY, url=URL):
    r = client.post(url, json=body, headers=headers)
    if r.status_code != 200:
        return r.status_code, r.json["error"]["code"]
    return r.status_code, r.json["choices"][0]["message"]["content"]


def warm(client, headers, times=3):
    """The first sight notes the request, the second keeps the hit, the rest are served kept."""
    return [answer(client, headers) for _ in range(times)]


def test_a_repeated_hit_skips_the_entry_query_and_keeps_its_log_and_fresh_ids(
    ctx, shop, app, client, make_token, entry_queries
):
    # As in a server: call-log rows are written in batches.
    calllog = app.extensions["semula"]["calllog"]
    calllog.batched = True
    headers = make_token("viewer", scope="replay")
    assert warm(client, headers) == [(200, "first")] * 3
    entry_queries.clear()
    bodies = [client.post(URL, json=BODY, headers=headers).json for _ in range(5)]
    assert "entry_by_fingerprint" not in entry_queries and "get_project_by_name" not in entry_queries
    assert {b["choices"][0]["message"]["content"] for b in bodies} == {"first"}
    assert len({b["id"] for b in bodies}) == 5 and {b["model"] for b in bodies} == {"gpt-4o"}
    assert {k for b in bodies for k in b} == {"id", "object", "created", "model", "choices", "usage"}
    calllog.flush()
    project_id = projects.get_row(ctx, "shop")["id"]
    calls = ctx.store.all("calls_in_project", project_id=project_id)
    assert len(calls) == 8
    assert {(c["outcome"], c["status"], c["entry_id"]) for c in calls} == {("hit", 200, shop["id"])}


def test_a_large_request_is_kept_by_its_digest_and_holds_no_copy_of_itself(
    ctx, app, client, make_token, entry_queries
):
    # Agents send requests of hundreds of kilobytes; a repeat is a kept hit all the same.
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    prompt = "a long agent transcript " * 8000
    save_entry(ctx, "shop", prompt, {"content": "big"})
    app.extensions["semula"]["calllog"].batched = True
    headers = make_token("viewer", scope="replay")
    big = request_for(prompt)
    assert [answer(client, headers, big) for _ in range(3)] == [(200, "big")] * 3
    entry_queries.clear()
    assert answer(client, headers, big) == (200, "big")
    assert "entry_by_fingerprint" not in entry_queries
    [(key, held)] = app.wsgi_app.hits._kept.items()
    [(_, kept)] = app.wsgi_app.hits.held()
    assert len(key) == 32 and len(kept.digest) == 32  # digests, not the body's 190 KB
    assert hits.cost(key, held) == hits.HIT + len(held) and len(held) < len(kept.data) + 512
    # A body of the same length with the same ends is another request, and each gets its own answer.
    middle = len(prompt) // 2
    same_ends = prompt[:middle] + "A MIDDLE" + prompt[middle + 8 :]
    save_entry(ctx, "shop", same_ends, {"content": "other"})
    other = request_for(same_ends)
    for _ in range(3):
        assert answer(client, headers, other) == (200, "other")
        assert answer(client, headers, big) == (200, "big")


def edit(other, shop):
    entries.edit(other, shop["id"], {"content": "second"})


def revert(other, shop):
    entries.edit(other, shop["id"], {"content": "second"})
    entries.revert(other, shop["id"], 1)


def reject(other, shop):
    entries.review(other, shop["id"], "rejected")


def delete(other, shop):
    entries.delete(other, shop["id"])


def ignore_messages(other, shop):
    projects.update(other, "shop", {"ignore_fields": ["/messages"]})


def import_over(other, shop):
    bundle = json.loads(b"".join(bundles.export_bundle(other, "shop")))
    bundle["entries"][0]["response"]["choices"][0]["message"]["content"] = "imported"
    bundles.import_bundle(other, "shop", io.BytesIO(json.dumps(bundle).encode()))


CHANGES = {
    edit: (200, "second"),
    revert: (200, "first"),
    reject: (424, "semula_replay_miss"),
    delete: (424, "semula_replay_miss"),
    # The entry is fingerprinted again under the new rules: a request it did not answer now finds it.
    ignore_messages: (200, "first"),
    import_over: (200, "imported"),
}
# The request a change is probed with (BODY when not named): one whose outcome the change turns.
PROBES = {ignore_messages: request_for("goodbye")}


def normalize_hello(other, shop):
    projects.update(other, "shop", {"normalize": [{"pattern": "hello", "replacement": "hi"}]})


def fresh(n):
    """The request with new bytes (`user` is a transport field): a first sight of the same entry."""
    return {**BODY, "user": f"caller {n}"}


# What a first sight finds after a change of its project's settings (its row is kept per process).
PROJECT_CHANGES = {
    ignore_messages: (200, "first"),
    normalize_hello: (200, "first"),  # the entry's "hello" is "hi" now, as the probe's is
}
PROBES[normalize_hello] = request_for("hi")


@pytest.mark.parametrize("change", PROJECT_CHANGES, ids=[c.__name__ for c in PROJECT_CHANGES])
def test_a_first_sight_reads_its_project_once_and_sees_a_change_made_elsewhere_at_once(
    shop, other, client, make_token, entry_queries, change
):
    headers = make_token("admin")
    assert [answer(client, headers, fresh(n)) for n in range(3)] == [(200, "first")] * 3
    assert entry_queries.count("get_project_by_name") == 1  # read once, then kept with the counter
    assert entry_queries.count("entry_by_fingerprint") == 3  # each first sight looks its entry up
    probe = {**PROBES[change], "user": "caller 3"}
    assert answer(client, headers, probe) == (424, "semula_replay_miss")
    change(other, shop)
    assert answer(client, headers, probe) == PROJECT_CHANGES[change]
    assert entry_queries.count("get_project_by_name") == 2  # the counter moved: read again


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__ for c in CHANGES])
def test_a_change_made_by_another_process_is_seen_by_the_next_request(
    shop, other, client, make_token, change
):
    headers = make_token("admin")
    assert warm(client, headers) == [(200, "first")] * 3
    change(other, shop)
    assert answer(client, headers, PROBES.get(change, BODY)) == CHANGES[change]


def test_a_kept_hit_follows_the_entry_back_and_forth(shop, other, client, make_token):
    headers = make_token("admin")
    seen = []
    for text in ("second", "third", "first"):
        warm(client, headers)
        entries.edit(other, shop["id"], {"content": text})
        seen.append(answer(client, headers))
    assert seen == [(200, "second"), (200, "third"), (200, "first")]


def test_a_token_bound_elsewhere_gets_404_even_for_a_kept_request(ctx, shop, client, make_token):
    projects.create(ctx, {"name": "elsewhere"})
    assert warm(client, make_token("admin")) == [(200, "first")] * 3
    bound = make_token("viewer", project="elsewhere")
    assert answer(client, bound) == (404, "project_not_found")


def test_the_same_request_in_another_workspace_is_not_served_from_this_one(ctx, shop):
    elsewhere = Context(ctx.store, ctx.settings, replace(ctx.principal, workspace_id="wsp_other"))
    assert hits.key(ctx, "openai.chat", "shop", None, b"{}") != hits.key(
        elsewhere, "openai.chat", "shop", None, b"{}"
    )
    # The same bytes sent to another API are another request.
    assert hits.key(ctx, "openai.chat", "shop", None, b"{}") != hits.key(
        ctx, "openai.responses", "shop", None, b"{}"
    )
    # And so are they with other answer headers (Anthropic's betas), or the project named elsewhere.
    keys = {
        hits.key(ctx, "anthropic.messages", "shop", None, b"{}", headers=headers)
        for headers in [(None,), ("None",), ("a",), ("a,b",), ("",)]
    }
    keys |= {
        hits.key(ctx, "openai.chat", None, "shop", b"{}"),
        hits.key(ctx, "openai.chat", "shop", None, b"{}"),
    }
    assert len(keys) == 7


def test_a_large_body_is_never_keyed_as_a_small_one_made_of_its_samples(ctx):
    big = b"[" + b"1," * 40_000 + b"1]"
    samples = len(big).to_bytes(8, "big") + big[: hits.SAMPLE] + big[-hits.SAMPLE :]
    assert hits.key(ctx, "openai.chat", "shop", None, big) != hits.key(
        ctx, "openai.chat", "shop", None, samples
    )


def test_templates_and_streams_are_rendered_afresh_each_time(ctx, client, make_token):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    save_entry(ctx, "shop", "hello", {"content": "id {{uuid}}"})
    headers = make_token("admin")
    texts = [answer(client, headers)[1] for _ in range(4)]
    assert len(set(texts)) == 4 and all(t.startswith("id ") and "{{" not in t for t in texts)
    stream = {**BODY, "stream": True}
    streams = [client.post(URL, json=stream, headers=headers).get_data(as_text=True) for _ in range(4)]
    assert all(s.endswith("data: [DONE]\n\n") for s in streams) and len(set(streams)) == 4


def project_id(other):
    return projects.get_row(other, "shop")["id"]


def log_a_call(other, shop):
    """Another process's call-log flush: a row of the call log, which no answer depends on."""
    calllog = CallLog(other.store)
    calllog.record(
        replay.log_row(other, None, outcome="hit", status=200, started=0.0, project_id=project_id(other))
    )


def count_a_session_call(other, shop):
    with other.store.transaction() as tx:
        tx.one(
            "count_session_call",
            n=1,
            workspace_id="wsp_default",
            project_id=project_id(other),
            session="s1",
            fingerprint=shop["fingerprint"],
            now=0.0,
        )


def touch_a_token(other, shop):
    """Its last use, written once a minute: not what authenticates it."""
    token = other.store.all("list_tokens", workspace_id="wsp_default", after=None, limit=1)[0]
    with other.store.transaction() as tx:
        assert tx.run("touch_token", id=token["id"], workspace_id="wsp_default", now=1e10, before=1e10) == 1


@pytest.mark.parametrize("write", [log_a_call, count_a_session_call, touch_a_token])
def test_a_write_no_answer_depends_on_keeps_the_kept_hits(
    shop, other, client, make_token, entry_queries, write
):
    headers = make_token("admin")
    assert warm(client, headers) == [(200, "first")] * 3
    write(other, shop)
    entry_queries.clear()
    assert answer(client, headers) == (200, "first")
    assert "entry_by_fingerprint" not in entry_queries  # served kept, not read again
    # ... while a change of the entry made by that other process is still seen at once.
    edit(other, shop)
    assert answer(client, headers) == (200, "second")


# The queries whose rows a replay answer is made of: the caller's token, the project, the entry and
# the answers of its sequence.
ANSWER_QUERIES = (
    "token_by_hash",
    "get_project_by_name",
    "get_project",
    "entry_by_fingerprint",
    "entry_answer",
)


def counting_triggers(store, url):
    """(table, event) of every trigger that moves the replay change counter."""
    if store.dialect == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            rows = raw.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
        return {
            (table, event)
            for table, sql in rows
            for event in ("INSERT", "UPDATE", "DELETE")
            if f"AFTER {event}" in sql and "UPDATE replay_changes SET counter = counter + 1" in sql
        }
    import psycopg

    with psycopg.connect(url) as conn:
        return set(
            conn.execute(
                "SELECT event_object_table, event_manipulation FROM information_schema.triggers "
                "WHERE action_statement = 'EXECUTE FUNCTION semula_count_replay_change()' "
                "AND action_timing = 'AFTER' AND action_orientation = 'ROW'"
            ).fetchall()
        )


def test_every_table_an_answer_reads_moves_the_change_counter(store, db_url):
    read = {t for name in ANSWER_QUERIES for t in re.findall(r"(?:FROM|JOIN)\s+(\w+)", QUERIES[name])}
    assert read == {"tokens", "workspaces", "projects", "entries", "entry_answers"}
    assert {(t, e) for t in read for e in ("INSERT", "UPDATE", "DELETE")} <= counting_triggers(store, db_url)


def larger_cycle(ctx, app, client, headers):
    """40 recordings, and a budget of kept hits with room for some 20 to 25 of them; the cache and
    what one kept hit costs."""
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    texts = [f"question {i}" for i in range(40)]
    for text in texts:
        save_entry(ctx, "shop", text)
    cache = app.wsgi_app.hits
    for _ in range(2):
        assert answer(client, headers, request_for(texts[0]))[0] == 200
    [(_, one)] = cache._kept.items()  # kept at its second sight
    cache.max_bytes = 25 * hits.cost(b"", one)
    return texts, cache, hits.cost(b"", one)


def test_kept_hits_stay_within_their_byte_budget_and_keep_most_of_a_larger_cycle(
    ctx, app, client, make_token, entry_queries
):
    headers = make_token("admin")
    texts, cache, _ = larger_cycle(ctx, app, client, headers)
    served = []
    for _ in range(10):  # a test suite run over and over: each request once per pass
        entry_queries.clear()
        served = [answer(client, headers, request_for(text)) for text in texts]
        assert cache._bytes <= cache.max_bytes
    assert served == [(200, f"answer to {text}") for text in texts]
    assert 15 <= len(cache._kept) < 40
    assert entry_queries.count("entry_by_fingerprint") <= 25  # most of those it holds were served kept
    assert all(isinstance(k, bytes) or k is hits.SEEN for k in cache._kept.values())


def stream_answer(client, headers):
    """(status, the content deltas joined, the set of chunk ids, the set of `created`) of a stream."""
    r = client.post(URL, json={**BODY, "stream": True}, headers=headers)
    if r.status_code != 200:
        return r.status_code, r.json["error"]["code"], set(), set()
    chunks = [
        json.loads(line[len("data: ") :])
        for line in r.get_data(as_text=True).splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    return 200, text, {c["id"] for c in chunks}, {c["created"] for c in chunks}


def test_a_repeated_stream_is_kept_as_bytes_with_each_reply_stamped_afresh(
    shop, other, client, make_token, entry_queries, monkeypatch
):
    headers = make_token("viewer", scope="replay")
    assert [stream_answer(client, headers)[:2] for _ in range(3)] == [(200, "first")] * 3
    entry_queries.clear()
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.5)
    replies = [stream_answer(client, headers) for _ in range(4)]
    assert "entry_by_fingerprint" not in entry_queries  # served kept
    assert {(status, text) for status, text, _, _ in replies} == {(200, "first")}
    ids = [next(iter(reply_ids)) for _, _, reply_ids, _ in replies]
    assert all(len(reply_ids) == 1 for _, _, reply_ids, _ in replies)  # one id per stream, on every chunk
    assert len(set(ids)) == 4 and all(i.startswith("chatcmpl-") for i in ids)
    assert {c for _, _, _, created in replies for c in created} == {2_000_000_000}
    # A change made through another process is seen by the very next stream.
    entries.edit(other, shop["id"], {"content": "second"})
    assert stream_answer(client, headers)[:2] == (200, "second")
    entries.review(other, shop["id"], "rejected")
    assert stream_answer(client, headers)[:2] == (424, "semula_replay_miss")


def test_first_sights_asked_together_get_their_own_entries_with_the_counter(ctx, shop, store, monkeypatch):
    """Versions.entry_at_version: each lookup gets its own entry (None for none) and the counter read with
    it; on PostgreSQL the lookups asked while one is in flight share the next statement."""
    texts = [f"q{n}" for n in range(6)]
    fingerprints = {
        text: save_entry(ctx, "shop", text, {"content": f"to {text}"})["fingerprint"] for text in texts
    }
    fingerprints["absent"] = "v1:" + "0" * 64
    project = projects.get_row(ctx, "shop")
    statements, in_flight = [], threading.Event()
    if store.dialect == "postgresql":  # the statement of PostgreSQL's batched lookups (store._read)
        from semula.service import versions

        read, joined = store._read, threading.Condition()
        waiting: list[set] = []  # the keys of each batch made (VersionReads: the lookups not sent yet)

        class Joined(set):
            def add(self, key):
                super().add(key)
                with joined:
                    joined.notify_all()

        class Batch(versions._Batch):
            def __init__(self):
                super().__init__()
                self.keys = Joined()
                waiting.append(self.keys)

        def slow_read(name, *args, **kwargs):  # the first lookup's lasts until every other one has asked
            statements.append(name)
            if name == "entries_at_version_1" and not in_flight.is_set():
                in_flight.set()
                with joined:
                    assert joined.wait_for(lambda: len(waiting[-1]) == 6, 10), "the others did not ask"
            return read(name, *args, **kwargs)

        monkeypatch.setattr(versions, "_Batch", Batch)
        monkeypatch.setattr(store, "_read", slow_read)
    got: dict[str, tuple] = {}

    def look(name):
        got[name] = entries.lookup_at(ctx, project, fingerprints[name])

    threads = {name: threading.Thread(target=look, args=(name,)) for name in fingerprints}
    threads["q0"].start()
    if store.dialect == "postgresql":
        assert in_flight.wait(5)
    for name, thread in threads.items():
        if name != "q0":
            thread.start()
    for thread in threads.values():
        thread.join(10)

    def content(row):
        return json.loads(row["response"])["choices"][0]["message"]["content"] if row else None

    assert {name: content(row) for name, (row, _) in got.items()} == {
        **{text: f"to {text}" for text in texts},
        "absent": None,
    }
    assert {at for _, at in got.values()} == {store.version("wsp_default")}
    if store.dialect == "postgresql":
        # The first alone, then the other six together (the statement for eight, padded:
        # semula.db.postgres.BATCH_SIZES).
        lookups = [name for name in statements if "at_version" in name]
        assert lookups == ["entries_at_version_1", "entries_at_version_8"]


LONG = (
    "Your parcel left the warehouse on Monday and the carrier expects to deliver it on Thursday "
    "between nine and twelve; if it has not arrived by Friday, reply here and we send a new one. "
) * 3


def test_once_the_cache_is_half_full_answers_are_kept_packed_and_replied_unchanged(
    ctx, app, client, make_token, entry_queries, monkeypatch
):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    texts = [f"question {i}" for i in range(12)]
    for text in texts:
        save_entry(ctx, "shop", text, {"content": f"{text}: {LONG}"})
    cache = app.wsgi_app.hits
    cache.max_bytes = 10 * (hits.HIT + 1100)  # half full after some five kept answers
    headers = make_token("admin")
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.5)
    first = [client.post(URL, json=request_for(t), headers=headers).json for t in texts for _ in range(2)]
    kept = [k for _, k in cache.held()]
    assert any(k.packed for k in kept) and any(not k.packed for k in kept)
    assert all(len(k.data) < 0.7 * 1100 for k in kept if k.packed)
    entry_queries.clear()
    again = [client.post(URL, json=request_for(t), headers=headers).json for t in texts for _ in range(2)]
    served_kept = len(texts) * 2 - entry_queries.count("entry_by_fingerprint")
    assert served_kept >= 2 * sum(k.packed for k in kept)  # the packed ones among them
    for before, after in zip(first, again, strict=True):
        assert after["id"] != before["id"] and after["created"] == 2_000_000_000
        assert {**after, "id": None} == {**before, "id": None}  # byte for byte but the fresh id


def test_a_stream_kept_packed_is_replied_whole(shop, app, client, make_token, entry_queries):
    cache = app.wsgi_app.hits
    cache._bytes = cache.max_bytes // 2 + 1  # as if half full of other hits: what is kept now is packed
    headers = make_token("viewer", scope="replay")
    assert [stream_answer(client, headers)[:2] for _ in range(2)] == [(200, "first")] * 2
    [(_, kept)] = cache.held()
    entry_queries.clear()
    replies = [stream_answer(client, headers) for _ in range(3)]
    assert "entry_by_fingerprint" not in entry_queries
    assert {r[:2] for r in replies} == {(200, "first")} and len({next(iter(r[2])) for r in replies}) == 3
    assert kept.packed


def held_by(key, held, share_of_dict):
    """The bytes a kept hit's own objects take (sys.getsizeof): its key, the bytes it is held as and
    its slot in the dict."""
    return sys.getsizeof(key) + sys.getsizeof(held) + share_of_dict


def test_the_cost_of_a_kept_hit_and_of_a_note_is_what_they_hold(ctx, app, client, make_token):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    texts = [f"question {i}" for i in range(200)]
    for text in texts:
        save_entry(ctx, "shop", text)
    cache = app.wsgi_app.hits
    headers = make_token("admin")
    for text in texts:
        for _ in range(2 if text.endswith(("0", "2", "4", "6", "8")) else 1):
            assert answer(client, headers, request_for(text))[0] == 200
    share = (sys.getsizeof(cache._kept) - sys.getsizeof({})) / len(cache._kept)
    kept = [(k, v) for k, v in cache._kept.items() if v is not hits.SEEN]
    noted = [k for k, v in cache._kept.items() if v is hits.SEEN]
    assert len(kept) == 100 and len(noted) == 100
    for key, held in kept:
        assert held_by(key, held, share) <= hits.cost(key, held) <= held_by(key, held, share) * 1.3
    assert sys.getsizeof(noted[0]) + share <= hits.NOTED <= (sys.getsizeof(noted[0]) + share) * 1.5


def shared_by(shared, share_of_table):
    """The bytes a Shared's own objects take: itself, its project's id and name, its request, its
    recorded headers, its key in the table and its slot there."""
    own = [shared, shared.project, *shared.project.values(), shared.workspace_id, shared.ident]
    own += [shared.request, shared.request.__dict__, shared.request.model, shared.headers]
    own += [*shared.headers, *(text for pair in shared.headers for text in pair)]
    return sum(map(sys.getsizeof, own)) + share_of_table


def test_recorded_provider_headers_are_charged_once_for_each_set_of_them_a_kept_hit_uses(
    ctx, app, client, make_token, entry_queries
):
    """Recorded headers mostly differ per answer (timings, rate limits): then each kept hit has a
    Shared of its own, and the cache is charged what each of them holds, headers and all."""
    projects.create(ctx, {"name": "recorded", "mode": "replay"})
    texts = [f"question {i}" for i in range(40)]
    for text in texts:
        save_entry(ctx, "recorded", text)
    bundle = json.loads(b"".join(bundles.export_bundle(ctx, "recorded")))
    for n, entry in enumerate(bundle["entries"]):
        if n % 2:
            recorded = {f"x-ratelimit-remaining-{k}": f"{n:03}" * 60 for k in ("requests", "tokens")}
            entry["meta"] = {"headers": recorded}
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    assert bundles.import_bundle(ctx, "shop", io.BytesIO(json.dumps(bundle).encode()))["created"] == 40
    auth = make_token("admin")
    for text in texts:
        for _ in range(2):
            client.post(URL, json=request_for(text), headers=auth)
    cache = app.wsgi_app.hits
    kept = list(cache.held())
    assert len(kept) == 40
    entry_queries.clear()
    headed = next(v for _, v in kept if v.headers)
    text = next(t for t in texts if t in json.dumps(entries.get(ctx, headed.entry_id)["request"]))
    replayed = client.post(URL, json=request_for(text), headers=auth)
    assert "entry_by_fingerprint" not in entry_queries  # served kept, headers and all
    assert replayed.headers["x-ratelimit-remaining-tokens"] == headed.headers[1][1]

    shareds = {id(v.shared): v.shared for _, v in kept}.values()
    assert len(shareds) == 21  # one for the 20 hits without headers, one for each with them
    assert {s.users for s in shareds if s.headers} == {1} and cache._shared == {s.ident: s for s in shareds}
    assert cache._bytes == sum(hits.cost(k, v) for k, v in cache._kept.items()) + sum(s.size for s in shareds)
    share = (sys.getsizeof(cache._kept) - sys.getsizeof({})) / len(cache._kept)
    table_share = (sys.getsizeof(cache._shared) - sys.getsizeof({})) / len(cache._shared)
    for key, hit in kept:
        if hit.headers:
            own = held_by(key, cache._kept[key], share) + shared_by(hit.shared, table_share)
            charged = hits.cost(key, cache._kept[key]) + hit.shared.size
            assert own <= charged <= own * 1.3


def test_with_restamp_recorded_an_answer_recorded_without_stamps_gets_fresh_ones_every_time(
    ctx, shop, client, make_token
):
    """An agent's answer has no recorded id or created: with restamp `recorded` each reply is stamped
    afresh, as a render does, never frozen at the first kept reply's stamps."""
    projects.update(ctx, "shop", {"restamp": "recorded"})
    headers = make_token("viewer", scope="replay")
    bodies = [client.post(URL, json=BODY, headers=headers).json for _ in range(5)]
    assert {b["choices"][0]["message"]["content"] for b in bodies} == {"first"}
    assert len({b["id"] for b in bodies}) == 5


def test_with_restamp_recorded_an_answer_with_its_own_stamps_is_kept_and_replies_them(
    ctx, shop, client, make_token, entry_queries
):
    """A provider's answer (record-through, an imported bundle) has its own id and created: with
    restamp `recorded` every reply has them, so it is kept as any other hit."""
    bundle = json.loads(b"".join(bundles.export_bundle(ctx, "shop")))
    bundle["entries"][0]["response"].update(id="chatcmpl-recorded", created=1700000000)
    projects.create(ctx, {"name": "stamped", "mode": "replay"})
    assert bundles.import_bundle(ctx, "stamped", io.BytesIO(json.dumps(bundle).encode()))["created"] == 1
    projects.update(ctx, "stamped", {"restamp": "recorded"})
    headers = make_token("viewer", scope="replay")
    url = "/p/stamped/v1/chat/completions"
    bodies = [client.post(url, json=BODY, headers=headers).json for _ in range(2)]
    entry_queries.clear()
    bodies += [client.post(url, json=BODY, headers=headers).json for _ in range(3)]
    assert "entry_by_fingerprint" not in entry_queries  # kept
    assert {(b["id"], b["created"], b["choices"][0]["message"]["content"]) for b in bodies} == {
        ("chatcmpl-recorded", 1700000000, "first")
    }


def test_a_hit_that_fails_to_reply_is_logged_once_as_an_error(shop, app, client, make_token, monkeypatch):
    calllog = app.extensions["semula"]["calllog"]
    logged = []
    record = calllog.record
    monkeypatch.setattr(calllog, "record", lambda row: logged.append(row["outcome"]) or record(row))
    headers = make_token("viewer", scope="replay")
    warm(client, headers, times=2)  # kept after the second

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(hits.HitCache, "reply", broken)
    logged.clear()
    assert client.post(URL, json=BODY, headers=headers).status_code == 500
    assert logged == ["error"]


def test_a_full_cache_drops_the_oldest_and_copies_its_dict_before_the_front_grows_long():
    """Each eviction leaves an empty slot at the dict's front that the next one walks past; the cache
    copies the dict after sqrt(100 n) evictions, keeping the oldest-first order."""
    cache = hits.HitCache(max_bytes=hits.cost(b"k" * 32, hits.SEEN) * 1000)
    keys = [n.to_bytes(32, "big") for n in range(20_000)]
    for key in keys:
        cache._put(key, hits.SEEN, admitted=True)
    assert list(cache._kept) == keys[-1000:]
    assert cache._dropped * cache._dropped <= 100 * len(cache._kept)
    assert cache.evicted == 19_000  # what /metrics reports as semula_kept_evicted_total


def kept_series(client) -> dict[str, float]:
    """The kept hits' series on /metrics, as this process's scrape gives them."""
    samples = metric_samples(client.get("/metrics").get_data(as_text=True))
    return {
        name: metric_value(samples, name)
        for name in ("semula_kept_hits_total", "semula_kept_evicted_total", "semula_kept_bytes")
    }


def test_metrics_report_the_kept_hits_served_the_evictions_and_the_bytes_held(
    ctx, app, client, make_token, entry_queries
):
    """A test suite's requests cycling through more than the budget holds: /metrics says how many
    were answered kept (those that read no entry), that the cache dropped some, and what it holds."""
    headers = make_token("admin")
    texts, cache, one = larger_cycle(ctx, app, client, headers)
    # The caches of earlier tests' apps, which the gauge would sum with this one's; a large body's
    # parse in an earlier test froze what was alive then (semula/core/jsonio.py), those apps with it.
    gc.unfreeze()
    gc.collect()
    before = kept_series(client)
    entry_queries.clear()
    for _ in range(10):
        assert {answer(client, headers, request_for(text))[0] for text in texts} == {200}
    after = kept_series(client)
    reads = entry_queries.count("entry_by_fingerprint")
    assert 0 < reads < 400
    assert after["semula_kept_hits_total"] - before["semula_kept_hits_total"] == 400 - reads
    assert after["semula_kept_evicted_total"] - before["semula_kept_evicted_total"] > 0
    assert after["semula_kept_bytes"] == cache.held_bytes <= cache.max_bytes
    assert cache.held_bytes > 20 * one


def test_a_hit_that_fails_to_be_kept_is_answered_all_the_same(
    shop, app, client, make_token, monkeypatch, caplog
):
    """Keeping a hit is a cache's work: when it fails (a bug, memory), the call is answered as found and
    its failure logged, not turned into a 500."""

    def failing(*args, **kwargs):
        raise RuntimeError("the cache broke")

    monkeypatch.setattr(app.wsgi_app.hits, "keep", failing)
    calllog = app.extensions["semula"]["calllog"]
    logged = []
    record = calllog.record
    monkeypatch.setattr(calllog, "record", lambda row: logged.append(row["outcome"]) or record(row))
    headers = make_token("viewer", scope="replay")
    with caplog.at_level("ERROR", logger="semula.web"):
        assert warm(client, headers) == [(200, "first")] * 3
        stream = client.post(URL, json={**BODY, "stream": True}, headers=headers)
    assert stream.status_code == 200 and b"first" in stream.data and stream.data.endswith(b"data: [DONE]\n\n")
    assert caplog.text.count("a replay hit was not kept") == 4
    assert logged == ["hit"] * 4  # each call logged once, as what it was


def test_a_hit_its_bytes_cannot_hold_leaves_no_shared_row_behind(shop, app, client, make_token, monkeypatch):
    """A hit that fails to be made into bytes (a stamp orjson cannot write) is not kept, and the Shared
    made for it goes again: no kept hit uses it, so nothing else would ever drop it. (The request
    stays noted as seen, so its second and third calls each try to keep it.)"""
    cache = app.wsgi_app.hits

    def failing(*args, **kwargs):
        raise TypeError("not JSON")

    monkeypatch.setattr(hits, "_encode", failing)
    headers = make_token("viewer", scope="replay")
    assert warm(client, headers) == [(200, "first")] * 3
    assert cache._shared == {} and cache._numbers == {} and list(cache._kept.values()) == [hits.SEEN]
    assert cache._bytes == hits.NOTED
    monkeypatch.undo()
    assert warm(client, headers) == [(200, "first")] * 3
    assert len(cache._shared) == len(cache._numbers) == 1 and list(cache.held())


def test_the_kept_hits_budget_is_the_setting(store, settings):
    from semula.web import create_app

    app = create_app(replace(settings, hit_cache_mb=3), store)
    assert app.wsgi_app.hits.max_bytes == 3 * 1024 * 1024


# --- checked by notice (SEMULA_CHANGE_CHECK=notify) ---------------------------------------------

WORKSPACE = "wsp_default"


@pytest.fixture
def listening(app, store):
    """The app's Versions, listening for notices (as `semula serve` makes it before its first request)."""
    versions = app.extensions["semula"]["versions"]
    versions.listen(store)
    if versions.cache is not None:
        assert versions.cache.wait_moved(0, 10), "the listener did not start"
        assert versions.cache.listening
    return versions


@pytest.fixture
def counter_reads(store, listening, monkeypatch):
    """How many times the store read a workspace's change counter from the database."""
    reads: list[str] = []
    if store.dialect != "postgresql":
        return reads
    read = store.version

    def counting(workspace_id):
        reads.append(workspace_id)
        return read(workspace_id)

    monkeypatch.setattr(store, "version", counting)
    return reads


def caught_up(versions, store, other) -> None:
    """Wait until this app's notices cover what the other process has committed (on SQLite there is
    nothing to wait for: its version() sees a commit at once)."""
    cache = versions.cache
    committed = other.store.version(WORKSPACE)  # read from the database: the other store does not listen
    deadline = time.monotonic() + 10
    while True:
        epoch = cache.epoch if cache is not None else 0
        if versions.version(store, WORKSPACE) == committed:
            return
        assert cache is not None, "SQLite's counter did not follow a commit"
        assert cache.wait_moved(epoch, max(0.0, deadline - time.monotonic())), "no notice came"


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__ for c in CHANGES])
def test_a_change_made_elsewhere_is_seen_once_its_notice_has_come(
    shop, other, store, listening, client, make_token, change
):
    headers = make_token("admin")
    assert warm(client, headers) == [(200, "first")] * 3
    change(other, shop)
    caught_up(listening, store, other)
    assert answer(client, headers, PROBES.get(change, BODY)) == CHANGES[change]


def test_kept_hits_read_no_counter_while_the_process_listens(
    shop, other, store, listening, client, make_token, counter_reads
):
    headers = make_token("admin")
    assert warm(client, headers) == [(200, "first")] * 3
    reads_before = len(counter_reads)
    assert [answer(client, headers) for _ in range(5)] == [(200, "first")] * 5
    assert len(counter_reads) == reads_before  # PostgreSQL: remembered; SQLite: never read here
    edit(other, shop)
    caught_up(listening, store, other)
    assert answer(client, headers) == (200, "second")


def probe(change, n):
    """The request a change is probed with, as a first sight (bytes of its own)."""
    return {**PROBES.get(change, BODY), "user": f"probe {n}"}


@pytest.mark.parametrize("change", {**CHANGES, **PROJECT_CHANGES}, ids=lambda c: c.__name__)
def test_first_sights_read_no_entry_while_the_process_listens_and_see_a_change_once_its_notice_has_come(
    shop, other, store, listening, client, make_token, entry_queries, counter_reads, change
):
    """Decision 0081: a listening process remembers a first sight's entry row with the counter read
    with it, and serves it while that counter is the one it remembers (a kept hit's rule)."""
    headers = make_token("admin")
    assert answer(client, headers, fresh(0)) == (200, "first")  # read, and remembered
    queries, reads = len(entry_queries), len(counter_reads)
    assert [answer(client, headers, fresh(n)) for n in range(1, 4)] == [(200, "first")] * 3
    if store.dialect == "postgresql":
        assert (len(entry_queries), len(counter_reads)) == (queries, reads)  # nothing read
    change(other, shop)
    caught_up(listening, store, other)
    expected = {**CHANGES, **PROJECT_CHANGES}[change]
    assert [answer(client, headers, probe(change, n)) for n in range(4, 6)] == [expected] * 2


def test_an_entry_read_that_a_notice_overtook_is_not_remembered(shop, other, store, listening, monkeypatch):
    """A change that commits while a first sight's entry is being read, its notice arriving before the
    row is remembered: the row read must not be served after it (decision 0081)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite remembers no entry")
    cache = listening.cache
    every = store.all

    def overtaken(name, /, **params):
        found = every(name, **params)  # the entry before the change
        epoch = cache.epoch
        edit(other, shop)  # commits, and its notice comes before the row read is remembered
        assert cache.wait_moved(epoch, 10), "no notice came"
        return found

    project = projects.get_row(other, "shop")
    monkeypatch.setattr(store, "all", overtaken)
    row, before = listening.entry_at_version(store, WORKSPACE, project["id"], shop["fingerprint"])
    monkeypatch.setattr(store, "all", every)
    assert not cache.entries
    row, after = listening.entry_at_version(store, WORKSPACE, project["id"], shop["fingerprint"])
    assert after != before and "second" in row["response"]


def test_remembered_entries_stay_within_their_bounds_and_a_served_row_is_a_copy(monkeypatch):
    from semula.service import versions

    monkeypatch.setattr(versions, "ENTRY_ROWS", 3)
    cache = ChangeCache()
    cache.heard(None)  # listening
    for n in range(3):
        row, _ = cache.entry(("p", n), "w", lambda n=n: ({"id": f"e{n}", "response": "x"}, 7))
    assert len(cache.entries) == 3
    row, _ = cache.entry(("p", 3), "w", lambda: ({"id": "e3", "response": "x"}, 7))
    assert list(cache.entries) == [("p", 3)]  # full: the others were forgotten
    row["response"] = "changed by its caller"
    again, version = cache.entry(("p", 3), "w", lambda: pytest.fail("read again"))
    assert (again, version) == ({"id": "e3", "response": "x"}, 7)
    monkeypatch.setattr(versions, "ENTRY_BYTES", 600)
    cache.entry(("p", 4), "w", lambda: ({"id": "e4", "response": "y" * 100}, 7))
    assert list(cache.entries) == [("p", 4)]
    cache.heard("w")  # a change of the workspace: its counter is forgotten, so are its rows' uses
    fresh_row, _ = cache.entry(("p", 4), "w", lambda: ({"id": "e4", "response": "z"}, 8))
    assert fresh_row["response"] == "z"
    cache.lost()
    assert not cache.entries


def test_a_counter_read_that_a_notice_overtook_is_not_remembered(shop, other, store, listening, monkeypatch):
    """A change that commits while the counter is being read, its notice arriving before the value
    is remembered: that notice forgot nothing (nothing was remembered yet), so the value read must
    not be remembered either, or every kept hit after would miss the change (decision 0047)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite remembers no counter")
    cache = listening.cache
    read = store.version

    def overtaken(workspace_id):
        found = read(workspace_id)  # the counter before the change
        epoch = cache.epoch
        edit(other, shop)  # commits, and its notice comes before the value read is remembered
        assert cache.wait_moved(epoch, 10), "no notice came"
        return found

    monkeypatch.setattr(store, "version", overtaken)
    before = listening.version(store, WORKSPACE)
    monkeypatch.setattr(store, "version", read)
    after = other.store.version(WORKSPACE)  # read from the database: the other store does not listen
    assert after != before
    assert listening.version(store, WORKSPACE) == after


def test_while_the_listening_is_lost_the_next_request_sees_every_change(
    shop, other, store, listening, client, make_token, counter_reads, db_url
):
    if store.dialect != "postgresql":
        pytest.skip("SQLite has no listening connection to lose")
    cache = listening.cache
    headers = make_token("admin")
    assert warm(client, headers) == [(200, "first")] * 3
    epoch = cache.epoch
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (store.listeners["changes"].backend,))
    while cache.listening:  # the listener notices the loss and forgets what it remembered
        assert cache.wait_moved(epoch, 10), "the lost listening was not noticed"
        epoch = cache.epoch
    reads_before = len(counter_reads)
    edit(other, shop)  # no notice reaches this process now
    assert answer(client, headers) == (200, "second")  # the very next request, as without notices
    assert len(counter_reads) > reads_before
    while not cache.listening:  # and it listens again
        assert cache.wait_moved(epoch, 10), "the listener did not come back"
        epoch = cache.epoch
    assert answer(client, headers) == (200, "second")
    reads_before = len(counter_reads)
    assert [answer(client, headers) for _ in range(3)] == [(200, "second")] * 3
    assert len(counter_reads) == reads_before


def test_a_closed_store_stops_listening(db_url):
    store = connect(db_url, pool_size=1)
    versions = Versions()
    versions.listen(store)
    cache = versions.cache
    store.close()
    if cache is not None:
        assert not cache.listening and not store.listeners["changes"]._thread.is_alive()


def test_a_listener_that_cannot_connect_says_so_once_and_logs_no_part_of_the_url(caplog, monkeypatch):
    from semula.db import postgres

    monkeypatch.setattr(postgres, "RELISTEN_AFTER", 0.01)  # attempts 10, 20, 40 ms apart
    canary = "pw-canary-5f0c2a9e"
    url = f"postgresql://semula:{canary}@127.0.0.1:1/semula?connect_timeout=2"
    listener = postgres.Listener(url, (postgres.CHANGES_CHANNEL,), postgres.LOST["changes"])
    cache = ChangeCache()
    with caplog.at_level("WARNING", logger="semula.db"):
        listener.subscribe(postgres.CHANGES_CHANNEL, cache.heard, cache.lost)  # starts it
        while cache.epoch < 3:  # three attempts failed, none listening
            assert cache.wait_moved(cache.epoch, 10)
        listener.stop()
    assert not cache.listening
    [record] = [r for r in caplog.records if "replay change notices lost" in r.getMessage()]
    assert record.error == "OperationalError"
    assert canary not in caplog.text and "127.0.0.1" not in caplog.text
