"""Issue 21 acceptance: sessions and sequences through gunicorn with the official openai SDK."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests

from semula.service import bundles, pending, projects
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance

LOOP = {"model": "gpt-4o", "messages": [{"role": "user", "content": "What next?"}]}


def in_session(openai_client, server, session: str):
    return openai_client(server, "shop/s/" + session)


def ask(client) -> str:
    return client.chat.completions.create(**LOOP).choices[0].message.content


def parked(ctx, shop) -> list[dict]:
    return ctx.store.all("parked_in_project", project_id=shop["id"])


def record_loop(ctx, shop, client, texts: list[str]) -> None:
    """An agent loop sends LOOP once per answer; each call parks and is answered in turn."""
    for seq, text in enumerate(texts, start=1):
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(ask, client)
            [row] = wait_for(lambda: parked(ctx, shop), what="a parked call")
            assert pending.get(ctx, row["id"])["seq"] == seq
            pending.answer(ctx, row["id"], {"content": text})
            assert future.result(30) == text


def test_an_agent_loop_records_and_replays_its_sequence(start_server, ctx, shop, openai_client, token):
    projects.update(ctx, "shop", {"sequences": "record"})
    server = start_server()
    record_loop(ctx, shop, in_session(openai_client, server, "rec"), ["search", "summarise"])
    projects.update(ctx, "shop", {"mode": "replay"})

    first, second = in_session(openai_client, server, "s1"), in_session(openai_client, server, "s2")
    assert [ask(first), ask(first)] == ["search", "summarise"]
    assert ask(second) == "search"  # sessions count apart
    assert ask(first) == "summarise"  # repeat_last
    assert [ask(openai_client(server)) for _ in range(3)] == ["search"] * 3  # no session: as before

    projects.update(ctx, "shop", {"after_last": "cycle"})
    assert [ask(second), ask(second)] == ["summarise", "search"]
    projects.update(ctx, "shop", {"after_last": "fail"})
    reset = requests.post(
        f"{server.url}/api/v1/projects/shop/sessions/s1/reset",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert reset.status_code == 200
    assert [ask(first), ask(first)] == ["search", "summarise"]
    with pytest.raises(openai.APIStatusError) as info:
        ask(first)
    assert info.value.status_code == 424 and info.value.code == "semula_sequence_exhausted"
    assert "call 3 of this request in session 's1'; 2 answers are recorded" in info.value.message

    # Exported, imported into another project, replayed there.
    bundle = b"".join(bundles.export_bundle(ctx, "shop"))
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    bundles.import_bundle(ctx, "copy", io.BytesIO(bundle))
    settings = projects.update(ctx, "copy", {"mode": "replay"})  # an import resets the operator's mode
    assert (settings["sequences"], settings["after_last"]) == ("record", "fail")  # from the bundle
    projects.update(ctx, "copy", {"after_last": "repeat_last"})
    copy = openai_client(server, "copy/s/c")
    assert [ask(copy), ask(copy), ask(copy)] == ["search", "summarise", "summarise"]


def test_identical_calls_in_flight_in_one_session_record_answers_one_and_two(
    start_server, ctx, shop, openai_client
):
    projects.update(ctx, "shop", {"sequences": "record"})
    server = start_server(workers=2)
    client = in_session(openai_client, server, "race")
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(ask, client) for _ in range(2)]
        rows = wait_for(lambda: len(parked(ctx, shop)) == 2 and parked(ctx, shop), what="two parked calls")
        by_seq = {pending.get(ctx, r["id"])["seq"]: r["id"] for r in rows}
        assert sorted(by_seq) == [1, 2]
        pending.answer(ctx, by_seq[1], {"content": "answer one"})
        pending.answer(ctx, by_seq[2], {"content": "answer two"})
        assert sorted(f.result(30) for f in futures) == ["answer one", "answer two"]
    projects.update(ctx, "shop", {"mode": "replay"})
    replay = in_session(openai_client, server, "again")
    assert [ask(replay), ask(replay)] == ["answer one", "answer two"]
