"""The pending queue through the service and REST: list, get, answer, cancel, and the claim lease.

The contract is docs/design/product.md §5.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from semula.core.errors import BadRequest, InvalidAnswer, NotFound
from semula.service import Context, Principal, projects
from semula.service import pending as pending_service
from tests.agent_helpers import park
from tests.helpers import wait_for


@pytest.fixture
def queue(ctx):
    """Projects alpha and beta with calls parked in this order: a1, b1, a2 (a2 offers a tool)."""
    projects.create(ctx, {"name": "alpha"})
    projects.create(ctx, {"name": "beta"})
    return {
        "a1": park(ctx, "alpha", "first"),
        "b1": park(ctx, "beta", "second"),
        "a2": park(ctx, "alpha", "third", tools=True),
    }


def as_editor(ctx, project_id=None):
    return ctx.as_(
        Principal(
            workspace_id="wsp_default", role="editor", scope="record", actor="tok_x", project_id=project_id
        )
    )


def ids(listing):
    return [p["id"] for p in listing["data"]]


# The service


def test_list_is_oldest_first_with_filters_and_paging(ctx, queue):
    assert ids(pending_service.list_pending(ctx)) == [queue["a1"], queue["b1"], queue["a2"]]
    assert ids(pending_service.list_pending(ctx, project="alpha")) == [queue["a1"], queue["a2"]]
    first = pending_service.list_pending(ctx, limit=2)
    assert (
        first["object"] == "list" and first["has_more"] is True and ids(first) == [queue["a1"], queue["b1"]]
    )
    rest = pending_service.list_pending(ctx, after=queue["b1"], limit=2)
    assert ids(rest) == [queue["a2"]] and rest["has_more"] is False
    pending_service.cancel(ctx, queue["b1"])
    assert ids(pending_service.list_pending(ctx)) == [queue["a1"], queue["a2"]]
    assert ids(pending_service.list_pending(ctx, status="cancelled")) == [queue["b1"]]
    assert len(pending_service.list_pending(ctx, status="all")["data"]) == 3
    with pytest.raises(BadRequest) as exc:
        pending_service.list_pending(ctx, status="lost")
    assert exc.value.param == "status"


def test_claim_next_takes_the_oldest_unheld_call_in_full(ctx, queue):
    editor = as_editor(ctx)
    first = pending_service.claim_next(editor, worker="w1")
    assert first["id"] == queue["a1"]
    assert first["request"]["messages"][0]["content"] == "first"
    assert first["shape"]["skeleton"] == {"content": ""}
    assert first["claim"]["worker"] == "w1" and first["claim"]["lease_seconds"] == 300
    assert first["claimed_by"] == "w1" and first["claimed_until"] >= int(time.time()) + 299
    second = pending_service.claim_next(editor)
    assert second["id"] == queue["b1"] and second["claimed_by"] == "tok_x"  # default worker: the token
    third = pending_service.claim_next(editor, lease_seconds=60)
    assert third["id"] == queue["a2"] and third["shape"]["tools"][0]["name"] == "get_weather"
    assert pending_service.claim_next(editor) is None
    listing = pending_service.list_pending(ctx)["data"]
    assert [p["claimed_by"] for p in listing] == ["w1", "tok_x", "tok_x"]
    assert all(p["claimed_until"] > time.time() for p in listing)


def test_claim_next_in_one_project(ctx, queue):
    editor = as_editor(ctx)
    assert pending_service.claim_next(editor, project="beta")["id"] == queue["b1"]
    assert pending_service.claim_next(editor, project="beta") is None
    with pytest.raises(NotFound):
        pending_service.claim_next(editor, project="gamma")


@pytest.mark.parametrize("lease", [0, 3601, -5, "60", True, 1.5])
def test_lease_must_be_1_to_3600_seconds(ctx, queue, lease):
    with pytest.raises(BadRequest) as exc:
        pending_service.claim_next(ctx, lease_seconds=lease)
    assert exc.value.param == "lease_seconds"


def test_an_expired_lease_is_no_lease(ctx, queue):
    editor = as_editor(ctx)
    short = pending_service.claim_next(editor, project="alpha", lease_seconds=1, worker="slow")
    assert short["id"] == queue["a1"]
    # While the lease runs the next claim skips a1; once it ends, a1 is the oldest again.
    assert pending_service.claim_next(editor, project="alpha", worker="other")["id"] == queue["a2"]
    again = wait_for(lambda: pending_service.claim_next(editor, project="alpha", worker="other"), timeout=10)
    assert again["id"] == queue["a1"] and again["claimed_by"] == "other"
    assert pending_service.claim_next(editor, project="alpha") is None


def test_the_lease_is_advisory_and_an_answer_ends_it(ctx, queue):
    editor = as_editor(ctx)
    claimed = pending_service.claim_next(editor, worker="w1")
    # Someone else (the operator here) answers the claimed call: the lease does not stop them.
    done = pending_service.answer(ctx, claimed["id"], {"content": "hello"}, actor="human")
    assert done["status"] == "answered" and done["entry_id"].startswith("ent_")
    assert done["claimed_by"] is None and done["claimed_until"] is None
    assert pending_service.claim_next(editor)["id"] == queue["b1"]


def test_claim_next_gives_up_after_a_bounded_number_of_lost_races(ctx, queue, monkeypatch):
    """A claim guard that refuses every candidate makes claim_next report nothing, not spin forever."""
    tried = []
    monkeypatch.setattr(pending_service, "_try_claim", lambda ctx, pending_id, *_: tried.append(pending_id))
    assert pending_service.claim_next(as_editor(ctx)) is None
    assert len(tried) == pending_service.CLAIM_LOOKS * len(queue)


def test_claim_by_id_and_release(ctx, queue):
    editor = as_editor(ctx)
    held = pending_service.claim_by_id(editor, queue["b1"], "answerer-1", lease_seconds=120)
    assert held["id"] == queue["b1"] and held["claim"]["worker"] == "answerer-1"
    assert pending_service.claim_by_id(editor, queue["b1"], "answerer-2") is None
    assert pending_service.claim_next(editor, project="beta") is None
    assert pending_service.release_claim(editor, queue["b1"], "answerer-2") is False
    assert pending_service.release_claim(editor, queue["b1"], "answerer-1") is True
    assert pending_service.list_pending(ctx, project="beta")["data"][0]["claimed_by"] is None
    assert pending_service.claim_next(editor, project="beta")["id"] == queue["b1"]
    pending_service.cancel(ctx, queue["a1"])
    assert pending_service.claim_by_id(editor, queue["a1"], "answerer-1") is None
    with pytest.raises(NotFound):
        pending_service.claim_by_id(editor, "pnd_nope", "answerer-1")


def test_rest_release_gives_the_claim_back(client, make_token, queue):
    editor = make_token("editor", scope="record")
    release = f"/api/v1/pending/{queue['b1']}/release"
    claimed = client.post("/api/v1/pending/claim", json={"project": "beta"}, headers=editor).json
    assert client.post(release, json={"worker": "someone"}, headers=editor).json["error"]["code"] == (
        "claim_not_held"
    )
    # Without a body, the claim made under the token's own name (as the claim above was) is released.
    released = client.post(release, headers=editor)
    assert released.status_code == 200 and released.json["claimed_by"] is None
    assert client.post(release, headers=editor).status_code == 409  # nothing held any more
    again = client.post("/api/v1/pending/claim", json={"project": "beta"}, headers=editor)
    assert again.json["id"] == claimed["id"] == queue["b1"]
    assert client.post(release, json={"worker": ""}, headers=editor).status_code == 400
    client.post(f"/api/v1/pending/{queue['b1']}/cancel", headers=editor)
    gone = client.post(release, headers=editor)
    assert gone.status_code == 409 and gone.json["error"]["code"] == "pending_resolved"


def test_bound_tokens_see_and_claim_only_their_project(ctx, queue):
    alpha_id = projects.get_row(ctx, "alpha")["id"]
    bound = as_editor(ctx, project_id=alpha_id)
    assert ids(pending_service.list_pending(bound)) == [queue["a1"], queue["a2"]]
    for call in (
        lambda: pending_service.list_pending(bound, project="beta"),
        lambda: pending_service.claim_next(bound, project="beta"),
        lambda: pending_service.get(bound, queue["b1"]),
        lambda: pending_service.claim_by_id(bound, queue["b1"], "w"),
        lambda: pending_service.release_claim(bound, queue["b1"], "w"),
    ):
        with pytest.raises(NotFound):
            call()
    assert [pending_service.claim_next(bound)["id"] for _ in range(2)] == [queue["a1"], queue["a2"]]
    assert pending_service.claim_next(bound) is None


# REST


def test_rest_list_get_claim_answer(client, make_token, queue):
    editor = make_token("editor", scope="record")
    listing = client.get("/api/v1/pending?project=alpha", headers=editor).json
    assert listing["object"] == "list" and ids(listing) == [queue["a1"], queue["a2"]]
    full = client.get(f"/api/v1/pending/{queue['a2']}", headers=editor).json
    assert full["object"] == "pending" and full["shape"]["tools"][0]["name"] == "get_weather"

    r = client.post("/api/v1/pending/claim", json={"project": "alpha", "worker": "agent-7"}, headers=editor)
    assert r.status_code == 200 and r.json["id"] == queue["a1"] and r.json["claim"]["worker"] == "agent-7"
    shown = client.get("/api/v1/pending?project=alpha", headers=editor).json["data"][0]
    assert shown["claimed_by"] == "agent-7" and shown["claimed_until"] == r.json["claimed_until"]

    r = client.post(
        f"/api/v1/pending/{queue['a1']}/answer", json={"content": "hi", "summary": "s"}, headers=editor
    )
    assert r.status_code == 200 and r.json["status"] == "answered" and r.json["claimed_by"] is None
    again = client.post(f"/api/v1/pending/{queue['a1']}/answer", json={"content": "hi"}, headers=editor)
    assert again.status_code == 409 and again.json["error"]["code"] == "pending_resolved"


def test_rest_claim_without_a_body_and_204_when_empty(client, make_token, queue):
    editor = make_token("editor", scope="record")
    claimed = [client.post("/api/v1/pending/claim", headers=editor) for _ in range(3)]
    assert [r.json["id"] for r in claimed] == [queue["a1"], queue["b1"], queue["a2"]]
    empty = client.post("/api/v1/pending/claim", headers=editor)
    assert empty.status_code == 204 and empty.data == b""


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"lease_seconds": 3601}, "lease_seconds"),
        ({"lease_seconds": "60"}, "lease_seconds"),
        ({"worker": ""}, "worker"),
        ({"priority": 1}, "priority"),
    ],
)
def test_rest_claim_rejects_a_bad_body(client, make_token, queue, body, param):
    r = client.post("/api/v1/pending/claim", json=body, headers=make_token("editor"))
    assert r.status_code == 400 and r.json["error"]["param"] == param


def test_rest_claim_rejects_a_body_that_is_not_an_object(client, make_token, queue):
    for data in ("[1]", "{oops"):
        r = client.post("/api/v1/pending/claim", data=data, headers=make_token("editor"))
        assert r.status_code == 400 and r.json["error"]["type"] == "invalid_request_error"


def test_rest_invalid_answer_names_the_field_and_leaves_the_call_pending(client, make_token, queue):
    editor = make_token("editor")
    bad = {"tool_calls": [{"name": "get_weather", "arguments": {"town": "Paris"}}]}
    r = client.post(f"/api/v1/pending/{queue['a2']}/answer", json=bad, headers=editor)
    assert r.status_code == 422 and r.json["error"]["code"] == "invalid_answer"
    assert r.json["error"]["param"].startswith("tool_calls[0].arguments")
    good = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    assert client.post(f"/api/v1/pending/{queue['a2']}/answer", json=good, headers=editor).status_code == 200
    bad_summary = client.post(
        f"/api/v1/pending/{queue['a1']}/answer", json={"content": "x", "summary": 5}, headers=editor
    )
    assert bad_summary.status_code == 400 and bad_summary.json["error"]["param"] == "summary"


def test_rest_cancel(client, make_token, queue):
    editor = make_token("editor")
    r = client.post(f"/api/v1/pending/{queue['b1']}/cancel", headers=editor)
    assert r.status_code == 200 and r.json["status"] == "cancelled"
    assert client.post(f"/api/v1/pending/{queue['b1']}/cancel", headers=editor).status_code == 409
    assert client.get("/api/v1/pending/pnd_missing", headers=editor).status_code == 404


# Roles, scopes and binding on every pending method (docs/design/product.md §5, §8)

METHODS = {
    "list": ("get", "/api/v1/pending", None),
    "get": ("get", "/api/v1/pending/{b1}", None),
    "claim": ("post", "/api/v1/pending/claim", {"project": "beta"}),
    "answer": ("post", "/api/v1/pending/{b1}/answer", {"content": "x"}),
    "cancel": ("post", "/api/v1/pending/{b1}/cancel", None),
    "release": ("post", "/api/v1/pending/{b1}/release", {"worker": "w1"}),
}


def rest(client, headers, method, queue):
    verb, path, body = METHODS[method]
    return getattr(client, verb)(path.format(**queue), json=body, headers=headers)


@pytest.mark.parametrize("method", ["claim", "answer", "cancel", "release"])
def test_rest_viewer_cannot_change_the_queue(client, make_token, queue, method):
    r = rest(client, make_token("viewer", scope="record"), method, queue)
    assert r.status_code == 403 and r.json["error"]["code"] == "insufficient_role"


@pytest.mark.parametrize("method", ["list", "get"])
def test_rest_viewer_can_read_the_queue(client, make_token, queue, method):
    assert rest(client, make_token("viewer", scope="record"), method, queue).status_code == 200


@pytest.mark.parametrize("method", sorted(METHODS))
def test_rest_replay_scope_cannot_use_the_queue(client, make_token, queue, method):
    r = rest(client, make_token("admin", scope="replay"), method, queue)
    assert r.status_code == 403 and r.json["error"]["code"] == "insufficient_scope"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_rest_bound_token_gets_404_for_another_project(client, make_token, queue, method):
    bound = make_token("editor", scope="record", project="alpha")
    if method == "list":
        r = client.get("/api/v1/pending?project=beta", headers=bound)
    else:
        r = rest(client, bound, method, queue)
    assert r.status_code == 404, r.json
    assert r.json["error"]["code"] in ("pending_not_found", "project_not_found")
    # Its own project works, and the other project's call is still there, untouched.
    assert ids(client.get("/api/v1/pending", headers=bound).json) == [queue["a1"], queue["a2"]]
    assert (
        client.get(f"/api/v1/pending/{queue['b1']}", headers=make_token("viewer")).json["status"] == "pending"
    )


def test_a_postgresql_claim_relaxes_only_its_own_commit(db_url, queue):
    if not db_url.startswith("postgresql"):
        pytest.skip("synchronous_commit is PostgreSQL's")
    import psycopg

    from semula.db.postgres import PG_QUERIES

    with psycopg.connect(db_url, autocommit=True) as conn:
        params = {
            "id": queue["a1"],
            "workspace_id": "wsp_default",
            "worker": "w",
            "until": time.time() + 60,
            "now": time.time(),
        }
        assert conn.execute(PG_QUERIES["claim_pending"], params).fetchone() is not None
        assert conn.execute(PG_QUERIES["claim_pending"], params).fetchone() is None
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"


def test_rest_claim_of_one_call_and_the_answerers_candidates(ctx, client, make_token, queue):
    # What the answerer daemon uses over HTTP (decision 0042).
    editor = make_token("editor", scope="record")
    configured = Context(ctx.store, replace(ctx.settings, answerer_command=["true"]), ctx.principal)
    projects.update(configured, "beta", {"answerer": True})
    claim = f"/api/v1/pending/{queue['a2']}/claim"
    r = client.post(claim, json={"worker": "answerer:h:1", "lease_seconds": 60}, headers=editor)
    assert (
        r.status_code == 200 and r.json["id"] == queue["a2"] and r.json["claim"]["worker"] == "answerer:h:1"
    )
    assert r.json["shape"]["tools"]  # the call in full, as claim_next gives it
    assert client.post(claim, json={"worker": "other"}, headers=editor).status_code == 204  # held
    assert (
        client.post(claim, json={"lease_seconds": 0}, headers=editor).json["error"]["param"]
        == "lease_seconds"
    )
    assert client.post(claim, json={"project": "x"}, headers=editor).status_code == 400
    assert client.post("/api/v1/pending/pnd_nope/claim", headers=editor).status_code == 404
    viewer = make_token("viewer")
    assert client.post(claim, headers=viewer).json["error"]["code"] == "insufficient_role"
    listing = client.get("/api/v1/answerer/candidates?limit=10", headers=editor)
    assert listing.json["data"] == [{"id": queue["b1"], "project": "beta"}]  # alpha has it off
    assert client.get("/api/v1/answerer/candidates", headers=viewer).status_code == 403
    bound = make_token("editor", scope="record", project="alpha")
    assert client.get("/api/v1/answerer/candidates", headers=bound).json["error"]["code"] == "project_bound"


def test_a_refused_answer_is_a_sentence_then_the_form_the_call_takes(ctx, queue):
    with pytest.raises(InvalidAnswer) as refused:
        pending_service.answer(ctx, queue["a1"], {})
    assert refused.value.message.startswith(
        "the answer is empty: give content or tool_calls. Answer this call in this form: "
    ), refused.value.message


def test_a_json_outputs_own_summary_field_stays_in_the_answer(ctx, client, make_token):
    """A top-level `summary` is the revision's note only in an answer form: for a JSON output the
    object is the answer, and its `summary` is one of its fields."""
    from semula.surfaces.client import _with_summary

    projects.create(ctx, {"name": "notes"})
    schema = {
        "type": "object",
        "properties": {"summary": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["summary", "score"],
        "additionalProperties": False,
    }
    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "rate it"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    }
    row = projects.get_row(ctx, "notes")
    pending_id = pending_service.park(ctx, row, "v1:" + "1" * 64, request, False, api="openai.chat")
    answered = client.post(
        f"/api/v1/pending/{pending_id}/answer",
        json={"summary": "happy", "score": 5},
        headers=make_token("editor"),
    )
    assert answered.status_code == 200, answered.json
    entry = client.get(f"/api/v1/entries/{answered.json['entry_id']}", headers=make_token("editor")).json
    content = entry["response"]["choices"][0]["message"]["content"]
    assert json.loads(content) == {"summary": "happy", "score": 5}
    # The CLI and MCP put their own note beside such an answer without touching its fields.
    assert _with_summary({"summary": "happy", "score": 5}, "checked") == {
        "content": '{"summary": "happy", "score": 5}',
        "summary": "checked",
    }
    assert _with_summary({"content": "hi"}, "n") == {"content": "hi", "summary": "n"}
