"""docs/design/product.md §8: each rule shown refusing a token without the right role, scope or binding."""

from __future__ import annotations

import re
import time

import pytest

from semula.service import pending as pending_service
from semula.service import projects
from tests.agent_helpers import park


@pytest.fixture
def two_projects(ctx):
    projects.create(ctx, {"name": "alpha"})
    projects.create(ctx, {"name": "beta"})


def test_missing_and_unknown_tokens_are_401(client):
    r = client.get("/api/v1/projects")
    assert r.status_code == 401 and r.json["error"]["code"] == "invalid_api_key"
    r = client.get("/api/v1/projects", headers={"Authorization": "Bearer smt_nope"})
    assert r.status_code == 401


def test_revoked_token_is_401(client, make_token):
    admin = make_token("admin")
    victim = make_token("viewer")
    token_id = client.get("/api/v1/tokens", headers=admin).json["data"][-1]["id"]
    assert client.get("/api/v1/projects", headers=victim).status_code == 200
    assert client.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code == 200
    assert client.get("/api/v1/projects", headers=victim).status_code == 401


@pytest.mark.parametrize(
    ("role", "method", "path", "body"),
    [
        ("viewer", "post", "/api/v1/projects", {"name": "new"}),
        ("editor", "post", "/api/v1/projects", {"name": "new"}),
        ("viewer", "patch", "/api/v1/projects/alpha", {"max_misses": 3}),
        ("editor", "patch", "/api/v1/projects/alpha", {"mode": "replay"}),
        ("editor", "post", "/api/v1/tokens", {"role": "admin"}),
        ("editor", "get", "/api/v1/tokens", None),
        ("editor", "get", "/api/v1/audit", None),
    ],
)
def test_role_too_low_is_403(client, make_token, two_projects, role, method, path, body):
    headers = make_token(role)
    r = getattr(client, method)(path, json=body, headers=headers)
    assert r.status_code == 403 and r.json["error"]["code"] == "insufficient_role"


@pytest.mark.parametrize("scope", ["replay", "record"])
def test_narrow_scope_cannot_use_the_management_api(client, make_token, two_projects, scope):
    headers = make_token("admin", scope=scope)
    r = client.get("/api/v1/projects", headers=headers)
    assert r.status_code == 403 and r.json["error"]["code"] == "insufficient_scope"


def test_bound_token_sees_only_its_project(client, make_token, two_projects):
    headers = make_token("admin", project="alpha")
    assert [p["name"] for p in client.get("/api/v1/projects", headers=headers).json["data"]] == ["alpha"]
    assert client.get("/api/v1/projects/alpha", headers=headers).status_code == 200
    r = client.get("/api/v1/projects/beta", headers=headers)
    assert r.status_code == 404 and r.json["error"]["code"] == "project_not_found"
    assert client.patch("/api/v1/projects/beta", json={"max_misses": 1}, headers=headers).status_code == 404
    # The same 404 as a project that does not exist: a bound token learns nothing about others.
    assert client.get("/api/v1/projects/nope", headers=headers).json["error"] == r.json["error"] | {
        "message": "No project named 'nope'."
    }


def test_bound_token_cannot_act_on_the_workspace(client, make_token, two_projects):
    headers = make_token("admin", project="alpha")
    assert client.post("/api/v1/projects", json={"name": "x"}, headers=headers).status_code == 403
    assert client.post("/api/v1/tokens", json={"role": "viewer"}, headers=headers).status_code == 403


def test_bound_token_cannot_read_the_workspace_audit_log(client, make_token, two_projects):
    make_token("admin")  # audited as token.create, with its id: an event outside alpha
    client.patch("/api/v1/projects/beta", json={"max_misses": 5}, headers=make_token("admin"))
    headers = make_token("admin", project="alpha")
    r = client.get("/api/v1/audit", headers=headers)
    assert r.status_code == 403 and r.json["error"]["code"] == "project_bound"
    assert "beta" not in r.get_data(as_text=True) and "tok_" not in r.get_data(as_text=True)
    assert client.get("/api/v1/audit", headers=make_token("admin")).status_code == 200


def test_auth_off_makes_every_caller_an_admin(store, settings):
    from dataclasses import replace

    from semula.web import create_app

    client = create_app(replace(settings, auth=False), store).test_client()
    assert client.post("/api/v1/projects", json={"name": "dev"}).status_code == 201


def test_token_secret_is_shown_once_and_stored_hashed(client, make_token, store):
    admin = make_token("admin")
    created = client.post("/api/v1/tokens", json={"role": "viewer", "name": "ci"}, headers=admin).json
    secret = created["token"]
    assert secret.startswith("smt_")
    listing = client.get("/api/v1/tokens", headers=admin).get_data(as_text=True)
    assert secret not in listing and created["id"] in listing
    rows = store.all("list_tokens", workspace_id="wsp_default", after=None, limit=100)
    assert all(secret not in str(row) for row in rows)


def test_the_proxy_refuses_a_revoked_token_once_its_second_of_trust_is_over(
    ctx, client, make_token, monkeypatch
):
    """The proxy keeps a checked token for about a second (PRINCIPAL_TTL), no longer."""
    projects.create(ctx, {"name": "alpha"})
    admin = make_token("admin")
    victim = make_token("viewer")
    token_id = client.get("/api/v1/tokens", headers=admin).json["data"][-1]["id"]
    assert client.get("/p/alpha/v1/models", headers=victim).status_code == 200
    assert client.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code == 200
    real, later = time.monotonic, 2.0
    monkeypatch.setattr(time, "monotonic", lambda: real() + later)
    r = client.get("/p/alpha/v1/models", headers=victim)
    assert r.status_code == 401 and r.json["error"]["code"] == "invalid_api_key"


def signed_in(app, headers):
    """A dashboard session signed in with the token of `headers`: its test client and its CSRF token."""
    client = app.test_client()
    form = client.get("/ui/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
    token = headers["Authorization"].removeprefix("Bearer ")
    assert client.post("/ui/login", data={"token": token, "csrf": csrf}).status_code == 302
    home = client.get("/ui/").get_data(as_text=True)
    return client, re.search(r'name="csrf" value="([^"]+)"', home).group(1)


def test_a_dashboard_form_with_another_sessions_csrf_token_is_refused(ctx, app, make_token):
    projects.create(ctx, {"name": "alpha"})
    pending_id = park(ctx, "alpha", "cancel me?")
    admin = make_token("admin")
    mine, my_csrf = signed_in(app, admin)
    _, their_csrf = signed_in(app, admin)
    assert my_csrf != their_csrf
    url = f"/ui/pending/{pending_id}/cancel"
    assert mine.post(url, data={"csrf": their_csrf}).status_code == 400
    assert mine.post(url, data={}).status_code == 400
    assert pending_service.get(ctx, pending_id)["status"] == "pending"
    assert mine.post(url, data={"csrf": my_csrf}).status_code == 302
    assert pending_service.get(ctx, pending_id)["status"] == "cancelled"


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "beaRer"])
def test_the_bearer_scheme_is_case_insensitive(client, ctx, make_token, scheme):
    """RFC 7235: the scheme word is case-insensitive, on the REST API and on the proxy."""
    projects.create(ctx, {"name": "alpha", "mode": "replay"})
    secret = make_token("admin")["Authorization"].split(" ", 1)[1]
    headers = {"Authorization": f"{scheme}  {secret}"}
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    assert client.get("/p/alpha/v1/models", headers=headers).status_code == 200


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer   ", "Bearersmt_x", "token smt_x"])
def test_other_schemes_and_empty_tokens_stay_401(client, header):
    r = client.get("/api/v1/projects", headers={"Authorization": header})
    assert r.status_code == 401 and r.json["error"]["code"] == "invalid_api_key"


def test_a_parked_call_page_shows_tool_calls_of_any_shape(ctx, app, make_token):
    """Calls parked before the request check refused malformed tool_calls (and custom tool calls,
    which have no function) still show on the dashboard, as JSON, rather than failing the page."""
    projects.create(ctx, {"name": "alpha"})
    request = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": "not-a-list"},
            {"role": "assistant", "tool_calls": [7, {"id": "c1", "type": "custom", "custom": {"name": "n"}}]},
        ],
    }
    row = projects.get_row(ctx, "alpha")
    pending_id = pending_service.park(ctx, row, "v1:" + "0" * 64, request, False, api="openai.chat")
    client, _ = signed_in(app, make_token("admin"))
    page = client.get(f"/ui/pending/{pending_id}")
    assert page.status_code == 200, page.get_data(as_text=True)[:500]
    text = page.get_data(as_text=True)
    assert "<pre>7</pre>" in text
    assert '<pre>{"custom": {"name": "n"}, "id": "c1", "type": "custom"}</pre>' in text
