"""The dialect contract: one set of cases every API semula speaks passes, on SQLite and PostgreSQL.

Made from the registry (semula.dialects.names()), so a new dialect is held to all of it: it needs a
Case in tests/contract/cases.py, or the suite fails. Everything goes through HTTP, as an app (its SDK)
or an operator (the REST API) would: errors in the API's envelope and type for every status, streams
that end as the API ends them and report usage, forwarded streams that broke (the provider's error
event, cut short, the app gone) never saved, each documented limit accepted at it and refused one past
it, transport fields outside the fingerprint, and a conversation view for every request shape.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from semula import dialects
from semula.core import errors
from semula.service import Context, projects, tokens
from semula.web import create_app
from tests.contract.cases import CASES, PROJECT, case, typed
from tests.fake_upstream import FakeUpstream
from tests.helpers import parked

NAMES = dialects.names()
STREAMING = [name for name in NAMES if case(name).stream is not None]
STATUSES = [400, 401, 403, 404, 409, 413, 424, 429, 500, 502, 503, 504]
BOUNDARIES = [
    pytest.param(name, boundary, id=f"{name}-{boundary.name}")
    for name in NAMES
    for boundary in case(name).boundaries
]
SHAPES = [
    pytest.param(name, shape, id=f"{name}-{i}") for name in NAMES for i, shape in enumerate(case(name).shapes)
]
# The total tokens tests/fake_upstream.py reports for each API's stream.
FAKE_USAGE = {dialects.CHAT: 30, dialects.RESPONSES: 18, dialects.ANTHROPIC: 21, dialects.GEMINI: 18}


class Env:
    """An app recording through to a fake provider for every API, its operator and an admin token."""

    def __init__(self, ctx: Any, store: Any, settings: Any, fake: FakeUpstream):
        self.settings = replace(
            settings,
            upstream_url=fake.url,
            upstream_key="sk-contract-upstream",
            anthropic_url=fake.url,
            anthropic_key="sk-ant-contract",
            gemini_url=fake.url.removesuffix("/v1") + "/v1beta",
            gemini_key="gemini-contract-key",
        )
        # The operator's context with the server's settings: it may turn record-through on.
        self.ctx, self.store, self.fake = Context(store, self.settings, ctx.principal), store, fake
        self.client = create_app(self.settings, store).test_client()
        self.secret = tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]
        self.admin = {"Authorization": f"Bearer {self.secret}"}

    def project(self, **settings: Any) -> dict[str, Any]:
        return projects.create(self.ctx, {"name": "shop", **settings})

    def post(self, name: str, path: str, body: Any, headers: dict[str, str] | None = None, **kw: Any) -> Any:
        sent = {**case(name).credentials(self.secret), **(headers or {})}
        return self.client.post(PROJECT + path, json=body, headers=sent, **kw)

    def entries(self) -> list[dict[str, Any]]:
        r = self.client.get("/api/v1/projects/shop/entries", headers=self.admin)
        assert r.status_code == 200, r.json
        return r.json["data"]

    def held(self, name: str, path: str, body: Any, then: Any, headers: dict[str, str] | None = None) -> Any:
        """Post a call that parks, run then(pending call as the REST API shows it), return the reply."""
        shop = projects.get(self.ctx, "shop")
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(self.post, name, path, body, headers)
            [row] = parked(self.ctx, shop)
            try:
                shown = self.client.get(f"/api/v1/pending/{row['id']}", headers=self.admin)
                assert shown.status_code == 200, shown.json
                then(shown.json)
            except BaseException:  # the call is let go, so the test ends with what failed
                self.client.post(f"/api/v1/pending/{row['id']}/cancel", headers=self.admin)
                raise
            return future.result(30)

    def answer(self, name: str, call: dict[str, Any]) -> None:
        payload = dict(case(name).answer)
        if "embeddings" in payload:  # one vector for each input the call has
            payload["embeddings"] = payload["embeddings"] * call["shape"]["embeddings"]["inputs"]
        r = self.client.post(f"/api/v1/pending/{call['id']}/answer", json=payload, headers=self.admin)
        assert r.status_code == 200, r.json

    def record(self, name: str, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        """Park a call and answer it with the Case's answer: the held call's reply."""
        reply = self.held(name, path, body, lambda call: self.answer(name, call), headers)
        assert reply.status_code == 200, reply.get_data(as_text=True)
        return reply


@pytest.fixture
def env(ctx, store, settings):
    fake = FakeUpstream()
    try:
        yield Env(ctx, store, settings, fake)
    finally:
        fake.close()


def test_every_dialect_has_a_case():
    """A dialect without a Case fails here (and at collection), never skips; so does a Case that leaves
    a contract empty, or names transport fields other than the dialect's."""
    assert sorted(CASES) == NAMES
    for name in NAMES:
        held = case(name)
        assert held.boundaries and held.shapes, name
        assert set(held.transport) == set(dialects.get(name).transport_fields), name


# Errors: every status in the API's own envelope, with its type.


def _malformed(env: Env, name: str) -> Any:
    env.project(mode="replay")
    sent = {**case(name).credentials(env.secret), "Content-Type": "application/json"}
    return env.client.post(PROJECT + case(name).path, data="{not json", headers=sent)


def _unauthenticated(env: Env, name: str) -> Any:
    env.project(mode="replay")
    return env.client.post(PROJECT + case(name).path, json=case(name).body("hi"))


def _unknown_project(env: Env, name: str) -> Any:
    return env.client.post(
        "/p/nosuch" + case(name).path, json=case(name).body("hi"), headers=case(name).credentials(env.secret)
    )


def _cancelled(env: Env, name: str) -> Any:
    env.project(mode="record")

    def cancel(call: dict[str, Any]) -> None:
        r = env.client.post(f"/api/v1/pending/{call['id']}/cancel", headers=env.admin)
        assert r.status_code == 200, r.json

    return env.held(name, case(name).path, case(name).body("hi"), cancel)


def _too_large(env: Env, name: str) -> Any:
    env.project(mode="replay")
    small = create_app(replace(env.settings, max_body_bytes=1024), env.store).test_client()
    body = case(name).body("x" * 4096)
    return small.post(PROJECT + case(name).path, json=body, headers=case(name).credentials(env.secret))


def _replay_miss(env: Env, name: str) -> Any:
    env.project(mode="replay")
    return env.post(name, case(name).path, case(name).body("hi"))


def _budget_spent(env: Env, name: str) -> Any:
    env.project(mode="record", record_through=True, upstream_max_calls=0)
    return env.post(name, case(name).path, case(name).body("hi"))


def _faulted(kind: str) -> Any:
    def provoke(env: Env, name: str) -> Any:
        env.project(mode="replay")
        return env.post(name, case(name).path, case(name).body("hi"), {"X-Semula-Fault": kind})

    return provoke


def _provider_down(env: Env, name: str) -> Any:
    env.project(mode="record", record_through=True)
    env.fake.mode = "down"
    return env.post(name, case(name).path, case(name).body("hi"))


def _nobody_answers(env: Env, name: str) -> Any:
    env.project(mode="record", record_timeout=1)
    return env.post(name, case(name).path, case(name).body("hi"))


PROVOKE = {
    400: _malformed,
    401: _unauthenticated,
    # 403: no call of an API is refused for its role or scope (every token may replay), so the
    # envelope is the dialect's rendering of semula's 403, the one every surface raises.
    404: _unknown_project,
    409: _cancelled,
    413: _too_large,
    424: _replay_miss,
    429: _budget_spent,
    500: _faulted("server_error"),
    502: _provider_down,
    503: _faulted("unavailable"),
    504: _nobody_answers,
}


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("name", NAMES)
def test_errors_are_in_the_apis_envelope_with_its_type(env, name, status):
    if status == 403:
        body = dialects.get(name).error_body(errors.Forbidden())
    else:
        r = PROVOKE[status](env, name)
        assert r.status_code == status, r.get_data(as_text=True)
        assert r.headers["Content-Type"].startswith("application/json")
        body = r.json
    case(name).error(body, status)


# Request checks: a documented limit is accepted at it and refused one past it, with the API's 400.


@pytest.mark.parametrize(("name", "boundary"), BOUNDARIES)
def test_a_limit_is_accepted_at_it_and_refused_past_it(env, name, boundary):
    env.project(mode="replay")
    at = env.post(name, boundary.path, boundary.at)
    # Past the check, it is looked up: a replay miss, not a 400.
    assert at.status_code == 424, at.get_data(as_text=True)
    past = env.post(name, boundary.path, boundary.past)
    assert past.status_code == 400, past.get_data(as_text=True)
    case(name).error(past.json, 400)
    assert boundary.param in json.dumps(past.json), past.json


# Fingerprints: a transport field never makes a recorded call miss.


@pytest.mark.parametrize("name", NAMES)
def test_transport_fields_are_out_of_the_fingerprint(env, name):
    held = case(name)
    env.project(mode="record")
    env.record(name, held.path, held.body("the weather"))
    projects.update(env.ctx, "shop", {"mode": "replay"})
    for fields in [{key: value} for key, value in held.transport.items()] + [held.transport]:
        body = held.body("the weather")
        headers = {held.headers[key]: value for key, value in fields.items() if key in held.headers}
        body |= {key: value for key, value in fields.items() if key not in held.headers}
        path = held.stream.path if fields.get("stream") and held.stream else held.path
        r = env.post(name, path, body, headers)
        assert r.status_code == 200, (fields, r.get_data(as_text=True))
    # What is not transport is the request: another text misses.
    assert env.post(name, held.path, held.body("the weather?")).status_code == 424


# The conversation view: every request shape parks as a view that shows what the app said.


@pytest.mark.parametrize(("name", "shape"), SHAPES)
def test_every_request_shape_has_a_conversation_view(env, name, shape):
    env.project(mode="record")
    seen: list[dict[str, Any]] = []

    def look_and_answer(call: dict[str, Any]) -> None:
        seen.append(call["conversation"])
        env.answer(name, call)

    reply = env.held(name, shape.path, shape.body, look_and_answer)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    [view] = seen
    assert view["messages"], view
    assert shape.said in json.dumps(view, ensure_ascii=False), view


# Streams.


def _stream(env: Env, name: str, text: str, **kw: Any) -> Any:
    held = case(name).stream
    return env.post(name, held.path, held.body(text), **kw)


@pytest.mark.parametrize("name", STREAMING)
def test_a_replayed_stream_ends_and_reports_usage(env, name):
    held = case(name)
    env.project(mode="record")
    env.held(
        name,
        held.path,
        held.body("the weather"),
        lambda call: env.client.post(
            f"/api/v1/pending/{call['id']}/answer",
            json={**held.answer, "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
            headers=env.admin,
        ),
    )
    projects.update(env.ctx, "shop", {"mode": "replay"})
    text = _stream(env, name, "the weather").get_data(as_text=True)
    assert held.stream.ended(text), text
    assert held.stream.usage(text) == 8, text


@pytest.mark.parametrize("name", STREAMING)
def test_a_forwarded_stream_is_relayed_whole_saved_and_replayed(env, name):
    held = case(name).stream
    env.project(mode="record", record_through=True)
    relayed = _stream(env, name, "the weather")
    assert relayed.status_code == 200
    text = relayed.get_data(as_text=True)
    assert held.ended(text) and not held.failed(text), text
    assert held.usage(text) == FAKE_USAGE[name], text
    assert len(env.entries()) == 1
    projects.update(env.ctx, "shop", {"mode": "replay"})
    again = _stream(env, name, "the weather").get_data(as_text=True)
    assert held.ended(again) and held.usage(again) == FAKE_USAGE[name], again
    assert len(env.fake.calls) == 1


def _stamps(name: str, events: list[Any]) -> set[tuple[str, Any]]:
    """The ids and times in a body or a stream's events: the dialect's stamped members and `id`, at an
    event's top or in the message or response it carries."""
    wanted = {*dialects.get(name).stamped, "id"}
    found = set()
    for event in events:
        for holder in (event, event.get("message"), event.get("response")):
            if isinstance(holder, dict):
                found |= {(key, holder[key]) for key in wanted & set(holder)}
    return found


@pytest.mark.parametrize("restamp", ["fresh", "recorded"])
@pytest.mark.parametrize("name", STREAMING)
def test_a_forwarded_call_gets_the_providers_ids_and_replays_by_the_restamp_setting(env, name, restamp):
    """The call that forwarded a miss gets the provider's ids and times, streamed or not, as the
    provider sent them (a stream and a plain call of one request are one entry: two requests here).
    Replays (a first sight, then kept hits) carry them again with restamp
    `recorded`; with `fresh`, each stamped member is this reply's own (the rest, as the Responses
    API's id, stays the recorded one)."""
    held = case(name)
    env.project(mode="record", record_through=True, restamp=restamp)
    forwarded = env.post(name, held.path, held.body("the weather"))
    assert forwarded.status_code == 200, forwarded.json
    sent_body = _stamps(name, [json.loads(env.fake.answered[-1])])
    assert sent_body and _stamps(name, [forwarded.json]) == sent_body
    relayed = _stream(env, name, "the tide").get_data(as_text=True)
    sent_stream = _stamps(name, typed(env.fake.answered[-1].decode()))
    assert sent_stream and _stamps(name, typed(relayed)) == sent_stream
    projects.update(env.ctx, "shop", {"mode": "replay"})
    stamped = set(dialects.get(name).stamped)
    for _ in range(3):  # a first sight, a hit kept, a kept hit's reply
        body = env.post(name, held.path, held.body("the weather"))
        stream = _stream(env, name, "the tide").get_data(as_text=True)
        for replayed, sent in (
            (_stamps(name, [body.json]), sent_body),
            (_stamps(name, typed(stream)), sent_stream),
        ):
            if restamp == "recorded":
                assert replayed == sent
            else:
                assert {s for s in replayed if s[0] not in stamped} == {
                    s for s in sent if s[0] not in stamped
                }
                assert not {s for s in replayed if s[0] in stamped} & sent
    assert len(env.fake.calls) == 2


@pytest.mark.parametrize("mode", ["stream error", "cut short"])
@pytest.mark.parametrize("name", STREAMING)
def test_a_forwarded_stream_that_broke_is_not_saved(env, name, mode):
    """The provider's error event, or its stream ending before the API's last events: the app is told
    (the API's error event), nothing is saved, and the next call is forwarded again."""
    held = case(name).stream
    env.project(mode="record", record_through=True)
    env.fake.mode = mode
    text = _stream(env, name, "the weather").get_data(as_text=True)
    assert held.failed(text) and not held.ended(text), text
    assert env.entries() == []
    env.fake.mode = "ok"
    assert held.ended(_stream(env, name, "the weather").get_data(as_text=True))
    assert len(env.entries()) == 1 and len(env.fake.calls) == 2


@pytest.mark.parametrize("name", STREAMING)
def test_a_forwarded_stream_the_app_left_is_not_saved(env, name):
    env.project(mode="record", record_through=True)
    streamed = _stream(env, name, "the weather", buffered=False)
    assert next(iter(streamed.response))  # the first event came
    streamed.close()  # and the app went away
    assert env.entries() == []
    assert case(name).stream.ended(_stream(env, name, "the weather").get_data(as_text=True))
    assert len(env.entries()) == 1 and len(env.fake.calls) == 2
