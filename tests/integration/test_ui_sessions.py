"""Dashboard sessions live on the server (issue #15 item 5): a copied cookie stops working after
sign-out, the token's revocation, the idle timeout and the absolute lifetime; admins list and end them."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from semula.service import projects
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture
from tests.integration.test_auth import signed_in

HOUR = 3600
SETTINGS_CHANGE = {"settings": '{"max_misses": 7}'}


@pytest.fixture
def alpha(ctx):
    projects.create(ctx, {"name": "alpha"})


@pytest.fixture
def clock(monkeypatch):
    """Move the wall clock forward (for the server and the cookie's signature alike), no sleeping."""
    real = time.time
    offset = [0.0]
    monkeypatch.setattr(time, "time", lambda: real() + offset[0])

    def advance(seconds: float) -> None:
        offset[0] += seconds

    return advance


def copy_of(app, client):
    """Another browser holding a copy of `client`'s dashboard cookie."""
    thief = app.test_client()
    thief.set_cookie("semula_session", client.get_cookie("semula_session").value)
    return thief


def works(client) -> bool:
    r = client.get("/ui/")
    assert r.status_code in (200, 302), r.status_code
    return r.status_code == 200


def refused_and_unchanged(ctx, client, csrf) -> None:
    """A settings change posted with the cookie is sent to sign-in and changes nothing."""
    r = client.post("/ui/p/alpha/settings", data={**SETTINGS_CHANGE, "csrf": csrf})
    assert r.status_code == 302 and "/ui/login" in r.headers["Location"]
    assert projects.get(ctx, "alpha")["max_misses"] == 100


def token_id_of(client, admin) -> str:
    return client.get("/api/v1/tokens", headers=admin).json["data"][-1]["id"]


def sessions_of(client, admin, token_id):
    r = client.get(f"/api/v1/tokens/{token_id}/sessions", headers=admin)
    assert r.status_code == 200, r.get_data(as_text=True)
    return r.json["data"]


def test_signing_out_ends_the_session_wherever_it_was_copied(ctx, app, make_token, alpha):
    browser, csrf = signed_in(app, make_token("admin"))
    thief = copy_of(app, browser)
    assert works(thief)
    assert browser.post("/ui/logout", data={"csrf": csrf}).status_code == 302
    assert not works(thief)
    refused_and_unchanged(ctx, thief, csrf)
    assert not works(browser)


def test_revoking_the_token_ends_its_sessions(ctx, app, client, make_token, alpha):
    admin = make_token("admin")
    user = make_token("admin")
    token_id = token_id_of(client, admin)
    browser, csrf = signed_in(app, user)
    thief = copy_of(app, browser)
    [session] = sessions_of(client, admin, token_id)
    assert session["status"] == "active" and session["ended"] is None
    assert client.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code == 200
    refused_and_unchanged(ctx, thief, csrf)
    [session] = sessions_of(client, admin, token_id)
    assert session["status"] == "ended" and session["ended"] is not None


def test_an_idle_session_expires_and_use_keeps_it_alive(ctx, app, make_token, alpha, clock):
    browser, csrf = signed_in(app, make_token("admin"))
    thief = copy_of(app, browser)
    clock(11 * HOUR)
    assert works(thief)  # used within the idle timeout (12 h): still signed in, and seen now
    clock(11 * HOUR)
    assert works(browser)  # 22 h after sign-in, 11 h after it was last seen
    clock(12 * HOUR + 120)
    refused_and_unchanged(ctx, thief, csrf)
    assert not works(browser)


def test_a_session_in_use_ends_after_its_absolute_lifetime(ctx, app, make_token, alpha, clock):
    # Flask's own limit on the signed cookie's age out of the way: only the server's row can refuse.
    app.permanent_session_lifetime = timedelta(days=365)
    browser, csrf = signed_in(app, make_token("admin"))
    thief = copy_of(app, browser)
    for _ in range(15):  # 165 h, never idle for longer than 11 h
        clock(11 * HOUR)
        assert works(thief)
    clock(3 * HOUR + 60)  # 7 days and a minute after sign-in
    refused_and_unchanged(ctx, thief, csrf)


def test_flask_bounds_the_signed_cookie_by_the_session_lifetime(app, settings):
    assert app.permanent_session_lifetime == timedelta(seconds=settings.session_lifetime)


def test_last_seen_is_written_at_most_once_a_minute(app, client, make_token, clock):
    admin = make_token("admin")
    browser, _ = signed_in(app, admin)
    token_id = token_id_of(client, admin)
    [before] = sessions_of(client, admin, token_id)
    clock(30)
    assert works(browser)
    assert sessions_of(client, admin, token_id)[0]["last_seen"] == before["last_seen"]
    clock(61)
    assert works(browser)
    assert sessions_of(client, admin, token_id)[0]["last_seen"] >= before["last_seen"] + 90


def test_admins_list_and_end_a_tokens_sessions(app, client, store, make_token):
    admin = make_token("admin")
    user = make_token("viewer")
    token_id = token_id_of(client, admin)
    first, _ = signed_in(app, user)
    second, _ = signed_in(app, user)
    listed = sessions_of(client, admin, token_id)
    assert [s["object"] for s in listed] == ["session", "session"]
    assert all(s["id"].startswith("ses_") and s["token"] == token_id for s in listed)
    first_id = listed[0]["id"]
    r = client.delete(f"/api/v1/tokens/{token_id}/sessions/{first_id}", headers=admin)
    assert r.status_code == 200 and r.json["status"] == "ended"
    assert not works(first) and works(second)
    again = client.delete(f"/api/v1/tokens/{token_id}/sessions/{first_id}", headers=admin)
    assert again.status_code == 404 and again.json["error"]["code"] == "session_not_found"
    # Ending them all signs the token out everywhere and leaves the token working.
    r = client.delete(f"/api/v1/tokens/{token_id}/sessions", headers=admin)
    assert r.status_code == 200 and [s["status"] for s in r.json["data"]] == ["ended", "ended"]
    assert not works(second)
    assert client.get("/api/v1/projects", headers=user).status_code == 200  # the token still works
    audited = client.get("/api/v1/audit", headers=admin).json["data"]
    assert {(e["action"], e["target"]) for e in audited} >= {
        ("session.end", first_id),
        ("token.end_sessions", token_id),
    }


def test_a_session_of_another_token_is_404(app, client, make_token):
    admin = make_token("admin")
    mine = make_token("viewer")
    mine_id = token_id_of(client, admin)
    make_token("viewer")
    other_id = token_id_of(client, admin)
    signed_in(app, mine)
    [session] = sessions_of(client, admin, mine_id)
    r = client.delete(f"/api/v1/tokens/{other_id}/sessions/{session['id']}", headers=admin)
    assert r.status_code == 404 and r.json["error"]["code"] == "session_not_found"
    assert client.get("/api/v1/tokens/tok_nope/sessions", headers=admin).status_code == 404


@pytest.mark.parametrize(
    ("role", "project", "code"), [("editor", None, "insufficient_role"), ("admin", "alpha", "project_bound")]
)
def test_only_an_unbound_admin_sees_sessions(app, client, make_token, alpha, role, project, code):
    admin = make_token("admin")
    signed_in(app, admin)
    token_id = token_id_of(client, admin)
    headers = make_token(role, project=project)
    for method in ("get", "delete"):
        r = getattr(client, method)(f"/api/v1/tokens/{token_id}/sessions", headers=headers)
        assert r.status_code == 403 and r.json["error"]["code"] == code


def test_no_session_secret_in_responses_or_the_database(app, client, store, make_token):
    admin = make_token("admin")
    browser, _ = signed_in(app, admin)
    cookie = browser.get_cookie("semula_session").value
    secret = app.session_interface.get_signing_serializer(app).loads(cookie)["sid"]
    assert len(secret) >= 40
    token_id = token_id_of(client, admin)
    listing = client.get(f"/api/v1/tokens/{token_id}/sessions", headers=admin).get_data(as_text=True)
    assert secret not in listing and "hash" not in listing
    rows = store.all("list_ui_sessions", token_id=token_id, workspace_id="wsp_default", after=None, limit=10)
    assert len(rows) == 1 and secret not in str(rows)


def test_the_cli_lists_and_ends_a_tokens_sessions(app, client, make_token, db_url, monkeypatch):
    from click.testing import CliRunner

    from semula.surfaces.cli import main

    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    admin = make_token("admin")
    browser, _ = signed_in(app, admin)
    token_id = token_id_of(client, admin)
    listing = CliRunner().invoke(main, ["token", "sessions", token_id])
    assert listing.exit_code == 0, listing.output
    session_id = listing.output.split("\t", 1)[0]
    assert session_id.startswith("ses_") and "\tactive\t" in listing.output
    ended = CliRunner().invoke(main, ["token", "end-sessions", token_id, "--session", session_id])
    assert ended.exit_code == 0 and f"ended {session_id}" in ended.output
    assert not works(browser)
    assert "\tended\t" in CliRunner().invoke(main, ["token", "sessions", token_id]).output


def test_hosted_sessions_under_row_level_security(hosted, clock):  # noqa: F811 - the fixture imported above
    """On PostgreSQL the server runs as the RLS-bound role: sign-in, use (last_seen written), listing and
    sign-out work, and a workspace sees none of another's sessions."""
    from semula.service import tokens
    from semula.web import create_app

    operator, app_store, app_settings = hosted
    app = create_app(app_settings, app_store)
    client = app.test_client()
    a = tenant(operator, "alpha-ws")
    projects.create(a, {"name": "alpha"})
    b = tenant(operator, "bravo-ws")
    projects.create(b, {"name": "bee"})
    a_admin = {"Authorization": f"Bearer {tokens.create(a, {'role': 'admin'})['token']}"}
    b_admin = {"Authorization": f"Bearer {tokens.create(b, {'role': 'admin'})['token']}"}
    bound = tokens.create(b, {"role": "admin", "project": "bee"})
    browser, csrf = signed_in(app, {"Authorization": f"Bearer {bound['token']}"})
    thief = copy_of(app, browser)
    assert works(thief)
    clock(61)
    assert works(thief)
    [session] = sessions_of(client, b_admin, bound["id"])
    assert session["status"] == "active" and session["last_seen"] >= session["created"] + 60
    assert client.get(f"/api/v1/tokens/{bound['id']}/sessions", headers=a_admin).status_code == 404
    r = client.delete(f"/api/v1/tokens/{bound['id']}/sessions/{session['id']}", headers=a_admin)
    assert r.status_code == 404 and works(thief)
    assert browser.post("/ui/logout", data={"csrf": csrf}).status_code == 302
    assert not works(thief)
    assert sessions_of(client, b_admin, bound["id"])[0]["status"] == "ended"
