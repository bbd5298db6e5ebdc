"""Projects and their settings; operator fields are admin-only and audited.

The settings are docs/design/product.md §3, §6 and §9.
"""

from __future__ import annotations

import json
from typing import Any

from marshmallow import INCLUDE, RAISE, Schema, ValidationError, fields, post_load, validate, validates

from semula import dialects
from semula.config import MAX_RECORD_TIMEOUT
from semula.core import faults, fingerprint, presets
from semula.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from semula.core.ids import new_id
from semula.db import UniqueViolation
from semula.service import Context, audit, dumps, fingerprints, load, now, page, quotas
from semula.service.auth import check_project, require, require_unbound

OPERATOR_FIELDS = (
    "mode",
    "record_through",
    "upstream_model",
    "upstream_max_calls",
    "upstream_max_tokens",
    "upstream_dry_run",
    "answerer",
)
BOOL_FIELDS = ("record_through", "upstream_dry_run", "answerer")
JSON_FIELDS = ("ignore_fields", "normalize", "faults")
DEFAULTS: dict[str, Any] = {
    "mode": "record",
    "record_timeout": 300,
    "max_misses": 100,
    "ignore_fields": [],
    "normalize": [],
    "record_through": False,
    "upstream_model": None,
    "upstream_max_calls": 100,
    "upstream_max_tokens": None,
    "upstream_dry_run": False,
    "answerer": False,
    "restamp": "fresh",
    "stream_pacing": "none",
    "embeddings": "off",
    "sequences": "off",
    "after_last": "repeat_last",
    "faults": [],
}
MAX_PACING_FACTOR = 100
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class StrictBoolean(fields.Boolean):
    """JSON true or false only: in Python 0 == False, so truthy/falsy sets alone let 0 and 1 through."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


class SettingsSchema(Schema):
    class Meta:
        unknown = RAISE

    mode = fields.String(validate=validate.OneOf(["record", "replay"]))
    record_timeout = fields.Integer(strict=True, validate=validate.Range(1, MAX_RECORD_TIMEOUT))
    max_misses = fields.Integer(strict=True, validate=validate.Range(1, 1_000_000))
    # Raw fields checked by a validator below; their metadata is their JSON Schema in the OpenAPI document.
    ignore_fields = fields.Raw(
        metadata={
            "type": "array",
            "maxItems": fingerprint.MAX_IGNORE_FIELDS,
            "items": {"type": "string", "pattern": "^(/([^~]|~[01])*)*$"},
            "description": "JSON pointers (RFC 6901) of request fields the fingerprint leaves out.",
        }
    )
    normalize = fields.Raw(
        metadata={
            "type": "array",
            "maxItems": fingerprint.MAX_NORMALIZE_RULES,
            "description": "Rules applied to message text before fingerprinting: a regex and its "
            'replacement, or a named preset of them for a known agent ({"preset": "codex"}).',
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "pattern": {
                                "type": "string",
                                "format": "regex",
                                "minLength": 1,
                                "maxLength": fingerprint.MAX_PATTERN_LENGTH,
                            },
                            "replacement": {"type": "string"},
                        },
                        "required": ["pattern"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {"preset": {"type": "string", "enum": sorted(presets.PRESETS)}},
                        "required": ["preset"],
                        "additionalProperties": False,
                    },
                ]
            },
        }
    )
    record_through = StrictBoolean()
    upstream_model = fields.String(allow_none=True, validate=validate.Length(1, 200))
    upstream_max_calls = fields.Integer(strict=True, validate=validate.Range(0, 100_000_000))
    upstream_max_tokens = fields.Integer(strict=True, allow_none=True, validate=validate.Range(0, 10**12))
    upstream_dry_run = StrictBoolean()
    answerer = StrictBoolean()
    restamp = fields.String(
        validate=validate.OneOf(["fresh", "recorded"]),
        metadata={
            "description": "Whether a replay gets a fresh id and created (fresh) or the recorded ones, "
            "as the call that recorded it through got them (recorded)."
        },
    )
    stream_pacing = fields.Raw(
        metadata={
            "anyOf": [
                {"type": "string", "enum": ["none", "recorded"]},
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_PACING_FACTOR},
            ],
            "description": "Replayed streams: at once (none), with the recorded gaps, or gaps times a "
            "factor.",
        }
    )

    @validates("stream_pacing")
    def _stream_pacing(self, value: Any, **_: Any) -> None:
        if value in ("none", "recorded"):
            return
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value <= MAX_PACING_FACTOR
        ):
            raise ValidationError(
                f'stream_pacing is "none", "recorded", or a factor of the recorded gaps above 0 and at most '
                f"{MAX_PACING_FACTOR}"
            )

    embeddings = fields.String(
        validate=validate.OneOf(["off", "synthetic"]),
        metadata={
            "description": "synthetic: a missed embeddings call in record mode is answered at once with "
            "deterministic vectors and saved as an entry (actor synthetic); off: it is parked like any call."
        },
    )
    sequences = fields.String(
        validate=validate.OneOf(["off", "record"]),
        metadata={
            "description": "record: in a session, the k-th identical call with fewer than k answers records "
            "answer k."
        },
    )
    after_last = fields.String(
        validate=validate.OneOf(["repeat_last", "cycle", "fail"]),
        metadata={"description": "What a session call past the last answer of a sequence gets."},
    )
    faults = fields.Raw(
        metadata={
            "type": "array",
            "maxItems": faults.MAX_RULES,
            "items": {
                "type": "object",
                "required": ["kind"],
                "properties": {"kind": {"enum": list(faults.KINDS)}},
            },
            "description": "Fault rules (docs/testing.md, section 4): {kind, its parameters, times, "
            "probability, seed, match: {api, model, fingerprint, contains}, session, entry}.",
        }
    )

    @validates("ignore_fields")
    def _ignore_fields(self, value: Any, **_: Any) -> None:
        fingerprint.validate_ignore_fields(value, never=dialects.transport_fields())

    @validates("normalize")
    def _normalize(self, value: Any, **_: Any) -> None:
        fingerprint.validate_normalize(value)

    @post_load
    def _checked(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        # Store the rules as checked: {pattern, replacement} each, the replacement "" when left out.
        if "normalize" in data:
            data["normalize"] = fingerprint.validate_normalize(data["normalize"])
        if "faults" in data:
            data["faults"] = faults.check_rules(data["faults"], dialects.names())
        return data


class CreateSchema(Schema):
    class Meta:
        unknown = INCLUDE

    name = fields.String(
        required=True,
        validate=validate.Regexp(
            NAME_PATTERN,
            error=("a project name is a slug: lowercase letters, digits, - and _, at most 63 characters"),
        ),
    )


def present(row: dict[str, Any]) -> dict[str, Any]:
    """The public view of a project row."""
    out: dict[str, Any] = {"object": "project", "id": row["id"], "name": row["name"]}
    for key in DEFAULTS:
        value = row[key]
        if key in BOOL_FIELDS:
            value = bool(value)
        elif key in JSON_FIELDS:
            value = json.loads(value)
        elif key == "stream_pacing" and value not in ("none", "recorded"):
            value = float(value)
        out[key] = value
    out["created"] = int(row["created_at"])
    return out


def _columns(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key in JSON_FIELDS:
        out[key] = dumps(out[key])
    for key in BOOL_FIELDS:
        out[key] = int(bool(out[key]))
    out["stream_pacing"] = str(out["stream_pacing"])
    return out


def _check_switches(ctx: Context, changes: dict[str, Any]) -> None:
    """The rules for turning record-through and the answerer on.

    From docs/design/record-through.md and docs/design/answerer.md.
    """
    settings = ctx.settings
    if changes.get("record_through"):
        if settings.hosted and not settings.upstream_tenants:
            raise Forbidden("Record-through is not available to tenants on this server.")
        if not settings.upstream_configured:
            raise Unprocessable(
                "The server has no upstream key configured (SEMULA_UPSTREAM_KEY)." + _where(ctx),
                code="upstream_not_configured",
                param="record_through",
            )
    # The answerer's command is the daemon's setting, in its own environment file, not the server's:
    # the server cannot know whether a daemon runs, so it does not ask (decision 0052).
    if changes.get("answerer") and settings.hosted:
        raise Forbidden("The answerer is not available in hosted mode.")


def _where(ctx: Context) -> str:
    """For the CLI, which checks its own environment, not the running server's: how to pass it."""
    if ctx.principal.actor != "cli":
        return ""
    return (
        " This command reads the settings of its own environment, not those of the running server: "
        "run it with the server's settings (`semula --env-file FILE project set ...`), or change the "
        "setting through the server (PATCH /api/v1/projects/NAME)."
    )


def get_row(ctx: Context, name: str) -> dict[str, Any]:
    """The project row by name in the caller's workspace; 404 if absent or outside a token's binding."""
    row = ctx.store.one("get_project_by_name", workspace_id=ctx.principal.workspace_id, name=name)
    if row is None:
        raise NotFound(f"No project named {name!r}.", code="project_not_found")
    check_project(ctx, row["id"])
    return row


def get(ctx: Context, name: str) -> dict[str, Any]:
    require(ctx, role="viewer")
    return present(get_row(ctx, name))


def list_projects(ctx: Context, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
    require(ctx, role="viewer")
    rows = ctx.store.all(
        "list_projects",
        workspace_id=ctx.principal.workspace_id,
        only_id=ctx.principal.project_id,
        after=after,
        limit=limit + 1,
    )
    return page([present(r) for r in rows], limit)


def create(ctx: Context, data: dict[str, Any]) -> dict[str, Any]:
    """Create a project with default settings overridden by any given; admin only."""
    require(ctx, role="admin")
    require_unbound(ctx)
    data = load(CreateSchema(), data)
    name = data.pop("name")
    changes = load(SettingsSchema(), data)
    _check_switches(ctx, changes)
    values = {**DEFAULTS, **changes}
    quotas.check(ctx, "quota_projects")
    project_id = new_id("project")
    try:
        with ctx.store.transaction(ctx.principal.workspace_id) as tx:
            tx.run(
                "create_project",
                id=project_id,
                workspace_id=ctx.principal.workspace_id,
                name=name,
                now=now(),
                **_columns(values),
            )
            audit.record(tx, ctx, "project.create", name, list(changes))
    except UniqueViolation:
        raise Conflict(f"A project named {name!r} exists already.", code="project_exists") from None
    return present(ctx.store.one("get_project", id=project_id, workspace_id=ctx.principal.workspace_id))


def update(ctx: Context, name: str, data: dict[str, Any]) -> dict[str, Any]:
    """Change settings; admin only. Each change is audited by field name, answerer apart."""
    require(ctx, role="admin")
    changes = load(SettingsSchema(), data)
    row = get_row(ctx, name)
    current = present(row)
    changed = {k: v for k, v in changes.items() if current[k] != v}
    if not changed:
        return current
    _check_switches(ctx, changed)
    values = {k: current[k] for k in DEFAULTS} | changed
    refingerprinted = None
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run(
            "update_project",
            id=row["id"],
            workspace_id=ctx.principal.workspace_id,
            now=now(),
            **_columns(values),
        )
        if "ignore_fields" in changed or "normalize" in changed:
            # What makes two requests the same changed: every entry's fingerprint is taken again, in
            # this transaction, or the change is refused (decision 0059).
            refingerprinted = fingerprints.plan(tx, row, (values["ignore_fields"], values["normalize"]))
            fingerprints.apply(tx, ctx, row, refingerprinted)
        for rule in current["faults"] if "faults" in changed else ():
            if rule not in values["faults"]:  # a removed rule's counts go with it (decision 0061)
                tx.run("drop_fault_counts", project_id=row["id"], rule=faults.rule_key(rule))
        if "answerer" in changed:
            audit.record(tx, ctx, "project.answerer", name, ["answerer"])
        others = [k for k in changed if k != "answerer"]
        if others:
            audit.record(tx, ctx, "project.settings", name, others)
    out = present(ctx.store.one("get_project", id=row["id"], workspace_id=ctx.principal.workspace_id))
    if refingerprinted is not None:
        out["refingerprinted"] = refingerprinted.report()
    return out


def refingerprint(ctx: Context, name: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Take the fingerprint of every entry of a project again under its rules; admin only. For entries
    recorded by an older semula whose dialects kept more in the fingerprint (decision 0059)."""
    row = get_row(ctx, name)
    project = present(row)
    return fingerprints.refingerprint(
        ctx, row, (project["ignore_fields"], project["normalize"]), dry_run=dry_run
    )


def ensure(ctx: Context, name: str, **settings: Any) -> dict[str, Any]:
    """Get a project, creating it with these settings if absent (used by `serve --dev`)."""
    try:
        return get(ctx, name)
    except NotFound:
        try:
            return create(ctx, {"name": name, **settings})
        except Conflict:
            return get(ctx, name)
