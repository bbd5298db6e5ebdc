"""The server's own secrets pasted into an answer never reach the database, whoever wrote the answer:
a person through REST, the dashboard or an entry edit, an agent through the CLI or MCP, the answerer
daemon, record-through and a bundle import. SQLite and PostgreSQL.

Each canary is a configured secret (SEMULA_UPSTREAM_KEY, SEMULA_METRICS_TOKEN...) shaped like no
known credential, so only the server's own secrets list can catch it.
"""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client

from semula.service import CLI, Context, bundles, entries, pending, projects, tokens
from semula.surfaces.cli import main
from semula.surfaces.mcp_server import build
from semula.web import create_app
from tests.agent_helpers import in_process_client, park
from tests.answerer_helpers import answerer_project, command, running_daemon, wait_resolved
from tests.bundle_helpers import write_bundle
from tests.helpers import RESPONSES_WEATHER_TOOL, WEATHER_FUNCTION, dashboard_text_answer, wait_for
from tests.integration.test_canary import database_text

CANARIES = {
    "upstream_key": "canary-upstream-7Qm2vX9pL",
    "anthropic_key": "canary-anthropic-3Ew6qA0sD",
    "metrics_token": "canary-metrics-4Rt8yU1oP",
    "answerer_bearer": "canary-bearer-5Gh2jK7lZ",
    "answerer_token": "canary-answerer-9Nb3mC6xV",
    "secret_key": "canary-cookie-secret-8Xc4vB",
}
TEXT = "Use these: " + ", ".join(CANARIES.values()) + "."
STORED_TEXT = "Use these: " + ", ".join(["[REDACTED]"] * len(CANARIES)) + "."
# One character off each: near misses, stored as written.
NEAR = "Not these: " + ", ".join(value[:-1] + "#" for value in CANARIES.values())


@pytest.fixture
def canary_settings(settings):
    return replace(settings, **CANARIES)


@pytest.fixture
def cctx(store, canary_settings):
    return Context(store, canary_settings, CLI)


@pytest.fixture
def capp(store, canary_settings):
    return create_app(canary_settings, store)


@pytest.fixture
def headers(cctx):
    return {"Authorization": f"Bearer {tokens.create(cctx, {'role': 'admin', 'scope': 'full'})['token']}"}


def assert_redacted(db_url: str, entry_id: str, cctx: Context, canaries: dict[str, str] = CANARIES) -> dict:
    """No canary anywhere in the database; the entry holds the answer with [REDACTED] in their place."""
    text = database_text(db_url) + repr(
        cctx.store.all("list_entry_answers", workspace_id=cctx.principal.workspace_id, entry_id=entry_id)
    )
    leaked = [name for name, value in canaries.items() if value in text]
    assert not leaked, f"stored verbatim: {leaked}"
    entry = cctx.store.one("get_entry", workspace_id=cctx.principal.workspace_id, id=entry_id)
    assert NEAR in entry["response"]
    return json.loads(entry["response"])


def answered_entry(cctx: Context, pending_id: str) -> str:
    return wait_for(lambda: pending.get(cctx, pending_id)["entry_id"], what="answered")


def content(response: dict) -> str:
    return response["choices"][0]["message"]["content"]


def test_a_person_through_rest_and_the_held_call_gets_the_redacted_answer(cctx, capp, db_url, headers):
    projects.create(cctx, {"name": "shop", "record_timeout": 30})
    client = capp.test_client()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "the config?"}]}
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(client.post, "/p/shop/v1/chat/completions", json=body, headers=headers)
        shop = projects.get_row(cctx, "shop")
        [parked] = wait_for(lambda: cctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
        answered = client.post(
            f"/api/v1/pending/{parked['id']}/answer", json={"content": f"{TEXT} {NEAR}"}, headers=headers
        )
        assert answered.status_code == 200, answered.json
        reply = held.result(10)
    assert content(reply.json) == f"{STORED_TEXT} {NEAR}"
    again = client.post("/p/shop/v1/chat/completions", json=body, headers=headers)
    assert content(again.json) == f"{STORED_TEXT} {NEAR}"
    assert_redacted(db_url, answered_entry(cctx, parked["id"]), cctx)


def test_a_person_through_the_dashboard(cctx, capp, db_url):
    projects.create(cctx, {"name": "shop"})
    pending_id = park(cctx, "shop", "the config?")
    secret = tokens.create(cctx, {"role": "editor", "scope": "full"})["token"]
    dashboard_text_answer(capp.test_client(), secret, pending_id, f"{TEXT} {NEAR}")
    stored = assert_redacted(db_url, answered_entry(cctx, pending_id), cctx)
    assert content(stored) == f"{STORED_TEXT} {NEAR}"


def test_a_tool_call_from_an_agent_through_the_cli_stays_valid(cctx, capp, db_url, headers):
    projects.create(cctx, {"name": "shop"})
    pending_id = park(cctx, "shop", "weather?", tools=True)
    answer = {"tool_calls": [{"name": "get_weather", "arguments": {"city": f"{TEXT} {NEAR}"}}]}
    client = in_process_client(capp, headers)
    result = CliRunner().invoke(
        main, ["answer", pending_id, "--json", json.dumps(answer)], obj={"client": client}
    )
    assert result.exit_code == 0, result.output
    stored = assert_redacted(db_url, answered_entry(cctx, pending_id), cctx)
    [call] = stored["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": f"{STORED_TEXT} {NEAR}"}


def test_an_agent_through_mcp(cctx, capp, db_url, headers):
    projects.create(cctx, {"name": "shop"})
    pending_id = park(cctx, "shop", "the config?")
    server = build(in_process_client(capp, headers))

    async def session():
        async with Client(server) as client:
            return await client.call_tool(
                "answer_pending", {"pending_id": pending_id, "answer": f"{TEXT} {NEAR}"}
            )

    assert not anyio.run(session).is_error
    assert content(assert_redacted(db_url, answered_entry(cctx, pending_id), cctx)) == f"{STORED_TEXT} {NEAR}"


def test_an_edit_and_a_revert_through_rest(cctx, capp, db_url, headers):
    """An edit redacts; reverting to a revision stored before redaction existed redacts it too."""
    projects.create(cctx, {"name": "shop"})
    pending_id = park(cctx, "shop", "the config?")
    plain = Context(cctx.store, replace(cctx.settings, **dict.fromkeys(CANARIES)), CLI)
    pending.answer(plain, pending_id, f"{TEXT} {NEAR}")  # as an older semula stored it
    entry_id = answered_entry(cctx, pending_id)
    client = capp.test_client()
    edited = client.patch(
        f"/api/v1/entries/{entry_id}", json={"content": f"edited {TEXT} {NEAR}"}, headers=headers
    )
    assert edited.status_code == 200, edited.json
    edited_entry = json.loads(
        cctx.store.one("get_entry", workspace_id=cctx.principal.workspace_id, id=entry_id)["response"]
    )
    assert content(edited_entry) == f"edited {STORED_TEXT} {NEAR}"
    reverted = client.post(f"/api/v1/entries/{entry_id}/revert", json={"revision": 1}, headers=headers)
    assert reverted.status_code == 200, reverted.json
    stored = json.loads(
        cctx.store.one("get_entry", workspace_id=cctx.principal.workspace_id, id=entry_id)["response"]
    )
    assert content(stored) == f"{STORED_TEXT} {NEAR}"
    revisions = cctx.store.all("list_revisions", workspace_id=cctx.principal.workspace_id, entry_id=entry_id)
    assert [r["number"] for r in revisions][-1] == 3
    assert all(value not in revisions[-1]["response"] for value in CANARIES.values())


def test_the_answerer_daemon(cctx, db_url, tmp_path):
    # The daemon refuses a bearer without a URL and a token without a server: those two are left out.
    canaries = {k: v for k, v in CANARIES.items() if k not in ("answerer_bearer", "answerer_token")}
    argv = command("echo", "Use these: " + ", ".join(canaries.values()) + f". {NEAR}")
    settings = replace(cctx.settings, answerer_bearer=None, answerer_token=None, answerer_command=argv)
    ctx = Context(cctx.store, settings, CLI)
    answerer_project(ctx, "shop")
    pending_id = park(ctx, "shop", "the config?")
    with running_daemon(ctx, tmp_path / "out"):
        wait_resolved(ctx, pending_id)
    stored = assert_redacted(db_url, answered_entry(ctx, pending_id), ctx, canaries)
    assert content(stored) == "Use these: " + ", ".join(["[REDACTED]"] * len(canaries)) + f". {NEAR}"


@pytest.mark.parametrize("stream", [False, True])
def test_record_through(cctx, db_url, headers, stream):
    """The fake provider echoes the prompt back: the prompt holds the canaries."""
    from tests.fake_upstream import FakeUpstream

    fake = FakeUpstream()
    try:
        ctx = Context(cctx.store, replace(cctx.settings, upstream_url=fake.url), CLI)
        projects.create(ctx, {"name": "shop", "record_through": True})
        client = create_app(ctx.settings, ctx.store).test_client()
        body = {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": f"{TEXT} {NEAR}"}],
            "stream": stream,
        }
        reply = client.post("/p/shop/v1/chat/completions", json=body, headers=headers)
        sent = reply.get_data(as_text=True)  # a stream is recorded once it has been read whole
        assert reply.status_code == 200 and "[REDACTED]" in sent, sent
        assert not any(value in sent for value in CANARIES.values())
        [row] = ctx.store.all("export_entries", project_id=projects.get_row(ctx, "shop")["id"])
        stored = assert_redacted(db_url, row["id"], ctx)
        assert content(stored) == f"upstream says: {STORED_TEXT} {NEAR}"
    finally:
        fake.close()


def test_a_bundle_import_of_a_sequence(cctx, capp, db_url, headers, tmp_path):
    """A bundle written where these secrets mean nothing, imported here: answers 1 and 2 redacted."""
    path = tmp_path / "made-elsewhere.json"
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "the config?"}]}
    write_bundle(path, [(request, [f"{TEXT} {NEAR}", f"again {TEXT} {NEAR}"])])
    assert CANARIES["upstream_key"] in path.read_text()
    projects.create(cctx, {"name": "shop"})
    imported = capp.test_client().post(
        "/api/v1/projects/shop/import", data=path.read_bytes(), headers=headers
    )
    assert imported.status_code == 200 and imported.json["created"] == 1, imported.json
    [row] = cctx.store.all("export_entries", project_id=projects.get_row(cctx, "shop")["id"])
    assert content(assert_redacted(db_url, row["id"], cctx)) == f"{STORED_TEXT} {NEAR}"
    [second] = cctx.store.all(
        "list_entry_answers", workspace_id=cctx.principal.workspace_id, entry_id=row["id"]
    )
    assert content(json.loads(second["response"])) == f"again {STORED_TEXT} {NEAR}"


def test_export_check_finds_connection_strings_in_stored_answers(cctx):
    """An answer a person wrote may hold a connection string (it is kept: only the server's own
    secrets go from answers); export --check names where, in answer 1 and in answer 2."""
    projects.create(cctx, {"name": "shop"})
    azure = (
        "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSR"
        "Z6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net"
    )
    first = park(cctx, "shop", "storage?")
    pending.answer(cctx, first, azure)
    entry_id = answered_entry(cctx, first)
    second = cctx.store.one("get_entry", workspace_id=cctx.principal.workspace_id, id=entry_id)
    entries.save(
        cctx.store,
        cctx,
        project_id=second["project_id"],
        fingerprint=second["fingerprint"],
        request=json.loads(second["request"]),
        response=json.loads(second["response"])
        | {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "redis://:s3cretRedisPass@cache:6379/0"},
                }
            ]
        },
        chunks=None,
        actor="human",
        summary="",
        seq=2,
    )
    found, total = bundles.find_stored_secrets(cctx, "shop")
    assert total == 2
    assert found == [
        "entries[0].response.choices[].message.content",
        "entries[0].later_answers[].response.choices[].message.content",
    ]
    exported = b"".join(bundles.export_bundle(cctx, "shop"))
    assert b"s3cretRedisPass" not in exported and b"Eby8vdM02x" not in exported
    assert json.loads(io.BytesIO(exported).read())["entries"][0]["response"]["choices"][0]["message"][
        "content"
    ].endswith("AccountKey=[REDACTED];EndpointSuffix=core.windows.net")


ANTHROPIC_REQUEST = {
    "model": "claude-haiku-4-5",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "weather?"}],
    "tools": [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER_FUNCTION["parameters"],
        }
    ],
}
RESPONSES_REQUEST = {"model": "gpt-4o", "input": "weather?", "tools": [RESPONSES_WEATHER_TOOL]}


def anthropic_input(response: dict) -> dict:
    [block] = [b for b in response["content"] if b["type"] == "tool_use"]
    return block["input"]


def responses_arguments(response: dict) -> dict:
    [call] = [item for item in response["output"] if item["type"] == "function_call"]
    return json.loads(call["arguments"])


@pytest.mark.parametrize(
    "api, request_, read",
    [
        ("anthropic.messages", ANTHROPIC_REQUEST, anthropic_input),
        ("openai.responses", RESPONSES_REQUEST, responses_arguments),
    ],
)
def test_a_tool_call_answer_in_the_other_apis(cctx, db_url, api, request_, read):
    """Anthropic's tool input is an object, the Responses API's arguments a JSON string: both keep
    their shape, with the canaries gone."""
    project = projects.create(cctx, {"name": "shop"})
    pending_id = pending.park(cctx, project, f"v1:test:{api}", request_, False, api=api)
    answer = {"tool_calls": [{"name": "get_weather", "arguments": {"city": f"{TEXT} {NEAR}"}}]}
    pending.answer(cctx, pending_id, answer)
    stored = assert_redacted(db_url, answered_entry(cctx, pending_id), cctx)
    assert read(stored) == {"city": f"{STORED_TEXT} {NEAR}"}
