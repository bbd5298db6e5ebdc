"""The Responses API dialect through Flask's test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from semula.service import bundles, entries, pending, projects
from tests.helpers import (
    RESPONSES_WEATHER_TOOL,
    answered_post,
    dashboard_text_answer,
    parked,
    typed_events,
    wait_for,
)

URL = "/p/shop/v1/responses"
WEATHER = RESPONSES_WEATHER_TOOL


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def record(ctx, shop, client, headers, body, payload):
    """Post `body`, answer the call it parks with `payload` through the service, return the response."""
    return answered_post(ctx, shop, lambda: client.post(URL, json=body, headers=headers), payload)


def test_plain_text_recorded_then_replayed_with_its_id(ctx, shop, client, admin):
    body = {"model": "gpt-4.1-mini", "input": "Say hi", "instructions": "Be terse."}
    first = record(ctx, shop, client, admin, body, "Hi!")
    assert first.status_code == 200, first.json
    response = first.json
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["id"].startswith("resp_") and response["model"] == "gpt-4.1-mini"
    [message] = response["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "Hi!", "annotations": [], "logprobs": []}]
    assert response["instructions"] == "Be terse."
    assert set(response["usage"]) >= {"input_tokens", "output_tokens", "total_tokens"}

    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(URL, json=body, headers=admin).json
    assert again["id"] == response["id"] and again["output"] == response["output"]
    # A Chat Completions request with the same JSON is another request.
    chat = client.post("/p/shop/v1/chat/completions", json=body, headers=admin)
    assert chat.status_code == 400


def test_the_conversation_view_is_chat_shaped(ctx, shop, client, admin):
    body = {
        "model": "gpt-4.1",
        "instructions": "You help.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}],
        "tools": [WEATHER, {"type": "web_search"}],
        "tool_choice": "required",
    }
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=body, headers=admin)
        [row] = parked(ctx, shop)
        call = pending.get(ctx, row["id"])
        assert call["api"] == "openai.responses" and call["request"] == body
        view = call["conversation"]
        assert view["messages"] == [
            {"role": "system", "content": "You help."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        ]
        assert view["tools"][0]["function"]["name"] == "get_weather"
        assert call["shape"]["skeleton"] == {
            "tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]
        }
        assert "web_search" in call["shape"]["notes"][0]
        with pytest.raises(Exception) as info:
            pending.answer(ctx, row["id"], {"content": "sunny"})
        assert "requires a tool call" in str(info.value)
        with pytest.raises(Exception) as info:
            pending.answer(
                ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {"town": "x"}}]}
            )
        assert "tool_calls[0].arguments" in getattr(info.value, "param", "")
        pending.answer(
            ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
        )
        response = future.result(10).json
    [call_item] = response["output"]
    assert call_item["type"] == "function_call" and call_item["name"] == "get_weather"
    assert json.loads(call_item["arguments"]) == {"city": "Paris"} and call_item["call_id"].startswith(
        "call_"
    )

    # The follow-up: the function's output, continuing the recorded response.
    follow = {
        "model": "gpt-4.1",
        "previous_response_id": response["id"],
        "input": [
            {"type": "function_call_output", "call_id": call_item["call_id"], "output": '{"temp": 21}'}
        ],
        "tools": [WEATHER],
    }
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=follow, headers=admin)
        [row] = wait_for(
            lambda: [r for r in ctx.store.all("parked_in_project", project_id=shop["id"])], what="follow-up"
        )
        view = pending.get(ctx, row["id"])["conversation"]
        # The earlier turn is part of what the answerer sees.
        assert [m["role"] for m in view["messages"]] == ["user", "assistant", "tool"]
        assert view["messages"][1]["tool_calls"][0]["id"] == call_item["call_id"]
        pending.answer(ctx, row["id"], "21 degrees in Paris.")
        final = future.result(10).json
    assert final["output"][0]["content"][0]["text"] == "21 degrees in Paris."
    assert final["previous_response_id"] == response["id"]

    # GET /v1/responses/{id} and its input items.
    got = client.get(f"/p/shop/v1/responses/{response['id']}", headers=admin)
    assert got.status_code == 200 and got.json["output"] == response["output"]
    items = client.get(f"/p/shop/v1/responses/{final['id']}/input_items", headers=admin).json
    assert items["object"] == "list" and items["data"][0]["type"] == "function_call_output"
    missing = client.get("/p/shop/v1/responses/resp_nope", headers=admin)
    assert missing.status_code == 404 and "resp_nope" in missing.json["error"]["message"]


def test_a_follow_up_to_an_unknown_response_is_400_naming_it(ctx, shop, client, admin):
    body = {"model": "gpt-4.1", "previous_response_id": "resp_unknown", "input": "and then?"}
    r = client.post(URL, json=body, headers=admin)
    assert r.status_code == 400
    assert (
        r.json["error"]["code"] == "previous_response_not_found"
        and "resp_unknown" in r.json["error"]["message"]
    )
    assert not ctx.store.all("parked_in_project", project_id=shop["id"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m", "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": "x", "tools": [{"type": "function", "name": "a b"}]}, "tools[0].name"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation"),
        ({"model": "m", "input": "x", "tool_choice": 7}, "tool_choice"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "m", "input": "x", "reasoning": "x"}, "reasoning"),
        ({"model": "m", "input": "x", "include": "x"}, "include"),
        ({"model": "m", "input": "x", "include": [1]}, "include[0]"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "m", "input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
        ({"model": "m", "input": "x", "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ],
)
def test_requests_the_api_refuses_are_400_naming_the_field(ctx, shop, client, admin, body, param):
    r = client.post(URL, json=body, headers=admin)
    assert r.status_code == 400 and r.json["error"]["param"] == param
    assert not ctx.store.all("parked_in_project", project_id=shop["id"])


def test_stream_replays_typed_events(ctx, shop, client, admin):
    body = {"model": "gpt-4.1-mini", "input": "Tell me a story"}
    record(ctx, shop, client, admin, body, "Once upon a time there was a server that remembered everything.")
    r = client.post(URL, json={**body, "stream": True}, headers=admin)
    assert r.status_code == 200 and r.mimetype == "text/event-stream"
    events = typed_events(r.get_data(as_text=True))
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Once upon a time there was a server that remembered everything."


def test_bundle_round_trip_keeps_the_api_and_the_response_id(ctx, shop, client, admin):
    body = {"model": "gpt-4.1-mini", "input": "Bundle me"}
    response = record(ctx, shop, client, admin, body, "Bundled.").json
    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    [item] = json.loads(exported)["entries"]
    assert item["api"] == "openai.responses" and item["response"]["id"] == response["id"]
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    report = bundles.import_bundle(ctx, "copy", io.BytesIO(exported))
    assert report["created"] == 1
    again = client.post("/p/copy/v1/responses", json=body, headers=admin)
    assert again.status_code == 200 and again.json["id"] == response["id"]
    listed = entries.list_entries(ctx, "copy")["data"]
    assert listed[0]["api"] == "openai.responses" and listed[0]["preview"]["answer"] == "Bundled."
    assert client.get(f"/p/copy/v1/responses/{response['id']}", headers=admin).status_code == 200


def test_unknown_api_paths_name_the_path_and_what_is_spoken(client, admin):
    r = client.post("/v1/embeddingz", json={}, headers=admin)
    assert r.status_code == 404 and r.json["error"]["code"] == "unknown_path"
    assert "/v1/embeddingz" in r.json["error"]["message"] and "/v1/responses" in r.json["error"]["message"]


def test_a_json_schema_call_takes_the_object_itself_and_refusals_show_the_form(ctx, shop, client, admin):
    schema = {
        "type": "object",
        "properties": {"total": {"type": "integer"}, "currency": {"type": "string"}},
        "required": ["total", "currency"],
        "additionalProperties": False,
    }
    body = {
        "model": "gpt-4.1",
        "input": "Total of the order?",
        "text": {"format": {"type": "json_schema", "name": "order", "schema": schema, "strict": True}},
    }
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=body, headers=admin)
        [row] = parked(ctx, shop)
        answer_url = f"/api/v1/pending/{row['id']}/answer"
        assert client.get(f"/api/v1/pending/{row['id']}", headers=admin).json["shape"]["skeleton"] == {
            "total": 0,
            "currency": "",
        }
        wrong = client.post(answer_url, json={"total": "7", "currency": "EUR"}, headers=admin)
        assert wrong.status_code == 422 and wrong.json["error"]["param"] == "total"
        assert 'Answer this call in this form: {"total": 0, "currency": ""}' in wrong.json["error"]["message"]
        right = client.post(answer_url, json={"total": 7, "currency": "EUR"}, headers=admin)
        assert right.status_code == 200, right.json
        response = future.result(10).json
    text = response["output"][0]["content"][0]["text"]
    assert json.loads(text) == {"total": 7, "currency": "EUR"}


def test_the_dashboard_answers_a_responses_call_as_text(ctx, shop, client, make_token):
    secret = make_token("admin")["Authorization"].split()[1]
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            client.post,
            URL,
            json={"model": "gpt-4.1", "input": "Greet me"},
            headers={"Authorization": f"Bearer {secret}"},
        )
        [row] = parked(ctx, shop)
        assert "Greet me" in dashboard_text_answer(client, secret, row["id"], "Hello, you.")
        response = future.result(10).json
    assert response["output"][0]["content"][0]["text"] == "Hello, you."
    [entry] = entries.list_entries(ctx, "shop")["data"]
    page = client.get(f"/ui/entries/{entry['id']}")
    assert page.status_code == 200 and "Hello, you." in page.get_data(as_text=True)
