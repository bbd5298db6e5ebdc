from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from semula.surfaces.cli import main


@pytest.fixture
def run(db_url, monkeypatch):
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)

    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_migrate_twice_is_a_no_op(run):
    first = run("migrate")
    assert first.exit_code == 0 and "applied 0 migration(s)" in first.output
    assert run("migrate").output == first.output


def test_project_commands(run):
    created = run("project", "create", "shop", "record_timeout=20", "mode=replay")
    assert created.exit_code == 0, created.output
    assert json.loads(created.output)["record_timeout"] == 20
    assert run("project", "list").output.startswith("shop\treplay\tprj_")
    changed = run("project", "set", "shop", 'normalize=[{"pattern": "\\\\d+", "replacement": "N"}]')
    assert changed.exit_code == 0, changed.output
    assert json.loads(run("project", "show", "shop").output)["normalize"][0]["replacement"] == "N"


def test_project_errors_exit_non_zero_with_the_message(run):
    result = run("project", "show", "ghost")
    assert result.exit_code == 1 and "No project named 'ghost'" in result.output
    # Which database it looked in (another directory's ./semula.db is the common cause), no password.
    assert "(This command used the " in result.output and "postgres@" not in result.output
    bad = run("project", "create", "x", "mode=sometimes")
    assert bad.exit_code == 1 and "mode" in bad.output


def test_token_create_list_revoke(run):
    result = CliRunner().invoke(main, ["token", "create", "--role", "editor", "--scope", "record"])
    assert result.exit_code == 0
    secret = result.stdout.strip()
    assert secret.startswith("smt_")
    header, *rows = run("token", "list").output.splitlines()
    assert header.split("\t") == ["ID", "ROLE", "SCOPE", "PROJECT", "STATE", "LAST USED", "EXPIRES", "NAME"]
    [row] = [row for row in rows if "\teditor\t" in row]
    assert len(row.split("\t")) == 8 and "editor\trecord\t-\tactive" in row and secret not in row
    token_id = row.split("\t", 1)[0]
    assert run("token", "revoke", token_id).exit_code == 0
    assert "revoked" in run("token", "list").output
    assert run("token", "revoke", token_id).exit_code == 1


def test_bad_setting_stops_with_the_variable_name(monkeypatch):
    monkeypatch.setenv("SEMULA_POLL_INTERVAL", "soon")
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 1 and "SEMULA_POLL_INTERVAL" in result.output


def test_turning_on_record_through_says_the_cli_checks_its_own_environment(run, monkeypatch, tmp_path):
    for name in (
        "SEMULA_ANSWERER_COMMAND",
        "SEMULA_ANSWERER_URL",
        "SEMULA_UPSTREAM_KEY",
        "SEMULA_ANTHROPIC_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    run("project", "create", "shop")
    refused = run("project", "set", "shop", "record_through=true")
    assert refused.exit_code == 1 and "SEMULA_UPSTREAM_KEY" in refused.output, refused.output
    assert "--env-file" in refused.output and "PATCH /api/v1/projects/NAME" in refused.output
    env = tmp_path / "server.env"
    env.write_text("SEMULA_UPSTREAM_KEY=sk-test-not-real\n")
    turned = run("--env-file", str(env), "project", "set", "shop", "record_through=true")
    assert turned.exit_code == 0 and json.loads(turned.output)["record_through"] is True, turned.output
    # The answerer's command is the daemon's setting: the operator's shell needs none to switch it on.
    answerer = run("project", "set", "shop", "answerer=true")
    assert answerer.exit_code == 0 and json.loads(answerer.output)["answerer"] is True, answerer.output


def test_the_operator_lists_and_revokes_a_tenants_tokens_by_workspace(run):
    assert run("workspace", "create", "alpha").exit_code == 0
    created = run("token", "create", "--workspace", "alpha", "--role", "admin", "--name", "leaked")
    assert created.exit_code == 0, created.output
    token_id = created.stderr.split("\t")[0]
    assert token_id not in run("token", "list").output  # the default workspace's tokens only
    assert token_id in run("token", "list", "--workspace", "alpha").output
    assert run("token", "revoke", token_id).exit_code == 1  # not the default workspace's
    revoked = run("token", "revoke", token_id, "--workspace", "alpha")
    assert revoked.exit_code == 0 and f"revoked {token_id}" in revoked.output
    assert "\trevoked\t" in run("token", "list", "--workspace", "alpha").output
    assert run("token", "sessions", token_id, "--workspace", "alpha").exit_code == 0
    missing = run("token", "list", "--workspace", "ghost")
    assert missing.exit_code == 1
