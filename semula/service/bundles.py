"""Export and import bundles: a project's entries and settings, in the format of
semula/core/bundle_format.py, all of an import or nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pickle
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from semula import dialects
from semula.core import recorded_meta, redact
from semula.core.bundle_format import (
    ANSWER,
    FINGERPRINT_PATTERN,
    FORMAT,
    MAX_ANSWERS,
    VERSION,
    CountingReader,
    InvalidBundle,
    Progress,
    check_header,
    encode,
    first_error,
    nested,
    read_bundle,
    redacted,
)
from semula.core.errors import BadRequest, Conflict, SemulaError
from semula.core.ids import new_id
from semula.db import UniqueViolation
from semula.service import Context, audit, dumps, now, quotas
from semula.service import entries as entries_service
from semula.service import projects as projects_service
from semula.service.auth import require
from semula.service.calllog import Offload

# Fault rules are a test's setting, not the recordings': not exported (decision 0061).
CONFIG_FIELDS = tuple(
    k for k in projects_service.DEFAULTS if k not in projects_service.OPERATOR_FIELDS and k != "faults"
)
BATCH = 500


# --- export -----------------------------------------------------------------------------------------


def _config(row: dict[str, Any]) -> dict[str, Any]:
    view = projects_service.present(row)
    return {key: view[key] for key in CONFIG_FIELDS}


def export_bundle(ctx: Context, project: str) -> Iterator[bytes]:
    """The project's bundle, a piece at a time (entries are streamed from the database).

    Byte for byte what json.dumps(bundle, sort_keys=True, indent=2, ensure_ascii=False) gives, plus
    a final newline. Every string is redacted again on the way out (defence in depth).
    """
    require(ctx, role="viewer")
    row = projects_service.get_row(ctx, project)
    secrets = ctx.settings.secrets()
    # Check the caller before the first byte: a generator's errors come too late for a status code.
    return _export_pieces(ctx, row, secrets)


def _export_pieces(ctx: Context, row: dict[str, Any], secrets: tuple[str, ...]) -> Iterator[bytes]:
    header = {"format": FORMAT, "version": VERSION}
    yield encode(f'{{\n  "bundle": {nested(header, 2)},\n  "config": {nested(_config(row), 2)},\n')
    first = True
    for entry in ctx.store.iterate("export_entries", project_id=row["id"]):
        response, chunks = entries_service.decode(entry)
        dialect = dialects.get(entry.get("api"))
        item = {
            "chunks": redacted(chunks, secrets) if chunks is not None else None,
            "fingerprint": entry["fingerprint"],
            "pinned": bool(entry["pinned"]),
            "request": redacted(json.loads(entry["request"]), secrets),
            "response": dialect.redact_response(response, lambda value: redacted(value, secrets)),
            "review_status": entry["review_status"],
        }
        if entry.get("api") not in (None, dialects.CHAT):  # Chat Completions entries stay as they were
            item["api"] = entry["api"]
        if entry.get("meta"):  # headers and stream timing recorded from a provider
            item["meta"] = redacted(json.loads(entry["meta"]), secrets)
        if entry["answers"] > 1:  # a sequence; an entry of one answer stays as it was
            item["later_answers"] = [
                _later_answer(answer, secrets)
                for answer in ctx.store.all(
                    "list_entry_answers", entry_id=entry["id"], workspace_id=ctx.principal.workspace_id
                )
            ]
        yield encode(('  "entries": [\n    ' if first else ",\n    ") + nested(item, 4))
        first = False
    yield encode('  "entries": []\n}\n' if first else "\n  ]\n}\n")


# --- reading a bundle -------------------------------------------------------------------------------


# --- validation -------------------------------------------------------------------------------------


class Registered(validate.Validator):
    """An API registered when the value is checked (semula.dialects.register), not when this module
    was imported: a bundle of an API registered later is read as one of the built-in ones."""

    @property
    def choices(self) -> list[str]:  # the `enum` apispec gives the field (the OpenAPI document)
        return dialects.names()

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, str) or not dialects.known(value):
            raise ValidationError(f"Must be one of: {', '.join(dialects.names())}.")
        return value


class EntrySchema(Schema):
    class Meta:
        unknown = RAISE

    api = fields.String(load_default=dialects.CHAT, validate=Registered())
    fingerprint = fields.String(load_default=None, validate=validate.Regexp(FINGERPRINT_PATTERN))
    request = fields.Dict(required=True)
    response = fields.Raw(required=True, allow_none=False)
    chunks = fields.List(fields.Dict(), load_default=None, allow_none=True)
    meta = fields.Nested(recorded_meta.MetaSchema, load_default=None, allow_none=True)
    pinned = fields.Boolean(load_default=False, truthy={True}, falsy={False})
    review_status = fields.String(
        load_default="unreviewed", validate=validate.OneOf(entries_service.REVIEW_STATUSES)
    )
    later_answers = fields.List(fields.Dict(), load_default=list, validate=validate.Length(max=MAX_ANSWERS))


_ENTRY = EntrySchema()
_ENTRY_KEYS = frozenset(_ENTRY.fields)
_REVIEW_STATUSES = frozenset(entries_service.REVIEW_STATUSES)
_FINGERPRINT = re.compile(FINGERPRINT_PATTERN)


def _load_entry(value: dict[str, Any]) -> dict[str, Any]:
    """_ENTRY.load(value), without the schema's work per field for an entry as `semula export` writes
    it (a sixth of a large import's time); any other entry, one with an error among them, is loaded
    by the schema, so its errors are the schema's."""
    get = value.get
    api, fingerprint, request = get("api", dialects.CHAT), get("fingerprint"), get("request")
    response, chunks, later = get("response"), get("chunks"), get("later_answers", [])
    pinned, review = get("pinned", False), get("review_status", "unreviewed")
    if (
        value.keys() <= _ENTRY_KEYS
        and type(request) is dict
        and response is not None
        and (chunks is None or (type(chunks) is list and all(type(chunk) is dict for chunk in chunks)))
        and get("meta") is None
        and type(later) is list
        and not later
        and type(pinned) is bool
        and type(review) is str
        and review in _REVIEW_STATUSES
        and type(api) is str
        and dialects.known(api)
        and (fingerprint is None or (type(fingerprint) is str and _FINGERPRINT.match(fingerprint)))
    ):
        return {
            "api": api,
            "fingerprint": fingerprint,
            "request": dict(request),
            "response": response,
            "chunks": None if chunks is None else [dict(chunk) for chunk in chunks],
            "meta": None,
            "pinned": pinned,
            "review_status": review,
            "later_answers": [],
        }
    return _ENTRY.load(value)


def _check_config(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidBundle("config must be an object of project settings.", param="config")
    for key in value:
        if key in projects_service.OPERATOR_FIELDS:
            raise InvalidBundle(
                f"config.{key}: operator fields are never imported; remove it from the bundle.",
                param=f"config.{key}",
            )
        if key not in CONFIG_FIELDS:
            raise InvalidBundle(f"config.{key}: unknown setting.", param=f"config.{key}")
    try:
        return projects_service.SettingsSchema(only=CONFIG_FIELDS).load(value)
    except ValidationError as exc:
        path, text = first_error(exc)
        raise InvalidBundle(f"config.{path}: {text}", param=f"config.{path}") from None
    except BadRequest as exc:
        raise InvalidBundle(f"config: {exc.message}", param=f"config.{exc.param or ''}".rstrip(".")) from None


class _Prepared:
    """One validated entry as it will be written; pickled to a temporary file between the two phases."""

    __slots__ = (
        "index",
        "api",
        "fingerprint",
        "model",
        "request",
        "response",
        "response_id",
        "chunks",
        "meta",
        "pinned",
        "review_status",
        "later",
    )

    def __init__(self, **values: Any):
        for key, value in values.items():
            setattr(self, key, value)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for key, value in zip(self.__slots__, state, strict=True):
            setattr(self, key, value)


def _prepare(
    index: int,
    value: Any,
    rules: tuple[list[str], list[dict[str, str]]],
    limit: int,
    secrets: tuple[str, ...],
) -> tuple[_Prepared, bool]:
    """Validate one entry; return it ready to write and whether its fingerprint was recomputed."""
    where = f"entries[{index}]"
    given = value.get("fingerprint") if isinstance(value, dict) else None
    label = f"{where} ({given[:15]}…)" if isinstance(given, str) and given else where

    def fail(path: str, text: str) -> InvalidBundle:
        return InvalidBundle(
            f"{label}: {path}: {text}" if path else f"{label}: {text}", param=f"{where}.{path}"
        )

    if not isinstance(value, dict):
        raise InvalidBundle(f"{where}: an entry must be an object.", param=where)
    try:
        data = _load_entry(value)
    except ValidationError as exc:
        raise fail(*first_error(exc)) from None
    request = data["request"]
    dialect = dialects.get(data["api"])
    try:
        dialect.check(request)
        computed = dialect.fingerprint(request, *rules)
    except BadRequest as exc:
        raise fail(f"request.{exc.param}" if exc.param else "request", exc.message) from None
    try:
        response, chunks = dialect.accept_recorded(
            data["response"], data["chunks"], request, dialect.conversation(request)
        )
    except SemulaError as exc:
        raise fail(f"response.{exc.param}" if exc.param else "response", exc.message) from None
    response, chunks = entries_service.stored_answer(secrets, dialect.name, response, chunks)
    stored_request = redacted(request, secrets)
    request_json, response_json = dumps(stored_request), dumps(response)
    chunks_json = dumps(chunks) if chunks is not None else None
    for name, text in (("request", request_json), ("response", response_json), ("chunks", chunks_json)):
        if text is not None and len(text) > limit:
            raise fail(name, f"longer than {limit} characters (SEMULA_MAX_BODY_BYTES).")
    later = [
        _prepare_answer(i, a, request, dialect, limit, fail, secrets)
        for i, a in enumerate(data["later_answers"])
    ]
    # The fingerprint is taken before redaction, so a recorded request that held a secret is stored
    # redacted and cannot reproduce it: keep the bundle's then. Otherwise the request as written wins,
    # so a hand-edited request replays for what it now says.
    fingerprint, recomputed = computed, False
    if given and given != computed:
        if redact.REDACTED in request_json:
            fingerprint = given
        else:
            recomputed = True
    prepared = _Prepared(
        index=index,
        api=dialect.name,
        response_id=dialect.response_id(response),
        meta=dumps(redacted(data["meta"], secrets)) if data["meta"] else None,
        fingerprint=fingerprint,
        model=request.get("model"),
        request=request_json,
        response=response_json,
        chunks=chunks_json,
        pinned=int(data["pinned"]),
        review_status=data["review_status"],
        later=later,
    )
    return prepared, recomputed


def _later_answer(answer: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """One of answers 2..n as a bundle holds it (its provider headers and stream gaps when it has some)."""
    item = {
        "chunks": redacted(json.loads(answer["chunks"]), secrets) if answer["chunks"] else None,
        "pinned": bool(answer["pinned"]),
        "response": redacted(json.loads(answer["response"]), secrets),
    }
    if answer.get("meta"):
        item["meta"] = redacted(json.loads(answer["meta"]), secrets)
    return item


def _prepare_answer(
    index: int,
    value: dict[str, Any],
    request: dict[str, Any],
    dialect: dialects.Dialect,
    limit: int,
    fail: Callable[[str, str], InvalidBundle],
    secrets: tuple[str, ...],
) -> tuple[str, str | None, int, str | None]:
    """One of answers 2..n of an entry's sequence, checked as answer 1 is: (response, chunks, pinned,
    meta)."""
    where = f"later_answers[{index}]"
    try:
        data = ANSWER.load(value)
    except ValidationError as exc:
        path, text = first_error(exc)
        raise fail(f"{where}.{path}", text) from None
    try:
        response, chunks = dialect.accept_recorded(
            data["response"], data["chunks"], request, dialect.conversation(request)
        )
    except SemulaError as exc:
        raise fail(
            f"{where}.response.{exc.param}" if exc.param else f"{where}.response", exc.message
        ) from None
    response, chunks = entries_service.stored_answer(secrets, dialect.name, response, chunks)
    response_json, chunks_json = dumps(response), dumps(chunks) if chunks is not None else None
    if len(response_json) + len(chunks_json or "") > limit:
        raise fail(where, f"longer than {limit} characters (SEMULA_MAX_BODY_BYTES).")
    meta = dumps(redacted(data["meta"], secrets)) if data["meta"] else None
    return response_json, chunks_json, int(data["pinned"]), meta


# --- import -----------------------------------------------------------------------------------------


# An entry holds a request, a response and chunks, each at most SEMULA_MAX_BODY_BYTES long.
ENTRY_FACTOR = 3


def import_bundle(
    ctx: Context,
    project: str,
    source: IO[bytes],
    *,
    progress: Progress | None = None,
    offload: Offload | None = None,
    overrides: dict[str, Any] | None = None,
    apart: bool = False,
) -> dict[str, Any]:
    """Import a bundle into a project: all of it or, on any error, nothing.

    Two phases: the bundle is read and every entry validated while streaming, into a temporary
    file (no database writes, so a bad bundle cannot leave anything behind); then one transaction
    applies the settings, resets operator fields and writes the entries in batches. Entries are
    matched by fingerprint: new ones are created, changed ones get a new revision (actor import),
    ones whose answers are the same but whose pin, review or meta differs take the bundle's (updated,
    no new revision: a revision records an answer), identical ones are left alone, and
    pinned ones in this project are skipped; so is a pinned answer of a sequence, which keeps its
    place (the answers up to the last pinned one stay, whatever the bundle's count).

    `offload` runs the first phase elsewhere (the server: in a native thread, so the worker's
    event loop keeps serving while a large bundle is parsed and checked); the source is copied to
    a temporary file first, on the caller's side, since a request's socket is the caller's to read.

    `overrides` are settings written over the bundle's in the same transaction (operator fields
    among them, in place of their defaults). `apart` commits the settings, each batch of entries
    and the end on their own: other writers wait for a batch, not for the import; only for a
    database that is thrown away when an import fails (`semula replay`'s), since one that fails
    while writing leaves the batches before it.
    """
    require(ctx, role="admin")
    row = projects_service.get_row(ctx, project)
    current = projects_service.present(row)
    with (
        tempfile.TemporaryFile(prefix="semula-import-") as spool,
        tempfile.TemporaryFile(prefix="semula-upload-") as upload,
    ):
        if offload is None:
            config, count, recomputed = _validate(ctx, current, source, spool, progress, pause=True)
        else:
            shutil.copyfileobj(source, upload, 1 << 16)
            upload.seek(0)
            config, count, recomputed = offload(
                lambda: _validate(ctx, current, upload, spool, progress, pause=False)
            )
        spool.seek(0)
        try:
            report = _write(ctx, row, current, config, spool, count, progress, overrides, apart)
        except UniqueViolation:
            raise Conflict(
                "An entry was recorded in this project while the bundle was being imported; nothing "
                "was imported. Import it again.",
                code="import_conflict",
            ) from None
    report["fingerprints_recomputed"] = recomputed
    return report


def _validate(
    ctx: Context,
    current: dict[str, Any],
    source: IO[bytes],
    spool: IO[bytes],
    progress: Progress | None,
    *,
    pause: bool,
) -> tuple[dict[str, Any], int, int]:
    """Phase one, no database: read and check every entry into `spool`; (config, entries, recomputed)."""
    limit = ctx.settings.max_body_bytes
    secrets = ctx.settings.secrets()
    raw_config: Any = None
    config: dict[str, Any] | None = None
    seen: set[bytes] = set()
    recomputed = count = 0
    reader = CountingReader(source, progress, ENTRY_FACTOR * limit)
    for kind, value in read_bundle(reader, reader.start_entry):
        if kind == "bundle":
            check_header(value)
            continue
        if kind == "config":
            raw_config = value
            continue
        if config is None:
            # Read after the header, so a newer bundle is refused for its version, not a new setting.
            config = _check_config(raw_config) if raw_config is not None else {}
            settings = {**current, **config}
            rules = (settings["ignore_fields"], settings["normalize"])
        item, changed = _prepare(count, value, rules, limit, secrets)
        # 16 bytes per entry is all the import keeps in memory about the entries it has read.
        key = hashlib.blake2b(item.fingerprint.encode(), digest_size=16).digest()
        if key in seen:
            raise InvalidBundle(
                f"entries[{count}] ({item.fingerprint[:15]}…): fingerprint: another entry of the "
                "bundle has the same fingerprint (the same request under this project's rules).",
                param=f"entries[{count}].fingerprint",
            )
        seen.add(key)
        pickle.dump(item, spool, protocol=pickle.HIGHEST_PROTOCOL)
        recomputed += changed
        count += 1
        if pause and count % BATCH == 0:
            time.sleep(0)  # Under gevent: let the worker's other requests run between batches.
    if config is None:
        config = _check_config(raw_config) if raw_config is not None else {}
    return config, count, recomputed


# --- entries ahead of their import (semula replay) -------------------------------------------------


def read_config(ctx: Context, source: IO[bytes]) -> dict[str, Any]:
    """A bundle's settings as its import checks them, read no further than its first entry (an error
    of the header or the config is the import's)."""
    reader = CountingReader(source, None, ENTRY_FACTOR * ctx.settings.max_body_bytes)
    raw: Any = None
    events = read_bundle(reader, reader.start_entry)
    try:
        for kind, value in events:
            if kind == "bundle":
                check_header(value)
            elif kind == "config":
                raw = value
            else:
                break
    finally:
        events.close()
    return _check_config(raw) if raw is not None else {}


def apply_config(
    ctx: Context, project: str, config: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write the settings an import of `config` with these `overrides` gives the project, before its
    entries (import_bundle writes the same again); the project's settings after."""
    require(ctx, role="admin")
    row = projects_service.get_row(ctx, project)
    values = settings_after(projects_service.present(row), config, overrides)
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        _update_project(tx, ctx, row, values, now())
    return values


def prepare_entry(ctx: Context, settings: dict[str, Any], value: Any) -> _Prepared:
    """One entry checked and made what an import under the project's `settings` writes of it (its
    fingerprint, pin and texts); InvalidBundle when the import would refuse it."""
    rules = (settings["ignore_fields"], settings["normalize"])
    item, _ = _prepare(0, value, rules, ctx.settings.max_body_bytes, ctx.settings.secrets())
    return item


def write_entries(ctx: Context, project: str, items: list[_Prepared]) -> dict[str, Any]:
    """Write prepared entries into the project as a batch of an import does, in a transaction of their
    own; its counts (created, updated, unchanged, skipped)."""
    require(ctx, role="admin")
    row = projects_service.get_row(ctx, project)
    report: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        _write_batch(tx, ctx, row, items, now(), report)
    return report


def _read_prepared(spool: IO[bytes], count: int) -> Iterator[list[_Prepared]]:
    batch: list[_Prepared] = []
    for _ in range(count):
        batch.append(pickle.load(spool))  # noqa: S301 - our own temporary file, written just above
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _write(
    ctx: Context,
    row: dict[str, Any],
    current: dict[str, Any],
    config: dict[str, Any],
    spool: IO[bytes],
    count: int,
    progress: Progress | None,
    overrides: dict[str, Any] | None = None,
    apart: bool = False,
) -> dict[str, Any]:
    workspace = ctx.principal.workspace_id
    values = settings_after(current, config, overrides)
    changed = sorted(k for k in values if values[k] != current[k])
    report: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    # What the import changed of the project's settings, the operator fields it reset included (a
    # project in replay mode records again): said, not only audited.
    report["settings_changed"] = {key: values[key] for key in changed}
    stamp = now()

    with contextlib.nullcontext() if apart else ctx.store.transaction(workspace) as whole:

        @contextlib.contextmanager
        def step() -> Iterator[Any]:
            """The import's one transaction; with `apart`, one of its own for each step."""
            if whole is not None:
                yield whole
                return
            with ctx.store.transaction(workspace) as tx:
                yield tx

        with step() as tx:
            _update_project(tx, ctx, row, values, stamp)
        for batch in _read_prepared(spool, count):
            with step() as tx:
                _write_batch(tx, ctx, row, batch, stamp, report)
            if progress:
                progress("write", len(batch), count)
        with step() as tx:
            # Counted inside the transaction, after the writes: a breach undoes the whole import.
            quotas.check(ctx, "quota_entries", adding=0, tx=tx)
            audit.record(tx, ctx, "project.import", row["name"], changed)
    return {"object": "import_report", "project": row["name"], "entries": count, **report}


def settings_after(
    current: dict[str, Any], config: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A project's settings after an import of `config`: the bundle's over the project's, operator
    fields reset to their defaults, then `overrides` (the caller's, operator fields among them)."""
    values = {k: current[k] for k in projects_service.DEFAULTS} | config
    values |= {k: projects_service.DEFAULTS[k] for k in projects_service.OPERATOR_FIELDS}
    return values | (overrides or {})


def _update_project(tx: Any, ctx: Context, row: dict[str, Any], values: dict[str, Any], stamp: float) -> None:
    tx.run(
        "update_project",
        id=row["id"],
        workspace_id=ctx.principal.workspace_id,
        now=stamp,
        **projects_service._columns(values),
    )


def _write_batch(
    tx: Any, ctx: Context, row: dict[str, Any], batch: list[_Prepared], stamp: float, report: dict[str, Any]
) -> None:
    """Write one batch of prepared entries in `tx`, counting them in `report` (see import_bundle)."""
    workspace = ctx.principal.workspace_id
    found = tx.all(
        "entries_by_fingerprints",
        project_id=row["id"],
        fingerprints=dumps([item.fingerprint for item in batch]),
    )
    existing = {r["fingerprint"]: r for r in found}
    # Answers 2..n stored for them, read for the batch at once (a pinned entry is skipped whole).
    stored_answers: dict[str, list[dict[str, Any]]] = {}
    sequenced = [r["id"] for r in found if r["answers"] > 1 and not r["pinned"]]
    for answer in (
        tx.all("answers_of_entries", entry_ids=dumps(sequenced), workspace_id=workspace) if sequenced else ()
    ):
        stored_answers.setdefault(answer["entry_id"], []).append(answer)
    inserts, updates, revisions = [], [], []
    # Answers 2..n of new entries and their revisions (number 1), written with the batch.
    new_answers: list[dict[str, Any]] = []
    new_answer_revisions: list[dict[str, Any]] = []
    # Entries whose answers are the ones stored, and answers 2..n of them, whose pin, review
    # or meta differs.
    marked, answer_marks = [], []
    # Entries written whose answers 2..n change: with the answer count and the pinned ones.
    sequences: list[tuple[str, _Prepared, int, set[int]]] = []
    for item in batch:
        old = existing.get(item.fingerprint)
        # Answers 2..n stored for it, and those pinned: an import leaves a pinned answer alone,
        # in its place (the answers up to the last pinned one stay).
        stored = stored_answers.get(old["id"], []) if old is not None else []
        kept = {answer["seq"] for answer in stored if answer["pinned"]}
        values_ = {
            "answers": max([1 + len(item.later), *kept]),
            "api": item.api,
            "response_id": item.response_id,
            "meta": item.meta,
            "model": item.model,
            "request": item.request,
            "response": item.response,
            "chunks": item.chunks,
            "pinned": item.pinned,
            "review_status": item.review_status,
            "workspace_id": workspace,
            "now": stamp,
        }
        if old is None:
            entry_id, number = new_id("entry"), 1
            inserts.append(
                {
                    "id": entry_id,
                    "project_id": row["id"],
                    "fingerprint": item.fingerprint,
                    **values_,
                }
            )
            report["created"] += 1
        elif old["pinned"]:
            report["skipped"] += 1
            continue
        elif (marks := _marks_changed(old, item, stored, values_["answers"])) is not None:
            # The answers are the ones stored: no new revision, but the bundle's pin, review
            # and meta are kept (the entry row's too when only a later answer's differ: its
            # updated_at moves).
            if marks:
                marked.append(
                    {
                        "id": old["id"],
                        "workspace_id": workspace,
                        "meta": item.meta,
                        "pinned": item.pinned,
                        "review_status": item.review_status,
                        "now": stamp,
                    }
                )
                answer_marks += [
                    {
                        "entry_id": old["id"],
                        "workspace_id": workspace,
                        "seq": seq,
                        "pinned": pinned,
                        "meta": meta,
                        "now": stamp,
                    }
                    for seq, pinned, meta in marks
                    if seq > 1
                ]
            report["updated" if marks else "unchanged"] += 1
            continue
        else:
            entry_id, number = old["id"], old["revision"] + 1
            updates.append({"id": entry_id, "revision": number, **values_})
            report["updated"] += 1
        revisions.append(
            {
                "id": new_id("revision"),
                "workspace_id": workspace,
                "entry_id": entry_id,
                "number": number,
                "response": item.response,
                "chunks": item.chunks,
                "actor": "import",
                "summary": "imported from a bundle",
                "now": stamp,
            }
        )
        if old is None:
            for seq, (response, chunks, pinned, meta) in enumerate(item.later, start=2):
                answer = {"workspace_id": workspace, "entry_id": entry_id, "seq": seq, "number": 1}
                answer |= {"response": response, "chunks": chunks, "now": stamp}
                new_answers.append(answer | {"pinned": pinned, "meta": meta})
                new_answer_revisions.append(answer | _IMPORTED | {"id": new_id("revision")})
        elif item.later or old["answers"] > 1:
            sequences.append((entry_id, item, values_["answers"], kept))
    tx.many("import_insert_entry", inserts)
    tx.many("import_update_entry", updates)
    tx.many("insert_revision", revisions)
    tx.many("import_entry_marks", marked)
    tx.many("import_answer_marks", answer_marks)
    tx.many("import_new_answer", new_answers)
    tx.many("insert_answer_revision", new_answer_revisions)
    for entry_id, item, answers, kept in sequences:
        _write_answers(tx, workspace, entry_id, item, stamp, answers, kept)


_IMPORTED = {"actor": "import", "summary": "imported from a bundle"}


def _write_answers(
    tx: Any, workspace: str, entry_id: str, item: _Prepared, stamp: float, answers: int, kept: set[int]
) -> None:
    """Answers 2..n of an imported entry as the bundle has them, but for the pinned ones (`kept`),
    left as they are; answers past `answers` (the bundle's, or up to the last pinned one) go."""
    tx.run("drop_answers_after", entry_id=entry_id, workspace_id=workspace, answers=answers)
    tx.run("drop_revisions_after", entry_id=entry_id, workspace_id=workspace, answers=answers)
    for seq, (response, chunks, pinned, meta) in enumerate(item.later, start=2):
        if seq in kept:
            continue
        row = tx.one(
            "import_answer",
            workspace_id=workspace,
            entry_id=entry_id,
            seq=seq,
            response=response,
            chunks=chunks,
            pinned=pinned,
            meta=meta,
            now=stamp,
        )
        tx.run(
            "insert_answer_revision",
            id=new_id("revision"),
            workspace_id=workspace,
            entry_id=entry_id,
            seq=seq,
            number=row["revision"],
            response=response,
            chunks=chunks,
            actor="import",
            summary="imported from a bundle",
            now=stamp,
        )


def _same_json(mine: str | None, theirs: str | None) -> bool:
    # Text first (bundles imported before compare equal); else as JSON, which ignores key order.
    return mine == theirs or (
        mine is not None and theirs is not None and json.loads(mine) == json.loads(theirs)
    )


def _same_meta(mine: str | None, theirs: str | None) -> bool:
    # No meta and an empty one are the same: neither replays a header or a pause.
    return mine == theirs or entries_service.parsed_meta(mine) == entries_service.parsed_meta(theirs)


def _marks_changed(
    old: dict[str, Any], item: _Prepared, stored: list[dict[str, Any]], answers: int
) -> list[tuple[int, int, str | None]] | None:
    """None when the bundle's entry differs from the stored one in what an import revision records
    (its answers, `answers` of them after the import, the pinned ones not compared: an import leaves
    them alone); otherwise the answers whose marks differ (pin, review, and meta: recorded provider
    headers and stream timing), as (seq, the bundle's pin, the bundle's meta), answer 1 for a review
    too: empty when the entry is unchanged."""
    if not all(_same_json(getattr(item, name), old[name]) for name in ("request", "response", "chunks")):
        return None
    if old["answers"] != answers:
        return None
    first_same = (
        old["review_status"] == item.review_status
        and bool(old["pinned"]) == bool(item.pinned)
        and _same_meta(item.meta, old["meta"])
    )
    marks = [] if first_same else [(1, item.pinned, item.meta)]
    for seq, (mine, theirs) in enumerate(zip(item.later, stored, strict=False), start=2):
        if theirs["pinned"]:
            continue
        if not (_same_json(mine[0], theirs["response"]) and _same_json(mine[1], theirs["chunks"])):
            return None
        if mine[2] != theirs["pinned"] or not _same_meta(mine[3], theirs["meta"]):
            marks.append((seq, mine[2], mine[3]))
    return marks


# --- checking a bundle for credentials --------------------------------------------------------------


def find_stored_secrets(ctx: Context, project: str, limit: int = 20) -> tuple[list[str], int]:
    """What find_secrets() would report for the project's bundle if export did not redact it.

    Export redacts every value, so checking its output only ever finds keys; this checks the
    entries as stored, with the paths of their exported form. Paths only, never the values.
    """
    require(ctx, role="viewer")
    row = projects_service.get_row(ctx, project)
    secrets = ctx.settings.secrets()
    found: list[str] = []
    total = 0

    def add(paths: Iterator[str]) -> None:
        nonlocal total
        for path in paths:
            total += 1
            if len(found) < limit:
                found.append(path)

    add(redact.secret_paths(_config(row), secrets, "config"))
    for index, entry in enumerate(ctx.store.iterate("export_entries", project_id=row["id"])):
        response, chunks = entries_service.decode(entry)
        item = {"chunks": chunks, "request": json.loads(entry["request"]), "response": response}
        if entry.get("meta"):
            item["meta"] = json.loads(entry["meta"])
        if entry["answers"] > 1:
            answers = ctx.store.all(
                "list_entry_answers", entry_id=entry["id"], workspace_id=ctx.principal.workspace_id
            )
            item["later_answers"] = [_stored_answer_item(answer) for answer in answers]
        add(redact.secret_paths(item, secrets, f"entries[{index}]"))
    return found, total


def _stored_answer_item(answer: dict[str, Any]) -> dict[str, Any]:
    """One of answers 2..n as stored (not redacted), in its bundle form."""
    response, chunks = entries_service.decode(answer)
    return {"chunks": chunks, "meta": entries_service.parsed_meta(answer.get("meta")), "response": response}
