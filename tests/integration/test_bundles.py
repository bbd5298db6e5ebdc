"""Export and import bundles on SQLite and PostgreSQL: the round trip, idempotence, pins, operator
fields, and malformed bundles that must leave the project exactly as it was."""

from __future__ import annotations

import io
import json

import pytest

from semula.core import answers, bundle_format
from semula.core import fingerprint as fp
from semula.core.errors import BadRequest, Conflict, Forbidden
from semula.db import UniqueViolation
from semula.service import CLI, Principal, audit, bundles, entries, projects
from tests.entry_helpers import request_for, save_entry, snapshot

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
        },
    }
]
CHUNKS = [
    {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hé"}}],
    },
    {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "llo"}, "finish_reason": "stop"}],
    },
]


def export(ctx, name: str) -> bytes:
    return b"".join(bundles.export_bundle(ctx, name))


def import_(ctx, name: str, data: bytes | str) -> dict:
    return bundles.import_bundle(ctx, name, io.BytesIO(data.encode() if isinstance(data, str) else data))


@pytest.fixture
def source(ctx):
    projects.create(
        ctx,
        {
            "name": "source",
            "record_timeout": 42,
            "restamp": "recorded",
            "stream_pacing": 1.5,
            "embeddings": "synthetic",
            "max_misses": 7,
            "normalize": [{"pattern": "\\d{4}-\\d\\d-\\d\\d", "replacement": "DATE"}],
            "ignore_fields": ["/temperature"],
            "mode": "replay",
        },
    )
    save_entry(ctx, "source", "plain question")
    tool = save_entry(
        ctx,
        "source",
        "find sku",
        {"tool_calls": [{"name": "lookup", "arguments": {"sku": "A1"}}]},
        tools=TOOLS,
    )
    streamed = save_entry(
        ctx, "source", "stream me ünïcode ✓", {"content": "Héllo"}, chunks=CHUNKS, stream=True
    )
    dated = save_entry(ctx, "source", "report for 2026-01-02", temperature=0.5)
    entries.set_pinned(ctx, tool["id"], True)
    entries.review(ctx, streamed["id"], "approved")
    entries.edit(ctx, dated["id"], {"content": "edited"})
    entries.review(ctx, dated["id"], "rejected")
    return "source"


def test_round_trip_is_byte_identical(ctx, source):
    first = export(ctx, source)
    # The streamed export is exactly json.dumps with sorted keys and two-space indents.
    assert (
        first == (json.dumps(json.loads(first), sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    )
    bundle = json.loads(first)
    assert bundle["bundle"] == {"format": "semula-bundle", "version": 1}
    assert bundle["config"] == {
        "after_last": "repeat_last",
        "embeddings": "synthetic",
        "ignore_fields": ["/temperature"],
        "max_misses": 7,
        "normalize": [{"pattern": "\\d{4}-\\d\\d-\\d\\d", "replacement": "DATE"}],
        "record_timeout": 42,
        "restamp": "recorded",
        "sequences": "off",
        "stream_pacing": 1.5,
    }
    fingerprints = [e["fingerprint"] for e in bundle["entries"]]
    assert fingerprints == sorted(fingerprints) and len(fingerprints) == 4
    assert sorted(e["review_status"] for e in bundle["entries"]) == ["approved", "rejected", "unreviewed"] + [
        "unreviewed"
    ]
    assert sum(e["pinned"] for e in bundle["entries"]) == 1
    assert any(e["chunks"] == CHUNKS for e in bundle["entries"])

    projects.create(ctx, {"name": "copy"})
    report = import_(ctx, "copy", first)
    assert (report["created"], report["updated"], report["unchanged"], report["skipped"]) == (4, 0, 0, 0)
    assert export(ctx, "copy") == first
    # And the copy replays: the same fingerprints under the same rules.
    copy = projects.get_row(ctx, "copy")
    fingerprint = fp.fingerprint(
        request_for("report for 2031-12-31", temperature=0.9),
        ["/temperature"],
        [{"pattern": "\\d{4}-\\d\\d-\\d\\d", "replacement": "DATE"}],
    )
    assert entries.lookup(ctx, copy["id"], fingerprint) is None  # rejected in the source, so not replayed
    [rejected] = entries.list_entries(ctx, "copy", review_status="rejected")["data"]
    assert rejected["fingerprint"] == fingerprint
    plain = fp.fingerprint(request_for("plain question"), ["/temperature"], bundle["config"]["normalize"])
    assert entries.lookup(ctx, copy["id"], plain) is not None


def test_an_import_apart_commits_each_batch_and_an_entry_written_ahead_is_found_unchanged(
    ctx, source, monkeypatch
):
    """semula replay's import (replay_loading): the settings written first with its mode, an entry
    written ahead of the import as the import writes it, then the import a batch to a transaction."""
    first = export(ctx, source)
    projects.create(ctx, {"name": "copy"})
    config = bundles.read_config(ctx, io.BytesIO(first))
    assert config["ignore_fields"] == ["/temperature"] and config["record_timeout"] == 42
    settings = bundles.apply_config(ctx, "copy", config, {"mode": "replay"})
    assert projects.get(ctx, "copy")["mode"] == "replay"
    assert projects.get(ctx, "copy")["ignore_fields"] == ["/temperature"]
    value = json.loads(first)["entries"][0]
    item = bundles.prepare_entry(ctx, settings, value)
    assert item.fingerprint == value["fingerprint"]
    assert bundles.write_entries(ctx, "copy", [item])["created"] == 1
    monkeypatch.setattr(bundles, "BATCH", 1)
    transactions = []
    opened = ctx.store.transaction
    monkeypatch.setattr(ctx.store, "transaction", lambda *a: transactions.append(1) or opened(*a))
    report = bundles.import_bundle(ctx, "copy", io.BytesIO(first), overrides={"mode": "replay"}, apart=True)
    assert (report["created"], report["updated"], report["unchanged"], report["skipped"]) == (3, 0, 1, 0)
    assert report["settings_changed"] == {}  # written before, the same
    assert len(transactions) == 1 + 4 + 1  # the settings, each entry (BATCH 1), the end
    assert projects.get(ctx, "copy")["mode"] == "replay"
    assert export(ctx, "copy") == first


def test_empty_project_round_trip(ctx):
    projects.create(ctx, {"name": "empty"})
    first = export(ctx, "empty")
    assert json.loads(first)["entries"] == []
    projects.create(ctx, {"name": "empty2"})
    assert import_(ctx, "empty2", first)["created"] == 0
    assert export(ctx, "empty2") == first


def test_import_is_idempotent_skips_pinned_and_revises_changed(ctx, source):
    bundle = export(ctx, source)
    projects.create(ctx, {"name": "copy"})
    import_(ctx, "copy", bundle)
    again = import_(ctx, "copy", bundle)
    assert (again["created"], again["updated"], again["unchanged"], again["skipped"]) == (0, 0, 3, 1)

    changed = json.loads(bundle)
    for entry in changed["entries"]:
        entry["response"] = {"content": "changed " + entry["fingerprint"][:8]}
        entry["pinned"] = False
        entry.pop("chunks")
    report = import_(ctx, "copy", json.dumps(changed))
    assert (report["created"], report["updated"], report["unchanged"], report["skipped"]) == (0, 3, 0, 1)
    for item in entries.list_entries(ctx, "copy", limit=100)["data"]:
        shown = entries.get(ctx, item["id"])
        if shown["pinned"]:  # pinned in the copy: untouched
            assert len(shown["revisions"]) == 1
            continue
        assert shown["response"]["choices"][0]["message"]["content"].startswith("changed ")
        assert shown["chunks"] is None
        assert [r["actor"] for r in shown["revisions"]] == ["import", "import"]


def test_import_takes_a_bundle_whose_only_change_is_a_pin_or_review_without_a_new_revision(ctx):
    """Pinning and reviewing add no revision (entries.review, set_pinned): a bundle whose answers are
    the stored ones and only their pin or review differs takes them, updated, with no revision."""
    projects.create(ctx, {"name": "copy"})
    entry = {**VALID["entries"][0], "later_answers": [{"response": {"content": "2"}}]}
    bundle = {**VALID, "entries": [entry]}
    assert import_(ctx, "copy", json.dumps(bundle))["created"] == 1
    [before] = snapshot(ctx, "copy")["entries"]

    entry["review_status"] = "approved"
    entry["later_answers"][0]["pinned"] = True
    report = import_(ctx, "copy", json.dumps(bundle))
    assert (report["updated"], report["unchanged"]) == (1, 0)
    [after] = snapshot(ctx, "copy")["entries"]
    assert after["review_status"] == "approved" and not after["pinned"]
    marks = [(a["seq"], a["pinned"], a["revision"]) for a in after["sequence"]]
    assert marks == [(1, False, 1), (2, True, 1)]
    keep = ("revision", "revisions", "response", "answers")
    assert {key: after[key] for key in keep} == {key: before[key] for key in keep}

    entry["pinned"] = True
    assert import_(ctx, "copy", json.dumps(bundle))["updated"] == 1
    [pinned] = snapshot(ctx, "copy")["entries"]
    assert pinned["pinned"] and pinned["revisions"] == before["revisions"]
    assert import_(ctx, "copy", json.dumps(bundle))["skipped"] == 1  # pinned here now: left alone


def test_import_leaves_a_pinned_later_answer_alone_in_its_place(ctx):
    """A pinned answer of a sequence is left alone by imports (docs/cli.md, entry answer pin): its
    answer, pin and revisions stay, whatever the bundle has there, and so does its place."""
    projects.create(ctx, {"name": "copy"})
    later = [{"response": {"content": "2"}}, {"response": {"content": "3"}}, {"response": {"content": "4"}}]
    entry = {**VALID["entries"][0], "later_answers": later}
    assert import_(ctx, "copy", json.dumps({**VALID, "entries": [entry]}))["created"] == 1
    [listed] = entries.list_entries(ctx, "copy")["data"]
    entries.pin_answer(ctx, listed["id"], 3, True)

    def answers():
        return [
            (
                a["seq"],
                a["pinned"],
                a["revision"],
                entries.get_answer(ctx, listed["id"], a["seq"])["answer"]["content"],
            )
            for a in entries.get(ctx, listed["id"])["sequence"]
        ]

    # The bundle unpins answer 3 and changes it and answer 2: answer 2 changes, answer 3 stays.
    changed = [
        {"response": {"content": "2b"}},
        {"response": {"content": "3b"}},
        {"response": {"content": "4"}},
    ]
    entry["later_answers"] = changed
    assert import_(ctx, "copy", json.dumps({**VALID, "entries": [entry]}))["updated"] == 1
    assert answers() == [(1, False, 2, "1"), (2, False, 2, "2b"), (3, True, 1, "3"), (4, False, 2, "4")]
    report = import_(ctx, "copy", json.dumps({**VALID, "entries": [entry]}))
    assert (report["updated"], report["unchanged"]) == (0, 1)  # the pinned answer differing is no change

    # A bundle with one answer drops the answers after the pinned one only.
    entry["later_answers"] = []
    assert import_(ctx, "copy", json.dumps({**VALID, "entries": [entry]}))["updated"] == 1
    assert answers() == [(1, False, 3, "1"), (2, False, 2, "2b"), (3, True, 1, "3")]
    assert entries.get(ctx, listed["id"])["answers"] == 3
    assert import_(ctx, "copy", json.dumps({**VALID, "entries": [entry]}))["unchanged"] == 1


def test_import_takes_a_bundle_whose_only_change_is_meta_without_a_new_revision(ctx):
    """Recorded headers and stream timing are part of an entry (replay sends them): a bundle that
    changes only them updates the entry, answer 1's and each later answer's, and adds no revision."""
    projects.create(ctx, {"name": "copy"})
    entry = {
        **VALID["entries"][0],
        "meta": {"headers": {"openai-processing-ms": "100"}, "gaps": [0.5]},
        "later_answers": [{"response": {"content": "2"}, "meta": {"headers": {"openai-version": "1"}}}],
    }
    bundle = {**VALID, "entries": [entry]}
    assert import_(ctx, "copy", json.dumps(bundle))["created"] == 1
    before = snapshot(ctx, "copy")["entries"]

    def counts(report):
        return report["created"], report["updated"], report["unchanged"], report["skipped"]

    def stored():
        [item] = json.loads(export(ctx, "copy"))["entries"]
        return item.get("meta"), [answer.get("meta") for answer in item["later_answers"]]

    assert counts(import_(ctx, "copy", json.dumps(bundle))) == (0, 0, 1, 0)

    entry["meta"] = {"headers": {"openai-processing-ms": "250"}, "gaps": [0.5, 1.0]}
    assert counts(import_(ctx, "copy", json.dumps(bundle))) == (0, 1, 0, 0)
    assert stored() == (entry["meta"], [{"headers": {"openai-version": "1"}}])

    entry["later_answers"][0]["meta"] = {"headers": {"openai-version": "2"}}
    assert counts(import_(ctx, "copy", json.dumps(bundle))) == (0, 1, 0, 0)
    assert stored() == (entry["meta"], [{"headers": {"openai-version": "2"}}])

    del entry["meta"], entry["later_answers"][0]["meta"]  # a bundle without meta clears it
    assert counts(import_(ctx, "copy", json.dumps(bundle))) == (0, 1, 0, 0)
    assert stored() == (None, [None])
    assert counts(import_(ctx, "copy", json.dumps(bundle))) == (0, 0, 1, 0)

    # Revisions record answers: the answers, their revisions and the review are as the first import left them.
    [after] = snapshot(ctx, "copy")["entries"]
    keep = ("revision", "revisions", "response", "chunks", "review_status", "pinned", "answers")
    assert {key: after[key] for key in keep} == {key: before[0][key] for key in keep}
    assert [(a["seq"], a["revision"]) for a in after["sequence"]] == [(1, 1), (2, 1)]
    assert [r["actor"] for r in after["revisions"]] == ["import", "import"]


def test_import_resets_operator_fields_applies_settings_and_is_audited(ctx, source):
    bundle = export(ctx, source)
    projects.create(ctx, {"name": "copy", "mode": "replay", "upstream_max_calls": 5, "record_timeout": 9})
    import_(ctx, "copy", bundle)
    copy = projects.get(ctx, "copy")
    for field in projects.OPERATOR_FIELDS:
        assert copy[field] == projects.DEFAULTS[field], field
    assert (copy["record_timeout"], copy["max_misses"], copy["ignore_fields"]) == (42, 7, ["/temperature"])
    [event] = [e for e in audit.list_events(ctx, action="project.import")["data"]]
    assert event["target"] == "copy" and event["actor"] == "cli"
    assert event["fields"] == sorted(
        [
            "embeddings",
            "ignore_fields",
            "max_misses",
            "mode",
            "normalize",
            "record_timeout",
            "restamp",
            "stream_pacing",
            "upstream_max_calls",
        ]
    )


def test_import_needs_an_admin_and_a_bundle_never_sets_operator_fields(ctx, source):
    bundle = export(ctx, source)
    projects.create(ctx, {"name": "copy"})
    editor = ctx.as_(Principal(workspace_id=CLI.workspace_id, role="editor", scope="full", actor="t"))
    with pytest.raises(Forbidden):
        import_(editor, "copy", bundle)
    sneaky = json.loads(bundle)
    sneaky["config"]["answerer"] = True
    with pytest.raises(BadRequest) as refused:
        import_(ctx, "copy", json.dumps(sneaky))
    assert refused.value.param == "config.answerer" and "operator" in refused.value.message


def test_hand_edited_request_is_refingerprinted_and_redacted_one_keeps_its_fingerprint(ctx, source):
    bundle = json.loads(export(ctx, source))
    plain = next(e for e in bundle["entries"] if e["request"]["messages"][0]["content"] == "plain question")
    plain["request"]["messages"][0]["content"] = "plain question, edited in git"
    secret = dict(plain, request=request_for("my key is [REDACTED]"), fingerprint="v1:" + "ab" * 32)
    bundle["entries"].append(secret)
    projects.create(ctx, {"name": "copy"})
    report = import_(ctx, "copy", json.dumps(bundle))
    assert report["fingerprints_recomputed"] == 1 and report["created"] == 5
    row = projects.get_row(ctx, "copy")
    rules = (["/temperature"], json.loads(row["normalize"]))
    assert entries.lookup(
        ctx, row["id"], fp.fingerprint(request_for("plain question, edited in git"), *rules)
    )
    assert entries.lookup(ctx, row["id"], "v1:" + "ab" * 32)


def test_import_redacts_credentials_in_requests_but_keeps_the_fingerprint_of_the_original(ctx):
    projects.create(ctx, {"name": "copy"})
    key = "sk-proj-" + "Q7" * 20
    request = request_for(f"use {key} please")
    bundle = {
        "bundle": {"format": "semula-bundle", "version": 1},
        "entries": [{"request": request, "response": {"content": "ok"}}],
    }
    import_(ctx, "copy", json.dumps(bundle))
    [item] = entries.list_entries(ctx, "copy")["data"]
    shown = entries.get(ctx, item["id"])
    assert key not in json.dumps(shown) and "[REDACTED]" in shown["request"]["messages"][0]["content"]
    assert shown["fingerprint"] == fp.fingerprint(request)


VALID = {
    "bundle": {"format": "semula-bundle", "version": 1},
    "config": {"record_timeout": 10},
    "entries": [{"request": request_for("one"), "response": {"content": "1"}}],
}


def with_entry(**changes):
    entry = {**VALID["entries"][0], **changes}
    return {**VALID, "entries": [VALID["entries"][0], {k: v for k, v in entry.items() if v is not ...}]}


MALFORMED = {
    "truncated JSON": (json.dumps(VALID)[:-30], "truncated JSON", None),
    "not JSON": ("{'bundle': 1}", "not valid JSON", None),
    "trailing garbage": (json.dumps(VALID) + " {}", "not valid JSON", None),
    "empty": ("", "ends too early", None),
    "a list": ("[]", "JSON object", None),
    "no header": ({"entries": []}, "header", "bundle"),
    "unknown top-level key": ({**VALID, "extra": 1}, "Unknown key", "extra"),
    "entries before header": (
        '{"entries": [], "bundle": {"format": "semula-bundle", "version": 1}}',
        "must come before",
        "bundle",
    ),
    "wrong format": ({**VALID, "bundle": {"format": "zip", "version": 1}}, "bundle.format", "bundle.format"),
    "version as text": ({**VALID, "bundle": {"format": "semula-bundle", "version": "1"}}, "version", None),
    "newer version": (
        {**VALID, "bundle": {"format": "semula-bundle", "version": 2}, "config": {"new_setting": 1}},
        "version 2",
        "bundle.version",
    ),
    "entries not a list": ({**VALID, "entries": {"a": 1}}, "entries must be a list", "entries"),
    "entry not an object": ({**VALID, "entries": [VALID["entries"][0], "x"]}, "entries[1]", "entries[1]"),
    "config wrong type": ({**VALID, "config": {"record_timeout": "ten"}}, "config.record_timeout", None),
    "config bad regex": ({**VALID, "config": {"normalize": [{"pattern": "("}]}}, "config", None),
    "missing request": (with_entry(request=...), "entries[1]", "entries[1].request"),
    "missing response": (with_entry(response=...), "entries[1]", "entries[1].response"),
    "request wrong type": (with_entry(request="hello"), "entries[1]", "entries[1].request"),
    "request without messages": (
        with_entry(request={"model": "m"}),
        "messages",
        "entries[1].request.messages",
    ),
    "response wrong shape": (with_entry(response={"choices": "no"}), "entries[1]", None),
    "answer with an unknown tool": (
        with_entry(response={"tool_calls": [{"name": "rm", "arguments": {}}]}),
        "entries[1]",
        None,
    ),
    "pinned not a boolean": (with_entry(pinned="yes"), "entries[1]", "entries[1].pinned"),
    "unknown review status": (with_entry(review_status="great"), "entries[1]", "entries[1].review_status"),
    "bad fingerprint": (with_entry(fingerprint="md5:abc"), "entries[1]", "entries[1].fingerprint"),
    "unknown entry field": (with_entry(colour="red"), "entries[1]", "entries[1].colour"),
    "huge string": (with_entry(response={"content": "x" * 70_000}), "longer than", "entries[1].response"),
    "a cookie in meta.headers": (
        with_entry(meta={"headers": {"Set-Cookie": "session=canary-cookie"}}),
        "not a provider header",
        None,
    ),
    "a line break in a header value": (
        with_entry(meta={"headers": {"openai-processing-ms": "1\r\nSet-Cookie: session=canary"}}),
        "printable ASCII",
        None,
    ),
    "a header value not a string": (with_entry(meta={"headers": {"openai-model": 4}}), "entries[1]", None),
    "a negative stream gap": (with_entry(meta={"gaps": [0.1, -1]}), "entries[1]", None),
    "a stream gap of a day": (with_entry(meta={"gaps": [86_400]}), "entries[1]", None),
    "an unknown meta key": (with_entry(meta={"status": 500}), "Unknown field", None),
    "a later answer's cookie": (
        with_entry(later_answers=[{"response": {"content": "2"}, "meta": {"headers": {"set-cookie": "x"}}}]),
        "later_answers[0].meta",
        None,
    ),
    "a lone surrogate escape": (
        with_entry(response={"content": "a \ud800 b"}),
        "lone UTF-16 surrogate",
        None,
    ),
    "a lone low surrogate in a key": (
        with_entry(request={**request_for("one"), "\udc00": 1}),
        "lone UTF-16 surrogate",
        None,
    ),
    "bytes that are not UTF-8": (
        json.dumps(VALID).replace('"1"', '"\xff"').encode("latin-1"),
        "not valid",
        None,
    ),
    "duplicate fingerprints": (
        {**VALID, "entries": [VALID["entries"][0], VALID["entries"][0]]},
        "same fingerprint",
        "entries[1].fingerprint",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bundles_are_refused_and_change_nothing(ctx, source, case):
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    import_(ctx, "copy", export(ctx, source))
    projects.update(ctx, "copy", {"mode": "replay", "upstream_max_calls": 3})
    ctx.settings.__dict__["max_body_bytes"] = 65_536  # so "huge" needs no huge test data
    before = snapshot(ctx, "copy")
    data, message, param = MALFORMED[case]
    text = data if isinstance(data, str | bytes) else json.dumps(data)
    with pytest.raises(BadRequest) as refused:
        import_(ctx, "copy", text)
    assert message in refused.value.message, refused.value.message
    if param is not None:
        assert refused.value.param == param
    assert refused.value.code in ("invalid_bundle", "bundle_version_unsupported")
    assert snapshot(ctx, "copy") == before


class PhaseTwoFailure(Exception):
    pass


@pytest.mark.parametrize(
    "failure, refusal",
    [(PhaseTwoFailure("disk full"), PhaseTwoFailure), (UniqueViolation("recorded meanwhile"), Conflict)],
)
def test_a_failure_while_writing_changes_nothing(ctx, source, failure, refusal):
    """Phase 2 fails after its writes (settings and entries): the transaction takes all of it back."""
    projects.create(ctx, {"name": "copy", "mode": "replay", "upstream_max_calls": 3})
    save_entry(ctx, "copy", "plain question", {"content": "the copy's own answer"})
    before = snapshot(ctx, "copy")
    stages = []

    def progress(stage, done, total):
        stages.append(stage)
        if stage == "write":
            raise failure

    with pytest.raises(refusal) as refused:
        bundles.import_bundle(ctx, "copy", io.BytesIO(export(ctx, source)), progress=progress)
    assert "write" in stages
    if refusal is Conflict:
        assert refused.value.code == "import_conflict" and "nothing was imported" in refused.value.message
    assert snapshot(ctx, "copy") == before


def test_newer_version_is_refused_with_its_own_code(ctx):
    projects.create(ctx, {"name": "copy"})
    with pytest.raises(BadRequest) as refused:
        import_(ctx, "copy", json.dumps({"bundle": {"format": "semula-bundle", "version": 3}, "entries": []}))
    assert refused.value.code == "bundle_version_unsupported"
    assert "Upgrade semula" in refused.value.message


def test_rest_export_and_import(ctx, source, client, make_token):
    admin, viewer = make_token("admin"), make_token("viewer")
    exported = client.get("/api/v1/projects/source/export", headers=viewer)
    assert exported.status_code == 200 and exported.mimetype == "application/json"
    assert "source.semula.json" in exported.headers["Content-Disposition"]
    assert exported.data == export(ctx, source)
    projects.create(ctx, {"name": "copy"})
    denied = client.post("/api/v1/projects/copy/import", data=exported.data, headers=viewer)
    assert denied.status_code == 403
    imported = client.post("/api/v1/projects/copy/import", data=exported.data, headers=admin)
    assert imported.status_code == 200, imported.json
    assert imported.json["object"] == "import_report" and imported.json["created"] == 4
    broken = client.post("/api/v1/projects/copy/import", data=exported.data[:-100], headers=admin)
    assert broken.status_code == 400 and broken.json["error"]["code"] == "invalid_bundle"
    assert set(broken.json["error"]) == {"message", "type", "param", "code"}
    assert client.get("/api/v1/projects/ghost/export", headers=admin).status_code == 404
    bound = make_token("admin", project="copy")
    assert client.get("/api/v1/projects/source/export", headers=bound).status_code == 404


def test_export_redacts_even_what_was_stored_unredacted(ctx):
    projects.create(ctx, {"name": "leaky"})
    key = "ghp_" + "a1B2" * 10
    save_entry(ctx, "leaky", "hello", {"content": f"your token is {key}"})
    data = export(ctx, "leaky")
    assert key.encode() not in data and b"[REDACTED]" in data
    assert bundle_format.find_secrets(io.BytesIO(data)) == ([], 0)


def test_imported_recordings_replay_the_provider_headers_a_provider_could_have_sent_and_no_other(
    ctx, client, make_token
):
    """meta from a bundle becomes HTTP response headers on replay: the import takes only recorded
    provider headers with printable values, and replay filters rows that were stored without the check."""
    admin = make_token("admin")
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    meta = {"headers": {"openai-processing-ms": "321", "x-ratelimit-remaining-requests": "99"}, "gaps": [0.0]}
    bundle = {**VALID, "entries": [{**VALID["entries"][0], "meta": meta}]}
    assert import_(ctx, "copy", json.dumps(bundle))["created"] == 1
    replayed = client.post("/p/copy/v1/chat/completions", json=request_for("one"), headers=admin)
    assert replayed.status_code == 200, replayed.json
    assert replayed.headers["openai-processing-ms"] == "321"
    assert replayed.headers["x-ratelimit-remaining-requests"] == "99"
    assert json.loads(export(ctx, "copy"))["entries"][0]["meta"] == meta

    # A row written before imports were checked (or by hand): its cookie and its split header stay out.
    projects.create(ctx, {"name": "old", "mode": "replay"})
    row = projects.get_row(ctx, "old")
    request = request_for("two")
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        entries.save(
            tx,
            ctx,
            project_id=row["id"],
            fingerprint=fp.fingerprint(request, [], []),
            request=request,
            response=answers.parse_answer({"content": "2"}, request),
            chunks=None,
            summary="stored before imports were checked",
            meta={
                "headers": {
                    "Set-Cookie": "session=canary-cookie",
                    "openai-model": "gpt\r\nX-Injected: canary-injected",
                    "openai-version": "2020-10-01",
                }
            },
            actor="agent",
        )
    replayed = client.post("/p/old/v1/chat/completions", json=request, headers=admin)
    assert replayed.status_code == 200, replayed.json
    assert replayed.headers["openai-version"] == "2020-10-01"
    assert "canary" not in str(replayed.headers) and "Set-Cookie" not in replayed.headers
    assert "openai-model" not in replayed.headers


def test_escaped_surrogate_pairs_import_as_the_characters_they_spell(ctx):
    projects.create(ctx, {"name": "copy"})
    entry = {"request": request_for("smile \U0001f600"), "response": {"content": "\U0001f600 \\ud800"}}
    text = json.dumps({**VALID, "entries": [entry]})  # ASCII: the emoji as \ud83d\ude00
    assert "\\ud83d\\ude00" in text
    assert import_(ctx, "copy", text)["created"] == 1
    [item] = json.loads(export(ctx, "copy"))["entries"]
    assert item["request"] == request_for("smile \U0001f600")
    assert item["response"]["choices"][0]["message"]["content"] == "\U0001f600 \\ud800"
