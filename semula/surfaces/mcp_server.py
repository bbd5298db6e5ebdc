"""`semula mcp`: an MCP server over stdio, so a coding agent can answer parked calls as tools.

Built with the official MCP Python SDK. It holds no state and no database: every tool is one REST call
through semula.surfaces.client (SEMULA_URL, SEMULA_TOKEN), and every REST error comes back as a tool error
carrying the OpenAI error object. Named mcp_server, not mcp, so it does not shadow the SDK.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from semula import dialects
from semula.core import faults as fault_kinds
from semula.core import images
from semula.surfaces.client import Client, ClientError

T = TypeVar("T")

INSTRUCTIONS = """\
semula is a record/replay server for LLM API calls (its APIs: {apis}). When an
application's request has no recorded answer, semula parks it ("a pending call") and holds the
application's HTTP call open until someone answers. You are that someone: you write the reply the model
should have given.

The loop: call claim_next. It returns the oldest unanswered call and reserves it for you for
lease_seconds (default 300) so other agents skip it. Read call.conversation.messages (and
conversation.tools or conversation.response_format, if present: the same shape whatever API the app
called) and call.shape.skeleton, which is an answer of the
right form with placeholder values. Fill it in and send it with answer_pending(pending_id, answer). The
waiting application receives your answer at once and semula saves it, so the same request replays it
later. If answer_pending returns an invalid_answer error, its param names the field to fix (like
tool_calls[0].arguments.city); fix that and call answer_pending again. When claim_next says there is
nothing to claim, the queue is empty. A call you cannot answer: release_claim gives it back (it stays
parked); cancel_pending ends it (the application gets an error, nothing is recorded). Nothing you
answer is executed: tool calls are returned to the application as the model's tool calls, exactly as
you write them."""

ANSWER_FORMS = """\
The answer is one of:
- {"content": "the assistant's reply text"}  (a plain string is the same as this)
- {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}], "content": null}
  to call tools: each name must be one of conversation.tools, arguments must satisfy that tool's
  parameters JSON schema (arguments may be an object or a JSON string)
- {"message": {"role": "assistant", "content": ..., "tool_calls": [...]}}  (an assistant message)
- a whole chat.completion object with exactly one choice
Optional next to content/tool_calls: "finish_reason" ("stop", "length", "tool_calls", ...) and "usage".
If conversation.response_format is a json_schema (or json_object), send the JSON object itself as the
answer (or as content, object or text); it must validate against the schema.
Start from call.shape.skeleton: it already has the right form, and every refusal repeats it."""

LIST_FAULTS = """\
List a project's fault rules (its replay sessions' and entries' too) with how many calls each matched \
and faulted per session."""
ADD_FAULT = f"""\
Add a fault rule to a project: the calls it matches get an error in the API's own shape, silence, a cut \
stream or a slow reply instead of their recording, so an app's retry paths can be tested. A rule is \
{{"kind": one of {", ".join(fault_kinds.KINDS)}, the kind's parameters (rate_limit: retry_after; timeout: \
after; disconnect: after_events, at; slow: ttfb, pace), "times": N (the first N matched calls, counted \
per replay session), "probability": p with "seed": s (the same calls every run), "match": {{"api", \
"model", "fingerprint", "contains"}}, "session": a replay session's name, "entry": an entry's id}}."""
CLEAR_FAULTS = """\
Remove a project's fault rules and their counts: all, or only a session's, an entry's, or the one at an \
index."""

LIST_PENDING = """\
List parked calls, oldest first: id, project, model, status, and claimed_by/claimed_until while another \
agent holds one. To work through the queue, use claim_next instead: it reserves the call for you and \
returns it in full."""

IMAGES = """\
An image in the messages appears as a placeholder like "[image image/png 12.3 KB]" (or \
"[image https://...]" for a remote one, which is not fetched), and each data-URL image follows the JSON \
as an image, named by its place (messages[1].content[2])."""

GET_PENDING = (
    "Get one parked call in full: conversation (the request in chat form: model, messages, tools, "
    "response_format) and shape (the tools with their JSON schemas, the response_format schema, and "
    "skeleton: an answer of the right form with placeholder values to fill in). " + IMAGES
)

CLAIM_NEXT = (
    "Claim the oldest parked call nobody is working on and get it in full: conversation (the request in "
    "chat form), shape (with skeleton) and claim. It stays reserved for you for lease_seconds; if you do "
    'not answer in time another agent may claim it. Returns {"claimed": false, ...} when nothing is '
    "waiting. Next: write the answer and call answer_pending with the call's id. " + IMAGES
)

ANSWER_PENDING = (
    "Answer a parked call: semula checks the answer against the request, saves it as the recorded reply, "
    "and releases the application waiting on it. Returns the call with status answered and its entry_id. "
    "A mistake comes back as an invalid_answer error whose param names the field: fix it and call again. "
    "pending_resolved means someone answered or cancelled the call already.\n\n" + ANSWER_FORMS
)


RELEASE_CLAIM = """\
Give back a call you claimed but will not answer (you cannot, or should not): it stays parked, and the \
next claim_next (yours or another agent's) takes it at once instead of after your lease runs out. Pass the \
worker name you claimed with, if you gave one. claim_not_held means you hold no running lease on it."""

CANCEL_PENDING = """\
Cancel a parked call for good: the application waiting on it gets an error at once and nothing is \
recorded, so the same request parks again next time. Use it for a call that should never have been \
made; to leave a call for someone else, use release_claim instead."""

GET_ENTRY = """\
Get a recorded entry in full: its request (conversation), its answer, and its sequence: answers 1..n, \
where the k-th identical call of a replay session gets answer k (entries recorded once have one). The \
entry tools need a token of scope full (the queue's record scope does not change entries)."""

ENTRY_ANSWER = """\
Get one answer of an entry's sequence (seq 1 is the first, what a session's first identical call gets) \
with its own revisions, oldest first."""

EDIT_ENTRY_ANSWER = (
    "Replace one answer of an entry's sequence: checked against the entry's request as any answer is, "
    "saved as a new revision of that answer (the others are untouched). Needs role editor, scope full.\n\n"
    + ANSWER_FORMS
)

PIN_ENTRY_ANSWER = """\
Pin (pinned: true) or unpin one answer of an entry's sequence: a pinned answer is not re-recorded or \
replaced by an import. Pinning answer 1 pins the entry. Needs role editor, scope full."""

DELETE_ENTRY_ANSWER = """\
Delete one answer of an entry's sequence with its revisions: the answers after it move up one. The \
only answer of an entry cannot be deleted (last_answer): delete the entry instead. Needs role editor, \
scope full."""

REORDER_ENTRY_ANSWERS = """\
Put an entry's answers in a new order: order lists every answer's number once, as they are to replay \
([3, 1, 2] makes answer 3 the first). Each answer keeps its revisions and pin. Needs role editor, \
scope full."""

EntryId = Annotated[str, Field(description="The entry's id, like ent_0190a1b2c3d4e5f6a7b8c9d0.")]
Seq = Annotated[int, Field(ge=1, description="The answer's number in the sequence (1 is the first).")]
ProjectName = Annotated[str, Field(description="The project's name.")]


def _call(fn: Callable[[], T]) -> T:
    """Run one REST call; a REST error becomes a tool error the agent can read and act on."""
    try:
        return fn()
    except ClientError as exc:
        error = {
            "message": exc.message,
            "type": exc.error.get("type"),
            "param": exc.param,
            "code": exc.code,
        }
        # The code, then the error object on a line of its own (the SDK puts "Error executing tool
        # NAME: " before the text): the message is said once, in the object, beside its field.
        raise ToolError(
            f"{exc.code or 'error'}\n{json.dumps({'error': error}, ensure_ascii=False)}"
        ) from None


def _with_images(call: dict[str, Any]) -> CallToolResult:
    """The call as JSON with placeholders for data URLs, then each image of its messages as image content.
    Without the app's request as sent: its conversation view holds the same messages and what else an
    answer needs, the same for every API (the request doubled what an agent reads, 0.7-2.8k characters)."""
    shown = images.without_data(
        {k: v for k, v in call.items() if k != "request" or "conversation" not in call}
    )
    content: list[ContentBlock] = [
        TextContent(type="text", text=json.dumps(shown, indent=2, ensure_ascii=False))
    ]
    for part, media_type, data, note in images.decoded(images.image_parts(call.get("conversation") or {})):
        if data is None:
            content.append(
                TextContent(type="text", text=f"{part.where}: {images.describe(part.url)} ({note})")
            )
            continue
        content.append(TextContent(type="text", text=f"{part.where}: {note}"))
        content.append(ImageContent(type="image", data=base64.b64encode(data).decode(), mime_type=media_type))
    return CallToolResult(content=content, structured_content=shown)


def build(client: Client | None = None) -> MCPServer:
    """The MCP server with the pending tools and the entry-answer tools, talking to semula through client."""
    client = client or Client()
    server = MCPServer(
        "semula",
        instructions=INSTRUCTIONS.replace("{apis}", dialects.spoken()),
        log_level="WARNING",
        warn_on_duplicate_tools=True,
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(description=LIST_PENDING, annotations=read_only)
    def list_pending(
        project: Annotated[str | None, Field(description="Only this project's calls (its name).")] = None,
        status: Annotated[
            Literal["pending", "answered", "cancelled", "all"],
            Field(description="Which calls: pending (default) are waiting for an answer."),
        ] = "pending",
        after: Annotated[
            str | None, Field(description="Paging cursor: the last id of the previous page.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="Page size.")] = 20,
    ) -> dict[str, Any]:
        return _call(lambda: client.list_pending(project=project, status=status, after=after, limit=limit))

    @server.tool(description=GET_PENDING, annotations=read_only)
    def get_pending(
        pending_id: Annotated[str, Field(description="The call's id, like pnd_0190a1b2c3d4e5f6a7b8c9d0.")],
    ) -> Annotated[CallToolResult, dict[str, Any]]:
        return _with_images(_call(lambda: client.get_pending(pending_id)))

    @server.tool(
        description=CLAIM_NEXT,
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False, open_world_hint=False),
    )
    def claim_next(
        project: Annotated[str | None, Field(description="Only claim in this project (its name).")] = None,
        lease_seconds: Annotated[
            int, Field(ge=1, le=3600, description="How long the call stays reserved for you (default 300).")
        ] = 300,
        worker: Annotated[
            str | None, Field(description="Your name, shown to others as claimed_by (optional).")
        ] = None,
    ) -> Annotated[CallToolResult, dict[str, Any]]:
        claimed = _call(
            lambda: client.claim_next(project=project, lease_seconds=lease_seconds, worker=worker)
        )
        if claimed is None:
            return _with_images(
                {"claimed": False, "message": "Nothing to claim: no parked call is waiting right now."}
            )
        return _with_images({"claimed": True, **claimed})

    @server.tool(
        description=ANSWER_PENDING,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    def answer_pending(
        pending_id: Annotated[str, Field(description="The call's id (pnd_...).")],
        answer: Annotated[
            dict[str, Any] | str,
            Field(description="The answer object (see the tool description), or plain text for content."),
        ],
        summary: Annotated[
            str | None, Field(description="A short note kept with the recorded entry (optional).")
        ] = None,
    ) -> dict[str, Any]:
        return _call(lambda: client.answer_pending(pending_id, answer, summary=summary))

    @server.tool(
        description=RELEASE_CLAIM,
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    def release_claim(
        pending_id: Annotated[str, Field(description="The call's id (pnd_...).")],
        worker: Annotated[
            str | None, Field(description="The worker name you claimed with (default: the token's).")
        ] = None,
    ) -> dict[str, Any]:
        return _call(lambda: client.release_claim(pending_id, worker=worker))

    @server.tool(
        description=CANCEL_PENDING,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    )
    def cancel_pending(
        pending_id: Annotated[str, Field(description="The call's id (pnd_...).")],
    ) -> dict[str, Any]:
        return _call(lambda: client.cancel_pending(pending_id))

    @server.tool(description=GET_ENTRY, annotations=read_only)
    def get_entry(entry_id: EntryId) -> dict[str, Any]:
        return _call(lambda: client.get_entry(entry_id))

    @server.tool(description=ENTRY_ANSWER, annotations=read_only)
    def get_entry_answer(entry_id: EntryId, seq: Seq) -> dict[str, Any]:
        return _call(lambda: client.get_entry_answer(entry_id, seq))

    @server.tool(
        description=EDIT_ENTRY_ANSWER,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    def edit_entry_answer(
        entry_id: EntryId,
        seq: Seq,
        answer: Annotated[
            dict[str, Any] | str,
            Field(description="The answer object (see the tool description), or plain text for content."),
        ],
        summary: Annotated[str | None, Field(description="What changed and why (optional).")] = None,
    ) -> dict[str, Any]:
        return _call(lambda: client.edit_entry_answer(entry_id, seq, answer, summary=summary))

    @server.tool(
        description=PIN_ENTRY_ANSWER,
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    def pin_entry_answer(
        entry_id: EntryId,
        seq: Seq,
        pinned: Annotated[bool, Field(description="true to pin, false to unpin.")] = True,
    ) -> dict[str, Any]:
        return _call(lambda: client.pin_entry_answer(entry_id, seq, pinned))

    @server.tool(
        description=DELETE_ENTRY_ANSWER,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    )
    def delete_entry_answer(entry_id: EntryId, seq: Seq) -> dict[str, Any]:
        return _call(lambda: client.delete_entry_answer(entry_id, seq))

    @server.tool(
        description=REORDER_ENTRY_ANSWERS,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    def reorder_entry_answers(
        entry_id: EntryId,
        order: Annotated[list[int], Field(description="Every answer's number once, in the new order.")],
    ) -> dict[str, Any]:
        return _call(lambda: client.reorder_entry_answers(entry_id, order))

    @server.tool(description=LIST_FAULTS, annotations=read_only)
    def list_faults(project: ProjectName) -> dict[str, Any]:
        return _call(lambda: client.list_faults(project))

    @server.tool(
        description=ADD_FAULT,
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False, open_world_hint=False),
    )
    def add_fault(
        project: ProjectName,
        rule: Annotated[
            dict[str, Any],
            Field(description='The rule, like {"kind": "rate_limit", "times": 2, "session": "ci-1"}.'),
        ],
    ) -> dict[str, Any]:
        return _call(lambda: client.add_fault(project, rule))

    @server.tool(
        description=CLEAR_FAULTS,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    )
    def clear_faults(
        project: ProjectName,
        session: Annotated[str | None, Field(description="Only this replay session's rules.")] = None,
        entry: Annotated[str | None, Field(description="Only this entry's rules (ent_...).")] = None,
        index: Annotated[int | None, Field(ge=0, description="Only the rule at this place.")] = None,
    ) -> dict[str, Any]:
        return _call(lambda: client.clear_faults(project, session=session, entry=entry, index=index))

    return server


def run() -> None:
    """Serve over stdio until the client closes the connection."""
    build().run("stdio")
