"""Tenant isolation (hosted mode): workspace A's most privileged token acting on workspace B's
objects gets 404 on every route, and every service method says NotFound. The route matrix is
generated from the app's registered routes, so a new route whose parameters have no row here
fails the test until it gets one.
"""

from __future__ import annotations

import inspect
import json
import re

import pytest

from semula.core import errors
from semula.core.fingerprint import fingerprint
from semula.service import (
    audit,
    bundles,
    calllog,
    entries,
    overview,
    pending,
    projects,
    quotas,
    record_through,
    sessions,
    tokens,
    workspaces,
)
from semula.service import replay as replay_service
from semula.web import create_app
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "secret of B"}]}
# How to fill each URL parameter with one of B's objects.
PARAMETERS = {
    "name": "project",
    "pending_id": "pending",
    "entry_id": "entry",
    "token_id": "token",
    "session_id": "session",
    "session": "replay_session",  # a replay session's name, in B's project
    "seq": "seq",  # an answer's number in its entry's sequence
}
# Routes that hold no tenant data at all.
NO_TENANT_DATA = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/static/<path:filename>",
    "/api/v1/openapi.json",
    "/ui/login",
    "/ui/logout",
}
BODIES = {
    "api.update_project": {"max_misses": 7},
    "api_pending.answer": {"content": "from A"},
    "api_entries.edit_entry": {"content": "from A"},
    "api_entries.revert_entry": {"revision": 1},
    "api_entries.edit_answer": {"content": "from A"},
    "api_entries.revert_answer": {"revision": 1},
    "api_entries.reorder_answers": {"order": [1]},
    "api_entries.review_entry": {"status": "rejected"},
    "ui.entry_view": {"action": "rejected"},
    "ui.pending_call": {"kind": "text", "content": "from A"},
    "ui.settings": {"settings": '{"max_misses": 7}'},
}


@pytest.fixture
def world(hosted):  # noqa: F811 - the fixture imported above
    operator, app_store, app_settings = hosted
    b = tenant(operator, "bravo")
    b_project = projects.create(b, {"name": "bee"})
    b_row = projects.get_row(b, "bee")
    # Bound to B's project, and signed in to the dashboard: its session is one of B's objects too.
    b_token = tokens.create(b, {"role": "admin", "project": "bee"})
    answered = pending.park(b, b_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(b, answered, {"content": "B's answer"})["entry_id"]
    other = {**REQUEST, "messages": [{"role": "user", "content": "still parked"}]}
    parked = pending.park(b, b_row, fingerprint(other), other, False)
    projects.create(operator, {"name": "ant"})
    a_token = tokens.create(operator, {"role": "admin"})["token"]
    app = create_app(app_settings, app_store)
    signed_in_ui(app.test_client(), b_token["token"])
    [b_session] = sessions.list_sessions(b, b_token["id"])["data"]
    objects = {
        "project": b_project["name"],
        "pending": parked,
        "entry": entry_id,
        "token": b_token["id"],
        "session": b_session["id"],
        "replay_session": "b-session",
        "seq": "1",
    }
    return {
        "operator": operator,
        "b": b,
        "objects": objects,
        "a_token": a_token,
        "app": app,
        "secrets": [b_project["id"], parked, entry_id, b_token["id"], b_session["id"], "secret of B"],
    }


def routes(app):
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield rule, method


def signed_in_ui(client, token):
    page = client.get("/ui/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert client.post("/ui/login", data={"token": token, "csrf": csrf}).status_code == 302
    home = client.get("/ui/").get_data(as_text=True)
    return re.search(r'name="csrf" value="([^"]+)"', home).group(1)


def test_every_route_hides_another_workspace(world):
    app, objects = world["app"], world["objects"]
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world['a_token']}"}
    csrf = signed_in_ui(client, world["a_token"])
    checked = 0
    for rule, method in routes(app):
        if rule.rule in NO_TENANT_DATA:
            continue
        unknown = set(rule.arguments) - set(PARAMETERS)
        assert not unknown, (
            f"{method} {rule.rule}: add a row for parameters {unknown} to the isolation matrix"
        )
        url = rule.rule
        for arg in rule.arguments:
            url = re.sub(rf"<(?:\w+:)?{arg}>", objects[PARAMETERS[arg]], url)
        body = BODIES.get(rule.endpoint, {})
        if url.startswith("/ui/"):
            response = client.open(url, method=method, data={**body, "csrf": csrf})
        else:
            response = client.open(
                url, method=method, json=body if method != "GET" else None, headers=headers
            )
        text = response.get_data(as_text=True)
        if rule.arguments:
            assert response.status_code == 404, (
                f"{method} {rule.rule} gave {response.status_code}: {text[:200]}"
            )
        else:
            assert response.status_code < 500, f"{method} {rule.rule} gave {response.status_code}"
        for secret in world["secrets"]:
            # An error may repeat the id the caller sent, and nothing else of B.
            assert secret in url or secret not in text, f"{method} {rule.rule} shows {secret}"
        checked += 1
    assert checked >= 35
    # Nothing of B changed through any of those calls.
    b = world["b"]
    assert pending.get(b, objects["pending"])["status"] == "pending"
    assert entries.get(b, objects["entry"])["review_status"] == "unreviewed"
    assert projects.get(b, "bee")["max_misses"] == 100
    assert [t["revoked"] for t in tokens.list_tokens(b)["data"] if t["id"] == objects["token"]] == [False]
    assert [s["status"] for s in sessions.list_sessions(b, objects["token"])["data"]] == ["active"]


def test_the_proxy_hides_another_workspace(world):
    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {world['a_token']}"}
    for url, kwargs in [
        ("/p/bee/v1/chat/completions", {"json": REQUEST}),
        ("/v1/chat/completions", {"json": REQUEST, "headers": {**headers, "X-Semula-Project": "bee"}}),
    ]:
        kwargs.setdefault("headers", headers)
        r = client.post(url, **kwargs)
        assert r.status_code == 404 and r.json["error"]["code"] == "project_not_found"
    assert client.get("/p/bee/v1/models", headers=headers).status_code == 404


# Every public service function that takes an object of a workspace, called as A on B's object.
SERVICE_CALLS = {
    "projects.get": lambda a, o: projects.get(a, o["project"]),
    "projects.get_row": lambda a, o: projects.get_row(a, o["project"]),
    "projects.update": lambda a, o: projects.update(a, o["project"], {"max_misses": 3}),
    "projects.refingerprint": lambda a, o: projects.refingerprint(a, o["project"]),
    "tokens.revoke": lambda a, o: tokens.revoke(a, o["token"]),
    "sessions.list_sessions": lambda a, o: sessions.list_sessions(a, o["token"]),
    "sessions.end": lambda a, o: sessions.end(a, o["token"], o["session"]),
    "sessions.end_all": lambda a, o: sessions.end_all(a, o["token"]),
    "pending.get": lambda a, o: pending.get(a, o["pending"]),
    "pending.get_row": lambda a, o: pending.get_row(a, o["pending"]),
    "pending.answer": lambda a, o: pending.answer(a, o["pending"], {"content": "x"}),
    "pending.cancel": lambda a, o: pending.cancel(a, o["pending"]),
    "pending.claim_by_id": lambda a, o: pending.claim_by_id(a, o["pending"], "w"),
    "pending.release_claim": lambda a, o: pending.release_claim(a, o["pending"], "w"),
    "pending.release": lambda a, o: pending.release(a, o["pending"], "w"),
    "pending.list_pending": lambda a, o: pending.list_pending(a, project=o["project"]),
    "pending.claim_next": lambda a, o: pending.claim_next(a, project=o["project"]),
    "entries.get": lambda a, o: entries.get(a, o["entry"]),
    "entries.get_row": lambda a, o: entries.get_row(a, o["entry"]),
    "entries.edit": lambda a, o: entries.edit(a, o["entry"], {"content": "x"}),
    "entries.revert": lambda a, o: entries.revert(a, o["entry"], 1),
    "entries.set_pinned": lambda a, o: entries.set_pinned(a, o["entry"], True),
    "entries.review": lambda a, o: entries.review(a, o["entry"], "rejected"),
    "entries.delete": lambda a, o: entries.delete(a, o["entry"]),
    "entries.list_entries": lambda a, o: entries.list_entries(a, o["project"]),
    "entries.get_answer": lambda a, o: entries.get_answer(a, o["entry"], 1),
    "entries.edit_answer": lambda a, o: entries.edit_answer(a, o["entry"], 1, {"content": "x"}),
    "entries.revert_answer": lambda a, o: entries.revert_answer(a, o["entry"], 1, 1),
    "entries.pin_answer": lambda a, o: entries.pin_answer(a, o["entry"], 1, True),
    "entries.delete_answer": lambda a, o: entries.delete_answer(a, o["entry"], 1),
    "entries.reorder_answers": lambda a, o: entries.reorder_answers(a, o["entry"], [1]),
    "calllog.list_calls": lambda a, o: calllog.list_calls(a, o["project"]),
    "bundles.export_bundle": lambda a, o: bundles.export_bundle(a, o["project"]),
    "bundles.import_bundle": lambda a, o: bundles.import_bundle(
        a, o["project"], __import__("io").BytesIO(b"{}")
    ),
    "record_through.usage": lambda a, o: record_through.usage(a, o["project"]),
    "record_through.reset": lambda a, o: record_through.reset(a, o["project"]),
    "replay.resolve_project": lambda a, o: replay_service.resolve_project(a, o["project"], None),
    "replay.answered_entry": lambda a, o: replay_service.answered_entry(a, o["entry"]),
    "bundles.find_stored_secrets": lambda a, o: bundles.find_stored_secrets(a, o["project"]),
}
# Functions that take no object of a workspace (they act on the caller's own, or on nothing).
NO_OBJECT = {
    "projects.create",
    "projects.list_projects",
    "projects.ensure",
    "projects.present",
    "tokens.create",
    "tokens.list_tokens",
    "tokens.present",
    "sessions.start",
    "sessions.present",
    "sessions.expires_at",
    # Authentication by the session's secret, like a bearer token's: the secret is the credential.
    "sessions.authenticate",
    "sessions.sign_out",
    "pending.park",
    "pending.present",
    "pending.notify",
    # The held calls' lease (decision 0063), by their unguessable ids, as the poll reads them; and pure.
    "pending.hold_among",
    "pending.abandoned",
    "entries.lookup",
    "entries.lookup_at",
    "entries.by_response_id",
    "pending.conversation",
    "replay.check_previous",
    "replay.stored_response",
    "replay.forget_response",
    "replay.input_items",
    "entries.save",
    "entries.append",
    "entries.stored_answer",  # pure: an answer with the server's secrets taken out, before save()
    "entries.decode",
    "entries.meta",
    "entries.parsed_meta",
    "replay.pacing",
    "replay.count_tokens",
    "replay.replay_headers",
    "entries.present",
    "entries.check_quota",
    "calllog.present",
    "audit.record",
    "audit.present",
    "audit.list_events",
    "overview.overview",
    "record_through.forward",
    "record_through.forward_live",
    "record_through.call_provider",
    "replay.check_body",
    "replay.start",
    "replay.may_park",
    "replay.park",
    "replay.replay_miss",
    "replay.render",
    "replay.templated",
    "replay.stamp_completion",
    "replay.log_row",
    "replay.models",
    "replay.model",
    "replay.gemini_models",
    "replay.gemini_model",
    "quotas.limit",
    "quotas.check",
    "quotas.check_answer",
}
MODULES = {
    "projects": projects,
    "tokens": tokens,
    "sessions": sessions,
    "pending": pending,
    "entries": entries,
    "calllog": calllog,
    "audit": audit,
    "overview": overview,
    "record_through": record_through,
    "bundles": bundles,
    "replay": replay_service,
    "quotas": quotas,
}


def test_service_matrix_covers_every_public_function():
    found = set()
    for prefix, module in MODULES.items():
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_"):
                found.add(f"{prefix}.{name}")
    missing = found - set(SERVICE_CALLS) - NO_OBJECT
    assert not missing, f"add these service functions to the isolation matrix: {sorted(missing)}"


@pytest.mark.parametrize("method", sorted(SERVICE_CALLS))
def test_every_service_method_hides_another_workspace(world, method):
    a = world["operator"]  # A's admin, full scope: the widest a tenant gets
    with pytest.raises(errors.NotFound):
        result = SERVICE_CALLS[method](a, world["objects"])
        if hasattr(result, "__next__"):
            next(result)


def test_workspace_commands_are_the_operators_only(world):
    from semula.service import Principal

    as_token = world["operator"].as_(
        Principal(workspace_id="wsp_default", role="admin", scope="full", actor="tok_x", token_id="tok_x")
    )
    with pytest.raises(errors.Forbidden):
        workspaces.create(as_token, "evil")


def test_project_binding_matrix_inside_one_workspace(world):
    """A token bound to project ant gets 404 for every other project's objects of its own workspace."""
    operator = world["operator"]
    ant_row = projects.get_row(operator, "ant")
    other = projects.create(operator, {"name": "other"})
    other_row = projects.get_row(operator, "other")
    parked = pending.park(operator, other_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(operator, parked, {"content": "x"})["entry_id"]
    parked2 = pending.park(operator, other_row, "v1:other", REQUEST, False)
    bound = tokens.create(operator, {"role": "admin", "project": "ant"})["token"]
    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {bound}"}
    objects = {
        "project": other["name"],
        "pending": parked2,
        "entry": entry_id,
        "token": "tok_nope",
        "session": "ses_nope",
        "replay_session": "ant-session",
        "seq": "1",
    }
    for rule, method in routes(world["app"]):
        if rule.rule in NO_TENANT_DATA or rule.rule.startswith("/ui/") or not rule.arguments:
            continue
        if "token_id" in rule.arguments:
            continue  # token management is workspace-wide: 403 to a bound token (test_auth)
        url = rule.rule
        for arg in rule.arguments:
            url = re.sub(rf"<(?:\w+:)?{arg}>", objects[PARAMETERS[arg]], url)
        body = BODIES.get(rule.endpoint, {})
        r = client.open(url, method=method, json=body if method != "GET" else None, headers=headers)
        assert r.status_code == 404, (
            f"{method} {rule.rule} gave {r.status_code}: {r.get_data(as_text=True)[:200]}"
        )
    assert ant_row["id"] != other_row["id"]
    assert json.dumps(client.get("/api/v1/projects", headers=headers).json).count('"name"') == 1


def test_project_binding_matrix_covers_every_list(world):
    """Every route without an object in its path (the lists, the overview, the audit log) shows a token
    bound to project ant nothing of its workspace's other projects: a 403 `project_bound`, or a
    page that names none of them, their calls, entries, or the workspace's tokens and audit events."""
    operator = world["operator"]
    neighbour = projects.create(operator, {"name": "neighbour-zq"})
    neighbour_row = projects.get_row(operator, "neighbour-zq")
    answered = pending.park(operator, neighbour_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(operator, answered, {"content": "x"})["entry_id"]
    parked = pending.park(operator, neighbour_row, "v1:neighbour", REQUEST, False)
    projects.update(operator, "neighbour-zq", {"max_misses": 9})
    unbound = tokens.create(operator, {"role": "viewer"})
    created = tokens.create(operator, {"role": "admin", "project": "ant"})
    secrets = ["neighbour-zq", neighbour["id"], answered, parked, entry_id, unbound["id"]]
    assert any(s in json.dumps(audit.list_events(operator)) for s in secrets)  # the log does name them

    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {created['token']}"}
    csrf = signed_in_ui(client, created["token"])
    checked = set()
    for rule, method in routes(world["app"]):
        if rule.rule in NO_TENANT_DATA or rule.arguments or method != "GET":
            continue
        if rule.rule.startswith("/ui/"):
            r = client.get(rule.rule, data={"csrf": csrf})
        else:
            r = client.get(rule.rule, headers=headers)
        text = r.get_data(as_text=True)
        assert r.status_code in (200, 204, 403), f"GET {rule.rule} gave {r.status_code}: {text[:200]}"
        if r.status_code == 403 and not rule.rule.startswith("/ui/"):
            assert r.json["error"]["code"] == "project_bound"
        for secret in secrets:
            assert secret not in text, f"GET {rule.rule} shows {secret} to a token bound to ant"
        checked.add(rule.rule)
    assert {"/api/v1/projects", "/api/v1/pending", "/api/v1/tokens", "/api/v1/audit", "/ui/audit"} <= checked
