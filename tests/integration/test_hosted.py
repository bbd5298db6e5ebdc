"""Hosted mode: workspaces, quotas and the hosted rules (on the RLS-bound role on PostgreSQL)."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from semula.core import errors
from semula.core.fingerprint import fingerprint
from semula.service import Context, bundles, pending, projects, tokens, workspaces
from semula.surfaces.cli import main
from semula.web import create_app
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture


def ask(text: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


@pytest.fixture
def acme(hosted):  # noqa: F811 - the fixture imported above
    """Workspace acme: (its operator context, a client of the hosted app, its admin's headers)."""
    operator, app_store, app_settings = hosted
    ctx = tenant(operator, "acme")
    secret = tokens.create(ctx, {"role": "admin"})["token"]
    client = create_app(app_settings, app_store).test_client()
    return ctx, client, {"Authorization": f"Bearer {secret}"}


def quota(ctx: Context, **values) -> None:
    workspaces.set_quotas(ctx.as_(replace(ctx.principal, workspace_id="wsp_default")), "acme", values)


def test_workspace_commands_and_a_disabled_workspace(db_url, monkeypatch):
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    run = CliRunner().invoke
    assert run(main, ["workspace", "create", "acme"]).exit_code == 0
    assert run(main, ["workspace", "create", "acme"]).exit_code == 1
    made = run(main, ["token", "create", "--role", "admin", "--workspace", "acme"])
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[-1]
    assert run(main, ["workspace", "set", "acme", "quota_projects=3"]).exit_code == 0
    listing = run(main, ["workspace", "list"]).output
    assert "acme" in listing and "quota_projects=3" in listing and "default" in listing
    from semula.config import Settings
    from semula.db import connect

    store = connect(db_url, pool_size=2)
    client = create_app(replace(Settings(), database_url=db_url, hosted=True), store).test_client()
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    assert run(main, ["workspace", "disable", "acme"]).exit_code == 0
    assert client.get("/api/v1/projects", headers=headers).status_code == 401
    assert run(main, ["workspace", "disable", "acme", "--enable"]).exit_code == 0
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    store.close()


def test_auth_off_is_refused_at_start_in_hosted_mode(monkeypatch):
    monkeypatch.setenv("SEMULA_HOSTED", "on")
    monkeypatch.setenv("SEMULA_AUTH", "off")
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 1 and "SEMULA_AUTH" in result.output


def test_answerer_is_403_for_every_role_in_hosted_mode(acme):
    ctx, client, headers = acme
    settings = replace(ctx.settings, answerer_command=["true"])
    with pytest.raises(errors.Forbidden):
        projects.create(Context(ctx.store, settings, ctx.principal), {"name": "p", "answerer": True})
    client.post("/api/v1/projects", json={"name": "p"}, headers=headers)
    r = client.patch("/api/v1/projects/p", json={"answerer": True}, headers=headers)
    assert r.status_code == 403


def test_record_through_is_403_unless_the_operator_allows_tenants(acme):
    ctx, client, headers = acme
    client.post("/api/v1/projects", json={"name": "p"}, headers=headers)
    r = client.patch("/api/v1/projects/p", json={"record_through": True}, headers=headers)
    assert r.status_code == 403


def test_project_quota(acme):
    ctx, client, headers = acme
    quota(ctx, quota_projects=1)
    assert client.post("/api/v1/projects", json={"name": "one"}, headers=headers).status_code == 201
    r = client.post("/api/v1/projects", json={"name": "two"}, headers=headers)
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_quota"
    assert [p["name"] for p in client.get("/api/v1/projects", headers=headers).json["data"]] == ["one"]


def test_parked_quota_refuses_a_new_miss_but_lets_identical_ones_join(acme):
    ctx, client, headers = acme
    projects.create(ctx, {"name": "p", "record_timeout": 30})
    quota(ctx, quota_parked=1)
    row = projects.get_row(ctx, "p")
    pending.park(ctx, row, fingerprint(ask("first")), ask("first"), False)
    r = client.post("/p/p/v1/chat/completions", json=ask("second"), headers=headers)
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_quota"
    assert len(ctx.store.all("parked_in_project", project_id=row["id"])) == 1


def test_entries_quota_on_answer_and_import(acme):
    ctx, client, headers = acme
    projects.create(ctx, {"name": "p"})
    row = projects.get_row(ctx, "p")
    quota(ctx, quota_entries=1)
    first = pending.park(ctx, row, fingerprint(ask("a")), ask("a"), False)
    pending.answer(ctx, first, {"content": "a"})
    second = pending.park(ctx, row, fingerprint(ask("b")), ask("b"), False)
    r = client.post(f"/api/v1/pending/{second}/answer", json={"content": "b"}, headers=headers)
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_quota"
    assert pending.get(ctx, second)["status"] == "pending"
    # A new revision of an existing entry adds no entry, so the quota lets it through.
    again = pending.park(ctx, row, fingerprint(ask("a")), ask("a"), False)
    assert (
        client.post(f"/api/v1/pending/{again}/answer", json={"content": "a2"}, headers=headers).status_code
        == 200
    )
    exported = b"".join(bundles.export_bundle(ctx, "p"))
    bundle = json.loads(exported)
    bundle["entries"].append(
        {**bundle["entries"][0], "fingerprint": fingerprint(ask("c")), "request": ask("c")}
    )
    before = b"".join(bundles.export_bundle(ctx, "p"))
    with pytest.raises(errors.QuotaExceeded):
        bundles.import_bundle(ctx, "p", io.BytesIO(json.dumps(bundle).encode()))
    assert b"".join(bundles.export_bundle(ctx, "p")) == before


def test_answer_size_quota_is_413_and_writes_nothing(acme):
    ctx, client, headers = acme
    projects.create(ctx, {"name": "p"})
    row = projects.get_row(ctx, "p")
    quota(ctx, quota_answer_bytes=100)
    call = pending.park(ctx, row, fingerprint(ask("big")), ask("big"), False)
    r = client.post(f"/api/v1/pending/{call}/answer", json={"content": "x" * 200}, headers=headers)
    assert r.status_code == 413 and r.json["error"]["code"] == "semula_quota"
    assert r.json["error"]["type"] == "invalid_request_error"  # too large: no rate to wait out
    assert pending.get(ctx, call)["status"] == "pending"
    assert (
        client.post(f"/api/v1/pending/{call}/answer", json={"content": "small"}, headers=headers).status_code
        == 200
    )


def test_no_quotas_outside_hosted_mode_unless_the_operator_sets_them(ctx):
    for i in range(3):
        projects.create(ctx, {"name": f"p{i}"})
    capped = Context(ctx.store, replace(ctx.settings, quota_projects=3), ctx.principal)
    with pytest.raises(errors.QuotaExceeded):
        projects.create(capped, {"name": "p3"})
