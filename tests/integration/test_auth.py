"""SPEC §8: each rule shown refusing a token without the right role, scope or binding."""

from __future__ import annotations

import pytest

from semula.service import projects


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
