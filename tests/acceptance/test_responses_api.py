"""The Responses API against real gunicorn + gevent, driven by the official openai SDK."""

from __future__ import annotations

import io
import json
import threading

import pydantic
import pytest

from semula.service import bundles, pending, projects
from tests.acceptance import shared
from tests.helpers import RESPONSES_WEATHER_TOOL, wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

WEATHER = RESPONSES_WEATHER_TOOL


class Invoice(pydantic.BaseModel):
    total: int
    currency: str


def answer_next(ctx, shop, payload, seen: set[str]) -> threading.Thread:
    """Answer the next call parked in shop (one not in `seen`) with payload, from a thread."""

    def run():
        def fresh():
            rows = ctx.store.all("parked_in_project", project_id=shop["id"])
            return [r["id"] for r in rows if r["id"] not in seen]

        [pending_id] = wait_for(fresh, timeout=60, what="a parked call")
        seen.add(pending_id)
        pending.answer(ctx, pending_id, payload)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def recorded(ctx, shop, payload, seen, make_call):
    thread = answer_next(ctx, shop, payload, seen)
    result = make_call()
    thread.join(30)
    return result


def test_responses_record_then_replay_with_the_sdk(server, ctx, shop, openai_client):
    client = openai_client(server)
    seen: set[str] = set()

    def plain():
        return client.responses.create(model="gpt-4.1-mini", instructions="Be terse.", input="Say hello")

    def tool_call():
        return client.responses.create(
            model="gpt-4.1", input="What is the weather in Paris?", tools=[WEATHER], tool_choice="required"
        )

    def parsed():
        return client.responses.parse(
            model="gpt-4.1", input="Invoice for 7 euros, as JSON", text_format=Invoice
        )

    def streamed():
        with client.responses.stream(model="gpt-4.1-mini", input="Count to five") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            return deltas, stream.get_final_response()

    first = recorded(ctx, shop, "Hello!", seen, plain)
    assert first.output_text == "Hello!" and first.id.startswith("resp_")

    call = recorded(
        ctx, shop, {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, seen, tool_call
    )
    [item] = call.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "Paris"}

    def follow_up():
        return client.responses.create(
            model="gpt-4.1",
            previous_response_id=call.id,
            input=[{"type": "function_call_output", "call_id": item.call_id, "output": '{"temp_c": 21}'}],
            tools=[WEATHER],
        )

    answer = recorded(ctx, shop, "It is 21 °C in Paris.", seen, follow_up)
    assert answer.output_text == "It is 21 °C in Paris." and answer.previous_response_id == call.id

    invoice = recorded(ctx, shop, {"content": json.dumps({"total": 7, "currency": "EUR"})}, seen, parsed)
    assert invoice.output_parsed == Invoice(total=7, currency="EUR")

    deltas, final = recorded(ctx, shop, "one two three four five", seen, streamed)
    assert "".join(deltas) == "one two three four five" and final.output_text == "one two three four five"

    # Replay: the same calls, now answered from the recordings with the same response ids.
    projects.update(ctx, "shop", {"mode": "replay"})
    assert plain().output_text == "Hello!" and plain().id == first.id
    assert tool_call().id == call.id
    assert follow_up().output_text == "It is 21 °C in Paris."
    assert parsed().output_parsed == Invoice(total=7, currency="EUR")
    deltas, final = streamed()
    assert "".join(deltas) == "one two three four five" and final.id
    assert client.responses.retrieve(call.id).output[0].name == "get_weather"

    # Exported, imported into a fresh project, replayed there.
    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 5
    copy = openai_client(server, "copy")
    assert (
        copy.responses.create(model="gpt-4.1-mini", instructions="Be terse.", input="Say hello").id
        == first.id
    )
    follow = copy.responses.create(
        model="gpt-4.1",
        previous_response_id=call.id,
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": '{"temp_c": 21}'}],
        tools=[WEATHER],
    )
    assert follow.output_text == "It is 21 °C in Paris."


def test_a_responses_miss_in_replay_names_the_first_difference(server, ctx, shop, openai_client):
    import openai

    client = openai_client(server)
    recorded(
        ctx,
        shop,
        "Fine.",
        set(),
        lambda: client.responses.create(model="gpt-4.1", input=[{"role": "user", "content": "How are you?"}]),
    )
    projects.update(ctx, "shop", {"mode": "replay"})
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="gpt-4.1", input=[{"role": "user", "content": "How are you!"}])
    assert info.value.status_code == 424 and "input[0].content" in info.value.message
