"""The OpenAPI 3.1 document of the REST API under /api/v1, served at /api/v1/openapi.json.

Written by hand and kept true by tests: one fails when a registered /api/v1 route is missing here,
and schemathesis checks that responses match what is written.
"""

from __future__ import annotations

from typing import Any

from flask import current_app

from semula import fingerprint
from semula.config import MAX_RECORD_TIMEOUT
from semula.service.pending import DEFAULT_LEASE, MAX_LEASE, MAX_WORKER_LENGTH

JSON = "application/json"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    out["required"] = list(properties) if required is None else required
    return out | extra


def list_of(item: str) -> dict[str, Any]:
    return obj(
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": ref(item)},
            "has_more": {"type": "boolean"},
        }
    )


ERRORS = {
    400: "The request is not valid (a bad field, parameter or body).",
    401: "A valid token is required: `Authorization: Bearer <token>`.",
    403: "The token's role or scope does not allow this, or the token is bound to one project.",
    404: "Not found, or outside the token's project binding (the same answer either way).",
    409: "The request conflicts with the current state.",
    413: "The body is larger than SEMULA_MAX_BODY_BYTES.",
    422: "The request is well-formed but cannot be carried out (for answers: `invalid_answer`).",
    503: "The database is busy or unreachable; retry shortly.",
}
ALWAYS = (401, 403, 503)


def operation(
    operation_id: str,
    summary: str,
    responses: dict[int, tuple[str, dict[str, Any] | None]],
    *,
    errors: tuple[int, ...] = (),
    links: dict[str, Any] | None = None,
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    body_required: bool = True,
    tag: str,
    description: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag], "responses": {}}
    if description:
        out["description"] = description
    if parameters:
        out["parameters"] = parameters
    if body is not None:
        out["requestBody"] = {"required": body_required, "content": {JSON: {"schema": body}}}
        errors = (*errors, 400, 413)
    for status, (text, schema) in responses.items():
        out["responses"][str(status)] = {"description": text}
        if schema is not None:
            out["responses"][str(status)]["content"] = {JSON: {"schema": schema}}
        if links and 200 <= status < 300 and schema is not None:
            out["responses"][str(status)]["links"] = links
    for status in sorted(set(errors) | set(ALWAYS)):
        out["responses"][str(status)] = {
            "description": ERRORS[status],
            "content": {JSON: {"schema": ref("Error")}},
        }
    return out


def path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema or {"type": "string"},
    }


def worker(description: str) -> dict[str, Any]:
    return nullable(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_WORKER_LENGTH,
            "pattern": "\\S",
            "description": description,
        }
    )


def link_to(operation_id: str, parameter: str, field: str) -> dict[str, Any]:
    return {"operationId": operation_id, "parameters": {parameter: f"$response.body#/{field}"}}


PROJECT_LINKS = {
    "GetProject": link_to("getProject", "name", "name"),
    "UpdateProject": link_to("updateProject", "name", "name"),
    "GetUpstreamUsage": link_to("getUpstreamUsage", "name", "name"),
}
PENDING_LINKS = {
    "GetPending": link_to("getPending", "pending_id", "id"),
    "AnswerPending": link_to("answerPending", "pending_id", "id"),
    "CancelPending": link_to("cancelPending", "pending_id", "id"),
    "ReleasePending": link_to("releasePending", "pending_id", "id"),
}

LIMIT = query(
    "limit", "Page size, 1 to 1000 (default 50).", {"type": "integer", "minimum": 1, "maximum": 1000}
)
AFTER = query("after", "Cursor: the last id (or name, for projects) of the previous page.")
PROJECT_NAME = path_param("name", "The project's name (a slug).")
PENDING_ID = path_param("pending_id", "A pending call's id (`pnd_…`).")
TOKEN_ID = path_param("token_id", "The token's id (`tok_…`).")

SETTINGS_PROPERTIES: dict[str, Any] = {
    "mode": {"type": "string", "enum": ["record", "replay"]},
    "record_timeout": {"type": "integer", "minimum": 1, "maximum": MAX_RECORD_TIMEOUT},
    "max_misses": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
    "ignore_fields": {
        "type": "array",
        "maxItems": fingerprint.MAX_IGNORE_FIELDS,
        "items": {"type": "string", "pattern": "^(/([^~]|~[01])*)*$"},
        "description": "JSON pointers (RFC 6901) of request fields the fingerprint leaves out.",
    },
    "normalize": {
        "type": "array",
        "maxItems": fingerprint.MAX_NORMALIZE_RULES,
        "description": "Rules applied to message text before fingerprinting: a regex and its replacement.",
        "items": obj(
            {
                "pattern": {
                    "type": "string",
                    "format": "regex",
                    "minLength": 1,
                    "maxLength": fingerprint.MAX_PATTERN_LENGTH,
                },
                "replacement": {"type": "string"},
            },
            ["pattern"],
            additionalProperties=False,
        ),
    },
    "record_through": {"type": "boolean"},
    "upstream_model": nullable({"type": "string", "minLength": 1, "maxLength": 200}),
    "upstream_max_calls": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
    "upstream_max_tokens": nullable({"type": "integer", "minimum": 0, "maximum": 10**12}),
    "upstream_dry_run": {"type": "boolean"},
    "answerer": {"type": "boolean"},
    "restamp": {
        "type": "string",
        "enum": ["fresh", "recorded"],
        "description": "Whether a replay gets a fresh id and created (fresh) or the recorded ones.",
    },
    "stream_pacing": {
        "anyOf": [
            {"type": "string", "enum": ["none", "recorded"]},
            {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
        ],
        "description": "Replayed streams: at once (none), with the recorded gaps, or gaps times a factor.",
    },
    "embeddings": {
        "type": "string",
        "enum": ["off", "synthetic"],
        "description": "synthetic: a missed embeddings call in record mode is answered at once with "
        "deterministic vectors and saved as an entry (actor synthetic); off: it is parked like any call.",
    },
    "sequences": {
        "type": "string",
        "enum": ["off", "record"],
        "description": "record: in a session, the k-th identical call with fewer than k answers records "
        "answer k.",
    },
    "after_last": {
        "type": "string",
        "enum": ["repeat_last", "cycle", "fail"],
        "description": "What a session call past the last answer of a sequence gets.",
    },
}

API = {
    "type": "string",
    "enum": ["openai.chat", "openai.responses", "openai.embeddings", "anthropic.messages"],
    "description": "The API the call was made in (docs/decisions/0030-dialects.md).",
}
CONVERSATION = {
    "type": "object",
    "description": "The request in the common, Chat-Completions-shaped view every answer is checked against: "
    "model, messages, tools, tool_choice, response_format, notes.",
}

SCHEMAS: dict[str, Any] = {
    "Error": obj(
        {
            "error": obj(
                {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": nullable({"type": "string"}),
                    "code": nullable({"type": "string"}),
                }
            )
        },
        description="The OpenAI error object; every error on every surface has this shape.",
    ),
    "Project": obj(
        {
            "object": {"const": "project"},
            "id": {"type": "string", "pattern": "^prj_"},
            "name": {"type": "string"},
            **SETTINGS_PROPERTIES,
            "created": {"type": "integer"},
        }
    ),
    "ProjectSettings": obj(SETTINGS_PROPERTIES, [], additionalProperties=False),
    "SessionReset": obj(
        {
            "object": {"type": "string", "enum": ["session"]},
            "project": {"type": "string"},
            "session": {"type": "string"},
            "reset": {"type": "boolean"},
        },
        ["object", "project", "session", "reset"],
    ),
    "ProjectCreate": obj(
        {"name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,62}$"}, **SETTINGS_PROPERTIES},
        ["name"],
        additionalProperties=False,
    ),
    "ProjectList": list_of("Project"),
    "Token": obj(
        {
            "object": {"const": "token"},
            "id": {"type": "string", "pattern": "^tok_"},
            "name": {"type": "string"},
            "role": {"type": "string", "enum": ["viewer", "editor", "admin"]},
            "scope": {"type": "string", "enum": ["replay", "record", "full"]},
            "project": nullable({"type": "string"}),
            "created": {"type": "integer"},
            "revoked": {"type": "boolean"},
        }
    ),
    "TokenCreate": obj(
        {
            "role": {"type": "string", "enum": ["viewer", "editor", "admin"]},
            "scope": {"type": "string", "enum": ["replay", "record", "full"], "default": "full"},
            "project": nullable({"type": "string", "description": "Bind the token to this project."}),
            "name": {"type": "string", "maxLength": 200},
        },
        ["role"],
        additionalProperties=False,
    ),
    "TokenCreated": {
        "allOf": [
            ref("Token"),
            obj({"token": {"type": "string", "description": "The secret, shown in this response only."}}),
        ]
    },
    "TokenList": list_of("Token"),
    "Session": obj(
        {
            "object": {"const": "session"},
            "id": {"type": "string", "pattern": "^ses_"},
            "token": {"type": "string", "pattern": "^tok_"},
            "created": {"type": "integer"},
            "last_seen": {"type": "integer", "description": "Written at most once a minute."},
            "ended": nullable({"type": "integer"}),
            "expires": nullable(
                {"type": "integer", "description": "When it ends unless used again; null once ended."}
            ),
            "status": {"type": "string", "enum": ["active", "expired", "ended"]},
        }
    ),
    "SessionList": list_of("Session"),
    "AuditEvent": obj(
        {
            "object": {"const": "audit_event"},
            "id": {"type": "string", "pattern": "^aud_"},
            "created": {"type": "integer"},
            "actor": {"type": "string"},
            "action": {"type": "string"},
            "target": nullable({"type": "string"}),
            "fields": {"type": "array", "items": {"type": "string"}},
        }
    ),
    "AuditList": list_of("AuditEvent"),
    "UpstreamUsage": obj(
        {
            "object": {"const": "upstream_usage"},
            "project": {"type": "string"},
            "record_through": {"type": "boolean"},
            "dry_run": {"type": "boolean"},
            "calls": {"type": "integer"},
            "max_calls": {"type": "integer"},
            "prompt_tokens": {"type": "integer"},
            "completion_tokens": {"type": "integer"},
            "max_tokens": nullable({"type": "integer"}),
            "dry_run_prompts": {
                "type": "array",
                "items": obj(
                    {
                        "fingerprint": {"type": "string"},
                        "model": nullable({"type": "string"}),
                        "count": {"type": "integer"},
                        "first_seen": {"type": "integer"},
                        "last_seen": {"type": "integer"},
                        "request": {"type": "object"},
                    }
                ),
            },
        },
        description="Record-through spend against the project's caps, and the prompts a dry run saw.",
    ),
    "Pending": obj(
        {
            "object": {"const": "pending"},
            "id": {"type": "string", "pattern": "^pnd_"},
            "api": API,
            "project": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "answered", "cancelled"]},
            "model": nullable({"type": "string"}),
            "stream": {"type": "boolean"},
            "created": {"type": "integer"},
            "claimed_by": nullable(
                {"type": "string", "description": "The worker holding the lease, while it runs."}
            ),
            "claimed_until": nullable(
                {"type": "integer", "description": "When the lease ends (Unix seconds)."}
            ),
            "entry_id": nullable({"type": "string"}),
        }
    ),
    "Shape": obj(
        {
            "tools": {
                "type": "array",
                "items": obj(
                    {
                        "name": {"type": "string"},
                        "description": nullable({"type": "string"}),
                        "parameters": nullable({"type": "object"}),
                    }
                ),
            },
            "response_format": nullable({"type": "object"}),
            "skeleton": {"type": "object", "description": "An answer to fill in and send to /answer."},
            "notes": {
                "type": "array",
                "items": {"type": "string"},
                "description": "What an answer cannot do for this call (built-in tools, for example).",
            },
        },
        ["tools", "response_format", "skeleton"],
        description="What an answer must look like: the request's tools, its response schema, a skeleton.",
    ),
    "PendingFull": {
        "allOf": [
            ref("Pending"),
            obj(
                {
                    "request": {"type": "object", "description": "The request as the app sent it."},
                    "conversation": CONVERSATION,
                    "shape": ref("Shape"),
                }
            ),
        ]
    },
    "Claim": obj(
        {
            "worker": {"type": "string"},
            "lease_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_LEASE},
            "claimed_until": {"type": "integer"},
        }
    ),
    "PendingClaimed": {"allOf": [ref("PendingFull"), obj({"claim": ref("Claim")})]},
    "PendingList": list_of("Pending"),
    "ReleaseRequest": obj(
        {
            "worker": worker("The worker name the call was claimed with (default: the token's)."),
        },
        [],
        additionalProperties=False,
    ),
    "ClaimRequest": obj(
        {
            "project": nullable({"type": "string", "description": "Claim only in this project."}),
            "lease_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LEASE,
                "default": DEFAULT_LEASE,
            },
            "worker": worker("Shown as claimed_by."),
        },
        [],
        additionalProperties=False,
    ),
    "Answer": {
        "description": (
            'One of: `{"content": text}`; `{"tool_calls": [{"name", "arguments"}], "content"?}`; '
            '`{"message": assistant message}`; a whole `chat.completion`. Optional `finish_reason`, '
            "`usage`, and `summary` (recorded with the entry revision). Plain JSON text is taken as content."
        ),
        "anyOf": [{"type": "object"}, {"type": "string"}],
    },
}

PATHS: dict[str, Any] = {
    "/api/v1/projects": {
        "get": operation(
            "listProjects",
            "List projects",
            {200: ("Projects by name.", ref("ProjectList"))},
            errors=(400,),
            parameters=[AFTER, LIMIT],
            tag="projects",
        ),
        "post": operation(
            "createProject",
            "Create a project (admin)",
            {201: ("The project.", ref("Project"))},
            errors=(409, 422),
            body=ref("ProjectCreate"),
            links=PROJECT_LINKS,
            tag="projects",
        ),
    },
    "/api/v1/projects/{name}": {
        "get": operation(
            "getProject",
            "Get a project",
            {200: ("The project.", ref("Project"))},
            errors=(404,),
            parameters=[PROJECT_NAME],
            tag="projects",
        ),
        "patch": operation(
            "updateProject",
            "Change a project's settings (admin; audited)",
            {200: ("The project.", ref("Project"))},
            errors=(404, 422),
            parameters=[PROJECT_NAME],
            body=ref("ProjectSettings"),
            tag="projects",
        ),
    },
    "/api/v1/projects/{name}/upstream": {
        "get": operation(
            "getUpstreamUsage",
            "Record-through spend and dry-run prompts of a project",
            {200: ("Spend, caps and dry-run prompts.", ref("UpstreamUsage"))},
            errors=(404,),
            parameters=[PROJECT_NAME],
            tag="projects",
        ),
    },
    "/api/v1/projects/{name}/upstream/reset": {
        "post": operation(
            "resetUpstreamUsage",
            "Zero a project's record-through spend and forget its dry-run prompts (admin; audited)",
            {200: ("Spend after the reset.", ref("UpstreamUsage"))},
            errors=(404,),
            parameters=[PROJECT_NAME],
            tag="projects",
        ),
    },
    "/api/v1/projects/{name}/sessions/{session}/reset": {
        "post": operation(
            "resetSession",
            "Start a replay session over: its next call of each request is call 1 (replay scope)",
            {200: ("The session was reset.", ref("SessionReset"))},
            errors=(400, 404),
            parameters=[PROJECT_NAME, path_param("session", "The session's name: `[A-Za-z0-9_.-]{1,64}`.")],
            tag="projects",
        ),
    },
    "/api/v1/tokens": {
        "get": operation(
            "listTokens",
            "List tokens (admin; never their secrets)",
            {200: ("Tokens by id.", ref("TokenList"))},
            errors=(400,),
            parameters=[AFTER, LIMIT],
            tag="tokens",
        ),
        "post": operation(
            "createToken",
            "Create a token (admin); the secret is in this response only",
            {201: ("The token and its secret.", ref("TokenCreated"))},
            errors=(404,),
            body=ref("TokenCreate"),
            links={"RevokeToken": link_to("revokeToken", "token_id", "id")},
            tag="tokens",
        ),
    },
    "/api/v1/tokens/{token_id}": {
        "delete": operation(
            "revokeToken",
            "Revoke a token (admin)",
            {200: ("The revoked token.", ref("Token"))},
            errors=(404,),
            parameters=[TOKEN_ID],
            tag="tokens",
        ),
    },
    "/api/v1/tokens/{token_id}/sessions": {
        "get": operation(
            "listTokenSessions",
            "List a token's dashboard sessions, oldest first (admin; never their secrets)",
            {200: ("Sessions by id, open, expired or ended.", ref("SessionList"))},
            errors=(400, 404),
            parameters=[TOKEN_ID, AFTER, LIMIT],
            tag="tokens",
        ),
        "delete": operation(
            "endTokenSessions",
            "End every open dashboard session of a token, which keeps working (admin; audited)",
            {200: ("The token's sessions afterwards.", ref("SessionList"))},
            errors=(404,),
            parameters=[TOKEN_ID],
            tag="tokens",
        ),
    },
    "/api/v1/tokens/{token_id}/sessions/{session_id}": {
        "delete": operation(
            "endTokenSession",
            "End one open dashboard session of a token at once (admin; audited)",
            {200: ("The ended session.", ref("Session"))},
            errors=(404,),
            parameters=[TOKEN_ID, path_param("session_id", "A dashboard session's id (`ses_…`).")],
            tag="tokens",
        ),
    },
    "/api/v1/audit": {
        "get": operation(
            "listAudit",
            "List audit events, newest first (admin)",
            {200: ("Audit events.", ref("AuditList"))},
            errors=(400,),
            parameters=[
                query("action", "Only this action, like `project.settings`."),
                query("target", "Only this target (a project name or token id)."),
                query("after", "Cursor: the last id of the previous page (older events follow)."),
                LIMIT,
            ],
            tag="audit",
        ),
    },
    "/api/v1/pending": {
        "get": operation(
            "listPending",
            "List parked calls, oldest first",
            {200: ("Parked calls; claimed_by and claimed_until show a running lease.", ref("PendingList"))},
            errors=(400, 404),
            parameters=[
                query("project", "Only this project's calls."),
                query(
                    "status",
                    "Only this status (default pending); `all` for every status.",
                    {"type": "string", "enum": ["pending", "answered", "cancelled", "all"]},
                ),
                AFTER,
                LIMIT,
            ],
            tag="pending",
        ),
    },
    "/api/v1/pending/claim": {
        "post": operation(
            "claimPending",
            "Claim the oldest parked call nobody holds (editor, record scope)",
            {
                200: ("The call in full, its shape, and the claim.", ref("PendingClaimed")),
                204: ("Nothing to claim.", None),
            },
            errors=(404,),
            body=ref("ClaimRequest"),
            body_required=False,
            links=PENDING_LINKS,
            tag="pending",
            description=(
                "Holds the call for lease_seconds (default 300, at most 3600) so other claimers skip it. "
                "The lease is advisory: anyone may still answer. An expired lease is no lease."
            ),
        ),
    },
    "/api/v1/pending/{pending_id}": {
        "get": operation(
            "getPending",
            "Get a parked call in full, with its shape",
            {200: ("The call, its request and its shape.", ref("PendingFull"))},
            errors=(404,),
            parameters=[PENDING_ID],
            tag="pending",
        ),
    },
    "/api/v1/pending/{pending_id}/answer": {
        "post": operation(
            "answerPending",
            "Answer a parked call (editor, record scope)",
            {200: ("The call, now answered, with its entry_id.", ref("Pending"))},
            errors=(404, 409, 422),
            parameters=[PENDING_ID],
            body=ref("Answer"),
            tag="pending",
            description=(
                "The answer is validated against the request (tool names, argument schemas, "
                "response_format); a failure is 422 invalid_answer whose param names the field. "
                "409 pending_resolved when the call is no longer pending."
            ),
        ),
    },
    "/api/v1/pending/{pending_id}/cancel": {
        "post": operation(
            "cancelPending",
            "Cancel a parked call: held requests fail, nothing is saved (editor, record scope)",
            {200: ("The call, now cancelled.", ref("Pending"))},
            errors=(404, 409),
            parameters=[PENDING_ID],
            tag="pending",
        ),
    },
    "/api/v1/pending/{pending_id}/release": {
        "post": operation(
            "releasePending",
            "Give a claimed call back: the next claim takes it at once (editor, record scope)",
            {200: ("The call, claimed by nobody.", ref("Pending"))},
            errors=(404, 409),
            parameters=[PENDING_ID],
            body=ref("ReleaseRequest"),
            body_required=False,
            tag="pending",
            description=(
                "Releases the claim held under `worker` (default: the token's own name, as a claim "
                "without worker takes). 409 claim_not_held when that worker holds no running lease on "
                "it; 409 pending_resolved when it is answered or cancelled."
            ),
        ),
    },
    "/api/v1/openapi.json": {
        "get": {
            "operationId": "getOpenAPI",
            "summary": "This document",
            "tags": ["meta"],
            "security": [],
            "responses": {
                "200": {"description": "OpenAPI 3.1.", "content": {JSON: {"schema": {"type": "object"}}}}
            },
        },
    },
}


# Entries, bundles and the call log (issue 5; semula/web/api_entries.py).
ENTRY_ID = path_param("entry_id", "An entry's id (`ent_…`).")
REVIEW_STATUS = {"type": "string", "enum": ["unreviewed", "approved", "rejected"]}
SUMMARY = {"type": "string", "description": "What changed and why, kept with the revision."}
ENTRY_PROPERTIES: dict[str, Any] = {
    "object": {"const": "entry"},
    "id": {"type": "string", "pattern": "^ent_"},
    "api": API,
    "project": {"type": "string"},
    "fingerprint": {"type": "string"},
    "model": nullable({"type": "string"}),
    "revision": {"type": "integer", "minimum": 1},
    "pinned": {"type": "boolean"},
    "review_status": REVIEW_STATUS,
    "created": {"type": "integer"},
    "updated": {"type": "integer"},
}
ANSWER_PROPERTIES: dict[str, Any] = {
    "object": {"const": "entry.answer"},
    "entry": {"type": "string", "pattern": "^ent_"},
    "seq": {"type": "integer", "minimum": 1, "description": "Its number in the entry's sequence."},
    "revision": {"type": "integer", "minimum": 1},
    "pinned": {"type": "boolean"},
    "updated": {"type": "integer"},
    "response": {"type": "object"},
    "chunks": nullable({"type": "array", "items": {"type": "object"}}),
    "answer": nullable({"type": "object", "description": "The response as an assistant message."}),
}
SEQ = {
    **path_param("seq", "The answer's number in the entry's sequence, from 1."),
    "schema": {"type": "integer"},
}
SCHEMAS.update(
    {
        "Entry": obj(
            {
                **ENTRY_PROPERTIES,
                "preview": obj({"prompt": {"type": "string"}, "answer": {"type": "string"}}),
            }
        ),
        "EntryList": list_of("Entry"),
        "EntryRevision": obj(
            {
                "object": {"const": "entry.revision"},
                "seq": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The answer of the sequence it is of.",
                },
                "number": {"type": "integer", "minimum": 1},
                "actor": {"type": "string", "enum": ["agent", "human", "import"]},
                "summary": {"type": "string"},
                "created": {"type": "integer"},
                "response": {"type": "object"},
                "chunks": nullable({"type": "array", "items": {"type": "object"}}),
            }
        ),
        "EntryFull": obj(
            {
                **ENTRY_PROPERTIES,
                "request": {"type": "object", "description": "The recorded request (redacted)."},
                "response": {"type": "object", "description": "The API's response it replays."},
                "conversation": CONVERSATION,
                "answer": nullable(
                    {"type": "object", "description": "The response as an assistant message, for every API."}
                ),
                "chunks": nullable({"type": "array", "items": {"type": "object"}}),
                "answers": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How many answers its sequence has.",
                },
                "sequence": {
                    "type": "array",
                    "items": ref("EntryAnswer"),
                    "description": "Every answer, 1..n: the k-th identical call of a session gets answer k.",
                },
                "revisions": {"type": "array", "items": ref("EntryRevision")},
            }
        ),
        "EntryAnswer": obj(ANSWER_PROPERTIES),
        "EntryAnswerFull": obj(
            {
                **ANSWER_PROPERTIES,
                "revisions": {
                    "type": "array",
                    "items": ref("EntryRevision"),
                    "description": "This answer's own.",
                },
            }
        ),
        "ReorderRequest": obj(
            {
                "order": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "description": "Every answer's number, once, in the order they are to replay: [3, 1, 2].",
                }
            },
            ["order"],
            additionalProperties=False,
        ),
        "EntryDeleted": obj(
            {"object": {"const": "entry.deleted"}, "id": {"type": "string"}, "deleted": {"const": True}}
        ),
        "RevertRequest": obj(
            {"revision": {"type": "integer", "minimum": 1}, "summary": SUMMARY},
            ["revision"],
            additionalProperties=False,
        ),
        "ReviewRequest": obj({"status": REVIEW_STATUS}, additionalProperties=False),
        "Bundle": {
            "type": "object",
            "description": (
                'A bundle: `{"bundle": {"format": "semula-bundle", "version": 1}, "config": {settings}, '
                '"entries": [{chunks, fingerprint, pinned, request, response, review_status}]}`, '
                "sorted keys, entries by fingerprint."
            ),
        },
        "ImportReport": obj(
            {
                "object": {"const": "import_report"},
                "project": {"type": "string"},
                "entries": {"type": "integer"},
                "created": {"type": "integer"},
                "updated": {"type": "integer"},
                "unchanged": {"type": "integer"},
                "skipped": {"type": "integer", "description": "Pinned in this project, left alone."},
                "fingerprints_recomputed": {"type": "integer"},
            }
        ),
        "Call": obj(
            {
                "object": {"const": "call"},
                "id": {"type": "string", "pattern": "^cal_"},
                "api": API,
                "project": {"type": "string"},
                "created": {"type": "number"},
                "fingerprint": nullable({"type": "string"}),
                "model": nullable({"type": "string"}),
                "stream": {"type": "boolean"},
                "outcome": {"type": "string"},
                "status": {"type": "integer"},
                "duration_ms": {"type": "number"},
                "entry_id": nullable({"type": "string"}),
                "pending_id": nullable({"type": "string"}),
                "token_id": nullable({"type": "string"}),
            }
        ),
        "CallList": list_of("Call"),
    }
)
PATHS.update(
    {
        "/api/v1/projects/{name}/entries": {
            "get": operation(
                "listEntries",
                "List a project's entries, newest first",
                {200: ("Entries with a short preview.", ref("EntryList"))},
                errors=(400, 404),
                parameters=[
                    PROJECT_NAME,
                    query("model", "Only entries recorded for this model."),
                    query("text", "Only entries whose request or response contains this (any case)."),
                    query("review_status", "Only entries with this review status.", REVIEW_STATUS),
                    query("pinned", "Only pinned (true) or unpinned (false) entries.", {"type": "boolean"}),
                    query("after", "Cursor: the last id of the previous page (older entries follow)."),
                    LIMIT,
                ],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}": {
            "get": operation(
                "getEntry",
                "Get an entry with its request, response and revisions",
                {200: ("The entry.", ref("EntryFull"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                tag="entries",
            ),
            "patch": operation(
                "editEntry",
                "Replace an entry's response (editor; a human revision; audited)",
                {200: ("The entry.", ref("EntryFull"))},
                errors=(404, 422),
                parameters=[ENTRY_ID],
                body=ref("Answer"),
                tag="entries",
            ),
            "delete": operation(
                "deleteEntry",
                "Delete an entry and its revisions (editor; audited)",
                {200: ("Deleted.", ref("EntryDeleted"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/revert": {
            "post": operation(
                "revertEntry",
                "Make an earlier revision current again, as a new revision (editor; audited)",
                {200: ("The entry.", ref("EntryFull"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                body=ref("RevertRequest"),
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/pin": {
            "post": operation(
                "pinEntry",
                "Pin an entry against imports and re-recording (editor; audited)",
                {200: ("The entry.", ref("Entry"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/unpin": {
            "post": operation(
                "unpinEntry",
                "Unpin an entry (editor; audited)",
                {200: ("The entry.", ref("Entry"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/review": {
            "post": operation(
                "reviewEntry",
                "Set an entry's review status; rejected entries do not replay (editor; audited)",
                {200: ("The entry.", ref("Entry"))},
                errors=(404,),
                parameters=[ENTRY_ID],
                body=ref("ReviewRequest"),
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/answers/{seq}": {
            "get": operation(
                "getEntryAnswer",
                "Get one answer of an entry's sequence with its revisions",
                {200: ("The answer.", ref("EntryAnswerFull"))},
                errors=(404,),
                parameters=[ENTRY_ID, SEQ],
                tag="entries",
            ),
            "patch": operation(
                "editEntryAnswer",
                "Replace one answer of a sequence, validated as any answer (editor; audited)",
                {200: ("The answer.", ref("EntryAnswerFull"))},
                errors=(404, 422),
                parameters=[ENTRY_ID, SEQ],
                body=ref("Answer"),
                tag="entries",
            ),
            "delete": operation(
                "deleteEntryAnswer",
                "Delete one answer and its revisions; later ones move up (editor; audited)",
                {200: ("The entry.", ref("EntryFull"))},
                errors=(404, 409),
                parameters=[ENTRY_ID, SEQ],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/answers/{seq}/revert": {
            "post": operation(
                "revertEntryAnswer",
                "Make an earlier revision of one answer current again, as a new revision (editor; audited)",
                {200: ("The answer.", ref("EntryAnswerFull"))},
                errors=(404,),
                parameters=[ENTRY_ID, SEQ],
                body=ref("RevertRequest"),
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/answers/{seq}/pin": {
            "post": operation(
                "pinEntryAnswer",
                "Pin one answer against imports and re-recording (editor; audited)",
                {200: ("The answer.", ref("EntryAnswerFull"))},
                errors=(404,),
                parameters=[ENTRY_ID, SEQ],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/answers/{seq}/unpin": {
            "post": operation(
                "unpinEntryAnswer",
                "Unpin one answer (editor; audited)",
                {200: ("The answer.", ref("EntryAnswerFull"))},
                errors=(404,),
                parameters=[ENTRY_ID, SEQ],
                tag="entries",
            ),
        },
        "/api/v1/entries/{entry_id}/answers/reorder": {
            "post": operation(
                "reorderEntryAnswers",
                "Put a sequence's answers in a new order, each with its revisions and pin (editor; audited)",
                {200: ("The entry.", ref("EntryFull"))},
                errors=(400, 404, 409),
                parameters=[ENTRY_ID],
                body=ref("ReorderRequest"),
                tag="entries",
            ),
        },
        "/api/v1/projects/{name}/export": {
            "get": operation(
                "exportProject",
                "Export a project's bundle (entries and non-operator settings)",
                {200: ("The bundle, streamed.", ref("Bundle"))},
                errors=(404,),
                parameters=[PROJECT_NAME],
                tag="entries",
            ),
        },
        "/api/v1/projects/{name}/import": {
            "post": operation(
                "importProject",
                "Import a bundle: all or nothing; operator settings reset (admin; audited)",
                {200: ("What the import did.", ref("ImportReport"))},
                errors=(404, 409),
                parameters=[PROJECT_NAME],
                body=ref("Bundle"),
                tag="entries",
            ),
        },
        "/api/v1/projects/{name}/calls": {
            "get": operation(
                "listCalls",
                "List a project's call log, newest first",
                {200: ("Proxied calls.", ref("CallList"))},
                errors=(400, 404),
                parameters=[
                    PROJECT_NAME,
                    query("outcome", "Only calls with this outcome (hit, parked, replay_miss, …)."),
                    query("after", "Cursor: the last id of the previous page (older calls follow)."),
                    LIMIT,
                ],
                tag="entries",
            ),
        },
    }
)


def document() -> dict[str, Any]:
    """The OpenAPI document, with the server's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        semula_version = version("semula")
    except PackageNotFoundError:
        semula_version = "0"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "semula REST API",
            "version": semula_version,
            "description": (
                "Projects, tokens, audit and the pending queue of semula. Errors are OpenAI error objects. "
                "Authenticate with `Authorization: Bearer <semula token>`."
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def serve() -> Any:
    """GET /api/v1/openapi.json; public, like any API description."""
    return current_app.json.response(document())
