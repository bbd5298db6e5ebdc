"""`semula replay` answering while its bundle is imported (semula/surfaces/replay_loading.py): an entry
the import has not reached is answered as the imported database answers it, a miss is never answered
before the import ended, and a bundle that fails to import answers 503, stops and keeps nothing.
SQLite only: `semula replay` serves from a temporary SQLite database."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from werkzeug.test import Client

from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, pending, projects
from semula.surfaces import replay_cache, replay_server
from semula.surfaces.replay_loading import Loading
from semula.web import create_app
from tests.bundle_helpers import write_bundle
from tests.helpers import wait_for

HELLO = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello"}]}
GOODBYE = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say goodbye"}]}
FAREWELL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say farewell"}]}
UNKNOWN = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Never recorded"}]}
CALLS = "/p/default/v1/chat/completions"
REPLAY = {"mode": "replay", "record_timeout": 300}
RECORDING = {"mode": "record", "record_timeout": 300, "sequences": "record"}


@pytest.fixture
def bundle(tmp_path) -> Path:
    (tmp_path / "source").mkdir()
    path = tmp_path / "source" / "llm.json"
    write_bundle(path, [(HELLO, {"content": "Hello there!"}), (GOODBYE, {"content": "Bye!"})])
    return path


def loading(
    tmp_path: Path, bundle: Path, keep: bool = False, changes: dict = REPLAY
) -> tuple[Loading, Client, Context]:
    """A replay server's Loading for `bundle` (with the server's mode `changes`), not started, and a
    client of its app."""
    settings = replay_server.replay_settings(str(tmp_path))
    store = connect(settings.database_url, pool_size=4)
    migrate(store)
    ctx = Context(store, settings, CLI)
    projects.create(ctx, {"name": "default"})
    kept = (tmp_path / "cache", replay_cache.digest("default", settings, changes)) if keep else None
    made = Loading(ctx, "default", bundle, changes, kept)
    return made, Client(made.gate(create_app(settings, made.store))), ctx


def noting_waits(made: Loading) -> threading.Semaphore:
    """Released each time a request starts to wait for the import's end."""
    waiting = threading.Semaphore(0)
    wait = made.wait

    def noted_wait() -> None:
        waiting.release()
        wait()

    made.wait = noted_wait  # type: ignore[method-assign]
    return waiting


def entry_count(ctx: Context) -> int:
    project = projects.get_row(ctx, "default")
    return sum(1 for _ in ctx.store.iterate("export_entries", project_id=project["id"]))


def answer(client: Client, body: dict, url: str = CALLS) -> tuple[int, str]:
    reply = client.post(url, json=body)
    content = reply.json["choices"][0]["message"]["content"] if reply.status_code == 200 else ""
    return reply.status_code, content


def answered_before_the_import(client: Client, body: dict, url: str = CALLS) -> tuple[int, str]:
    """answer(), while the import has not started: a call that waits for it fails the test."""
    got: list[tuple[int, str]] = []
    asking = threading.Thread(
        target=lambda: got.append(answer(Client(client.application), body, url)), daemon=True
    )
    asking.start()
    asking.join(60)
    assert got, "the call waited for the import"
    return got[0]


def run(made: Loading) -> None:
    """Start the import and wait for its end."""
    made.start(on_failure=lambda: None)
    made.done.wait()


def test_a_call_is_answered_from_an_entry_the_import_has_not_reached(tmp_path, bundle):
    made, client, ctx = loading(tmp_path, bundle, keep=True)
    try:
        # The import has not started: the entry is read from the bundle, checked and written ahead.
        assert answered_before_the_import(client, HELLO) == (200, "Hello there!")
        assert entry_count(ctx) == 1 and made.ahead == 1
        # The project is in replay mode with the bundle's settings before anything is served.
        assert projects.get(ctx, "default")["mode"] == "replay"
        run(made)
        made.stop()
        made.check()  # the import found the entry written ahead, as the bundle has it
        assert entry_count(ctx) == 2
        assert answer(client, HELLO) == (200, "Hello there!")
        assert answer(client, GOODBYE) == (200, "Bye!")
        # The database kept holds what the import wrote, not the calls answered meanwhile.
        (kept,) = (tmp_path / "cache").glob("*.db")
        copy = sqlite3.connect(kept)
        assert copy.execute("SELECT count(*) FROM entries").fetchone()[0] == 2
        assert copy.execute("SELECT count(*) FROM call_log").fetchone()[0] == 0
        copy.close()
        assert ctx.store.all("calls_in_project", project_id=projects.get_row(ctx, "default")["id"])
    finally:
        made.stop()
        ctx.store.close()


def test_no_call_is_answered_as_a_miss_before_the_import_ended(tmp_path, bundle):
    # A person edited a request after the export: its fingerprint line still says the old request's.
    text = bundle.read_text()
    assert text.count("Say goodbye") == 1
    bundle.write_text(text.replace("Say goodbye", "Say farewell"))
    made, client, ctx = loading(tmp_path, bundle)
    waiting = noting_waits(made)
    answers: dict[str, tuple[int, str, bool]] = {}

    def ask(name: str, body: dict) -> None:
        status, content = answer(Client(client.application), body)
        answers[name] = (status, content, made.done.is_set())

    asking = [
        threading.Thread(target=ask, args=(name, body))
        for name, body in (("unknown", UNKNOWN), ("old request", GOODBYE), ("edited", FAREWELL))
    ]
    try:
        for thread in asking:
            thread.start()
        for _ in asking:  # each is waiting for the import, none has been answered
            assert waiting.acquire(timeout=60)
        assert answers == {} and entry_count(ctx) == 0
        # A route other than a call waits too (it would list a part of the entries).
        listing: list[int] = []
        entries = "/api/v1/projects/default/entries"
        lister = threading.Thread(
            target=lambda: listing.append(Client(client.application).get(entries).status_code)
        )
        lister.start()
        run(made)
        for thread in [*asking, lister]:
            thread.join(60)
        made.check()
        # Answered after the import, as the imported database answers them: the edited request by
        # the entry the import made of it, the request it replaced and the unknown one as misses.
        assert answers == {
            "unknown": (424, "", True),
            "old request": (424, "", True),
            "edited": (200, "Bye!", True),
        }
        assert listing == [200] and made.ahead == 0
    finally:
        made.stop()
        ctx.store.close()


def test_a_bundle_that_fails_to_import_answers_503_and_keeps_nothing(tmp_path, bundle):
    # The goodbye entry is one the import refuses (its review status); the hello entry is good.
    head, goodbye = bundle.read_text().split("Say goodbye")
    bundle.write_text(head + "Say goodbye" + goodbye.replace('"unreviewed"', '"maybe"', 1))
    made, client, ctx = loading(tmp_path, bundle, keep=True)
    failed = threading.Event()
    try:
        # Answered ahead: its entry is good.
        assert answered_before_the_import(client, HELLO) == (200, "Hello there!")
        made.start(on_failure=failed.set)
        assert failed.wait(60)  # the server is stopped
        with pytest.raises(Exception, match="review_status"):
            made.check()
        reply = client.post(CALLS, json=HELLO)
        assert reply.status_code == 503 and "review_status" in reply.json["error"]["message"]
        assert client.get("/api/v1/projects/default").status_code == 503
        made.stop()
        assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []
    finally:
        made.stop()
        ctx.store.close()


def test_a_bundle_whose_header_is_wrong_fails_before_anything_is_served(tmp_path, bundle):
    bundle.write_text(bundle.read_text().replace('"version": 1', '"version": 99', 1))
    with pytest.raises(Exception, match="version 99"):
        loading(tmp_path, bundle)


def test_a_recording_start_answers_ahead_and_records_only_once_the_import_ended(tmp_path):
    (tmp_path / "source").mkdir()
    bundle = tmp_path / "source" / "llm.json"
    write_bundle(bundle, [(HELLO, [{"content": "one"}, {"content": "two"}]), (GOODBYE, {"content": "Bye!"})])
    made, client, ctx = loading(tmp_path, bundle, keep=True, changes=RECORDING)
    store, project = ctx.store, projects.get_row(ctx, "default")
    in_session = "/p/default/s/a/v1/chat/completions"
    waiting = noting_waits(made)
    try:
        assert projects.get(ctx, "default")["mode"] == "record"
        # Calls 1 and 2 of the session: the bundle's answers, before the import has started.
        for text in ("one", "two"):
            assert answered_before_the_import(client, HELLO, in_session) == (200, text)
        # Call 3 is past the sequence's end: it records answer 3, so it parks only once the import
        # ended (the import would otherwise still be writing the entry it records into).
        third: list[tuple[int, str]] = []
        asking = threading.Thread(
            target=lambda: third.append(answer(Client(client.application), HELLO, in_session))
        )
        asking.start()
        assert waiting.acquire(timeout=60)
        assert store.all("parked_in_project", project_id=project["id"]) == []
        run(made)
        made.check()
        assert made.imported
        rows = wait_for(lambda: store.all("parked_in_project", project_id=project["id"]), what="parked")
        assert pending.get(ctx, rows[0]["id"])["seq"] == 3
        pending.answer(ctx, rows[0]["id"], {"content": "three"})
        asking.join(60)
        assert third == [(200, "three")]
        # The database kept is the bundle's, without what was recorded after its import.
        (kept,) = (tmp_path / "cache").glob("*.db")
        copy = sqlite3.connect(kept)
        assert copy.execute("SELECT max(answers), count(*) FROM entries").fetchone() == (2, 2)
        copy.close()
    finally:
        made.stop()
        store.close()
