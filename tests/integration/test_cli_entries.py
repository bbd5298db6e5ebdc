"""The operator's entry, bundle and audit commands on the local database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from semula.service import entries, projects
from semula.surfaces.cli import main
from tests.entry_helpers import save_entry


@pytest.fixture
def run(db_url, monkeypatch):
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)

    def invoke(*args: str, input: str | bytes | None = None):
        return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def shop(ctx):
    projects.create(ctx, {"name": "shop"})
    return save_entry(ctx, "shop", "hello", {"content": "one"})


def test_entries_list_show_edit_revert_pin_review(run, ctx, shop):
    listed = run("entries", "shop")
    assert listed.exit_code == 0 and listed.output.startswith(
        f"{shop['id']}\tunreviewed\t-\tgpt-4o\tr1\thello"
    )
    assert run("entries", "shop", "--text", "nothing").output == ""
    assert json.loads(run("entries", "shop", "--json").output)["object"] == "list"

    edited = run("entry", "edit", shop["id"], "--content", "two", "--summary", "better")
    assert edited.exit_code == 0 and json.loads(edited.output)["revision"] == 2
    piped = run("entry", "edit", shop["id"], input='{"message": {"role": "assistant", "content": "three"}}')
    assert json.loads(piped.output)["response"]["choices"][0]["message"]["content"] == "three"
    bad = run("entry", "edit", shop["id"], input='{"content": 7}')
    assert bad.exit_code == 1 and "content" in bad.output

    assert json.loads(run("entry", "revert", shop["id"], "1").output)["revision"] == 4
    assert json.loads(run("entry", "pin", shop["id"]).output)["pinned"] is True
    assert run("entries", "shop", "--pinned").output.startswith(shop["id"])
    assert run("entries", "shop", "--unpinned").output == ""
    assert json.loads(run("entry", "unpin", shop["id"]).output)["pinned"] is False
    assert json.loads(run("entry", "reject", shop["id"]).output)["review_status"] == "rejected"
    assert json.loads(run("entry", "approve", shop["id"]).output)["review_status"] == "approved"
    shown = json.loads(run("entry", "show", shop["id"]).output)
    assert [r["actor"] for r in shown["revisions"]] == ["agent", "human", "human", "human"]

    audit = run("audit", "--target", shop["id"]).output.splitlines()
    assert [line.split("\t")[2] for line in audit] == [
        "entry.review",
        "entry.review",
        "entry.unpin",
        "entry.pin",
        "entry.revert",
        "entry.edit",
        "entry.edit",
    ]
    assert run("audit", "--action", "entry.pin").output.count("entry.pin") == 1

    assert run("entry", "delete", shop["id"]).exit_code == 1  # asks first; no input means no
    assert run("entry", "delete", shop["id"], "--yes").exit_code == 0
    missing = run("entry", "show", shop["id"])
    assert missing.exit_code == 1 and "No entry" in missing.output


def test_export_import_round_trip_and_check(run, ctx, shop, tmp_path):
    exported = run("export", "shop")
    assert exported.exit_code == 0
    path = tmp_path / "bundle.json"
    path.write_bytes(exported.stdout_bytes)
    run("project", "create", "copy", "mode=replay")
    report = run("import", "copy", str(path), "--progress")
    assert report.exit_code == 0, report.output
    reported = json.loads(report.stdout[report.stdout.index("{") :])
    assert reported["created"] == 1
    assert run("export", "copy").stdout_bytes == exported.stdout_bytes
    assert projects.get(ctx, "copy")["mode"] == "record"  # operator fields reset, and the report says so
    assert reported["settings_changed"]["mode"] == "record"
    missing = run("import", "ghost", str(path))
    assert missing.exit_code == 1 and "semula project create ghost" in missing.output
    assert "project.import" in run("audit", "--action", "project.import").output

    clean = run("export", "shop", "--check")
    assert clean.exit_code == 0 and clean.stdout_bytes == exported.stdout_bytes
    assert run("export", "--check-file", str(path)).exit_code == 0

    leaky = tmp_path / "leaky.json"
    bundle = json.loads(path.read_text())
    bundle["entries"][0]["request"]["messages"][0]["content"] = "token ghp_" + "a1B2" * 10
    leaky.write_text(json.dumps(bundle, indent=2))
    checked = run("export", "--check-file", str(leaky))
    assert checked.exit_code == 1
    assert "entries[0].request.messages[].content" in checked.output and "ghp_" not in checked.output

    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(path.read_bytes()[:-40])
    before = entries.list_entries(ctx, "copy")
    failed = run("import", "copy", str(truncated))
    assert failed.exit_code == 1 and "truncated" in failed.output
    assert entries.list_entries(ctx, "copy") == before
    assert run("export").exit_code == 2


def test_export_check_reads_the_stored_entries_and_prints_paths_never_values(run, ctx, tmp_path):
    projects.create(ctx, {"name": "leak"})
    gitlab = "glpat-Ab3dEf6hIj9kLm2nOp5q"
    ours = "smt_wHx2SeDqzFmdvBUnRliEbspP34dyHByOpDb0EAd6Plk"
    split = "sk-abcdefghij\u200bklmnopqrstuvwxyz0123456789"
    save_entry(ctx, "leak", "hello", {"content": f"your token is {gitlab}"}, metadata={ours: "x"})
    save_entry(ctx, "leak", f"my key is {split}", {"content": "ok"})

    checked = run("export", "leak", "--check")
    assert checked.exit_code == 1
    bundle = json.loads(checked.stdout)
    assert gitlab not in checked.stdout and ours not in json.dumps(bundle["entries"][0]["response"])
    report = checked.stderr
    assert "project leak's stored entries hold 3 strings shaped like a credential:" in report
    assert ".response.choices[].message.content" in report
    assert ".request.messages[].content" in report
    assert ".request.metadata (an object key)" in report
    for secret in (gitlab, ours, split, "Ab3dEf", "wHx2Se", "abcdefghij"):
        assert secret not in report

    # A bundle file holding the key as an object key: its path, never its first characters.
    path = tmp_path / "keyed.json"
    path.write_text(checked.stdout.replace("[REDACTED]", "fine"))
    from_file = run("export", "--check-file", str(path))
    assert from_file.exit_code == 1 and ".request.metadata (an object key)" in from_file.stderr
    assert "wHx2Se" not in from_file.stderr
