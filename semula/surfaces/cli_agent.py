"""The agent commands (pending, show, answer, claim, release, cancel, mcp) talk to a running server over REST.

SEMULA_URL and SEMULA_TOKEN say where and as whom, so an agent on another machine can answer calls.
Exit codes: 0 ok, 1 error (its message is printed), 2 usage, 3 nothing to claim.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click

from semula import dialects
from semula.core import images
from semula.surfaces.client import Client, ClientError

EXIT_NOTHING_TO_CLAIM = 3
WAIT_FIRST, WAIT_MAX = 0.25, 2.0


class AgentError(click.ClickException):
    """A REST error: the CLI prints its message and exits 1."""

    exit_code = 1


def client() -> Client:
    """The REST client; a test may hand one in as the click context's obj["client"]."""
    obj = click.get_current_context().find_root().obj
    if isinstance(obj, dict) and isinstance(obj.get("client"), Client):
        return obj["client"]
    return Client()


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ClientError as exc:
        raise AgentError(str(exc)) from None


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


SAVE_IMAGES = click.option(
    "--save-images",
    "save_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the call's images to this directory (ID-MESSAGE-PART.EXT) and print their paths.",
)


def show_call(item: dict[str, Any], as_json: bool, save_dir: Path | None) -> None:
    """Print a call (as JSON or for a reader), then save its images if asked (on stderr with --json)."""
    if as_json:
        emit_json(item)
    else:
        render(item, images_hint=save_dir is None)
    if save_dir is not None:
        save_images(item, save_dir, err=as_json)


def save_images(item: dict[str, Any], directory: Path, *, err: bool = False) -> None:
    """Write each data-URL image of the call to directory and print where; remote ones are only listed."""
    parts = images.image_parts(item.get("conversation") or item.get("request") or {})
    if not parts:
        click.echo("\nimages: none", err=err)
        return
    click.echo("\nimages:", err=err)
    for part, media_type, data, note in images.decoded(parts):
        if data is None:
            click.echo(f"  {part.where}: {images.describe(part.url)} ({note})", err=err)
            continue
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / part.file_name(item["id"], media_type)
            path.write_bytes(data)
        except OSError as exc:
            raise AgentError(f"cannot save {part.where} in {directory}: {exc.strerror or exc}") from None
        click.echo(f"  {part.where}: {path}  {note}", err=err)


@click.command("pending")
@click.option("--project", default=None, help="Only this project's calls.")
@click.option(
    "--status",
    type=click.Choice(["pending", "answered", "cancelled", "all"]),
    default="pending",
    show_default=True,
    help="Only calls with this status (all: every status).",
)
@click.option(
    "--abandoned/--waited-for",
    default=None,
    help="Only the pending calls nobody waits for any more (their client went away), or only the others.",
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="At most this many calls."
)
@click.option("--json", "as_json", is_flag=True, help="Print the API's list object as JSON.")
def pending(project: str | None, status: str, abandoned: bool | None, limit: int, as_json: bool) -> None:
    """List parked calls, oldest first (claimed ones show who holds them; CLIENT says whether a
    pending call's client still waits for it or went away: abandoned, still answerable)."""
    listing = call(client().list_pending, project=project, status=status, abandoned=abandoned, limit=limit)
    if as_json:
        emit_json(listing)
        return
    if not listing["data"]:
        click.echo("no calls" if status == "all" else f"no {status} calls")
        return
    rows = [("ID", "PROJECT", "API", "MODEL", "STATUS", "CLIENT", "AGE", "CLAIMED")]
    for p in listing["data"]:
        claimed = (
            f"{p['claimed_by']} ({_duration(p['claimed_until'] - time.time())} left)"
            if p["claimed_by"]
            else "-"
        )
        rows.append(
            (
                p["id"],
                p["project"] or "-",
                p["api"],
                p["model"] or "-",
                p["status"],
                ("abandoned" if p["abandoned"] else "waiting") if p["status"] == "pending" else "-",
                _duration(time.time() - p["created"]),
                claimed,
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)) + "  " + row[-1])
    if listing["has_more"]:
        click.echo(f"... more: semula pending --limit {min(limit * 2, 1000)}", err=True)


@click.command("show")
@click.argument("pending_id")
@click.option("--json", "as_json", is_flag=True, help="Print the call as JSON.")
@SAVE_IMAGES
def show(pending_id: str, as_json: bool, save_dir: Path | None) -> None:
    """Show parked call PENDING_ID in full: its messages, tools, response format and answer skeleton."""
    show_call(call(client().get_pending, pending_id), as_json, save_dir)


@click.command("answer")
@click.argument("pending_id")
@click.argument("text", required=False)
@click.option(
    "--file", "file", type=click.File("r"), help="Read the answer text from this file (- for stdin)."
)
@click.option(
    "--json",
    "json_text",
    metavar="JSON",
    help=(
        "The answer as JSON: {content}, {tool_calls}, {message} or a chat.completion (for a JSON-schema "
        "output, the JSON object itself); - reads stdin."
    ),
)
@click.option("--summary", default=None, help="A note kept with the recorded entry.")
def answer(pending_id: str, text: str | None, file: Any, json_text: str | None, summary: str | None) -> None:
    """Answer parked call PENDING_ID with TEXT (- reads stdin, without its last newline), --file F,
    or --json JSON.

    Plain text becomes {"content": TEXT}. Tool calls need --json, for example
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'; a call with a JSON
    schema output takes the JSON object itself.

    Needs SEMULA_URL (the server's root, like http://127.0.0.1:8080) and SEMULA_TOKEN (role editor,
    scope record; none on a server with auth off).
    """
    given = [x for x in (text, file, json_text) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give the answer once: TEXT, --file F or --json JSON")
    if json_text is not None:
        raw = sys.stdin.read() if json_text == "-" else json_text
        try:
            payload: Any = json.loads(raw)
        except ValueError as exc:
            raise click.UsageError(f"--json is not valid JSON: {exc}") from None
    elif file is not None:
        payload = {"content": file.read()}
    else:
        # What a shell pipes in ends with a newline the writer did not mean as part of the answer.
        payload = {"content": _without_last_newline(sys.stdin.read()) if text == "-" else text}
    done = call(client().answer_pending, pending_id, payload, summary=summary)
    click.echo(f"answered {done['id']}: entry {done['entry_id']}")


def _without_last_newline(text: str) -> str:
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")


@click.command("claim")
@click.option("--project", default=None, help="Only claim in this project.")
@click.option(
    "--lease",
    type=click.IntRange(1, 3600),
    default=300,
    show_default=True,
    help="Seconds the call stays reserved for you.",
)
@click.option("--worker", default=None, help="Your name, shown as claimed_by (default: the token's id).")
@click.option("--wait", is_flag=True, help="Block until there is a call to claim.")
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=0,
    help="With --wait: give up after this many seconds (exit 3); 0 waits forever.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the claimed call as JSON.")
@SAVE_IMAGES
def claim(
    project: str | None,
    lease: int,
    worker: str | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    save_dir: Path | None,
) -> None:
    """Claim the oldest parked call nobody holds and show it in full; exit 3 when there is none.

    Needs SEMULA_URL (the server's root, like http://127.0.0.1:8080) and SEMULA_TOKEN (role editor,
    scope record; none on a server with auth off).
    """
    api = client()
    deadline = time.monotonic() + timeout if timeout else None
    delay = WAIT_FIRST
    warned = False
    while True:
        try:
            claimed = api.claim_next(project=project, lease_seconds=lease, worker=worker)
        except ClientError as exc:
            # While waiting, a server restart or a busy database is a pause, not the end of the loop.
            if not (wait and (exc.status is None or exc.status == 503)):
                raise AgentError(str(exc)) from None
            if not warned:
                click.echo(f"waiting for a call to claim ({exc})", err=True)
                warned = True
            claimed = None
        if claimed is not None:
            break
        if not wait or (deadline is not None and time.monotonic() + delay > deadline):
            click.echo("nothing to claim", err=True)
            sys.exit(EXIT_NOTHING_TO_CLAIM)
        if not warned:
            click.echo("waiting for a call to claim", err=True)
            warned = True
        time.sleep(delay)
        delay = min(delay * 1.5, WAIT_MAX)
    show_call(claimed, as_json, save_dir)


@click.command("release")
@click.argument("pending_id")
@click.option("--worker", default=None, help="The name you claimed with (default: the token's id).")
def release(pending_id: str, worker: str | None) -> None:
    """Give claimed call PENDING_ID back, so the next claim takes it at once (it stays parked)."""
    call(client().release_claim, pending_id, worker=worker)
    click.echo(f"released {pending_id}")


@click.command("cancel")
@click.argument("pending_id")
def cancel(pending_id: str) -> None:
    """Cancel parked call PENDING_ID: the application waiting on it gets an error, nothing is recorded."""
    call(client().cancel_pending, pending_id)
    click.echo(f"cancelled {pending_id}")


@click.command("mcp")
def mcp() -> None:
    """Run the MCP server on stdio (tools list_pending, get_pending, claim_next, answer_pending,
    release_claim, cancel_pending; get_entry and one answer of a sequence: get_entry_answer,
    edit_entry_answer, pin_entry_answer, delete_entry_answer, reorder_entry_answers; fault rules:
    list_faults, add_fault, clear_faults).

    Needs SEMULA_URL (the server's root, like http://127.0.0.1:8080) and SEMULA_TOKEN (role editor,
    scope record; none on a server with auth off).
    """
    from semula.surfaces.mcp_server import run

    run()


COMMANDS = (pending, show, answer, claim, release, cancel, mcp)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)


def render(item: dict[str, Any], *, images_hint: bool = True) -> None:
    """A parked call for a reader: what was asked, what the answer must look like, how to send it."""
    line = f"{item['id']}  project {item['project']}  model {item['model']}  status {item['status']}"
    if item.get("api") not in (None, dialects.CHAT):  # the default API goes without saying
        line += f"  api {item['api']}"
    if (item.get("seq") or 1) > 1:  # the answer becomes answer `seq` of the request's sequence
        line += f"  answer #{item['seq']} of its sequence"
    if item.get("claimed_by"):
        line += f"  claimed by {item['claimed_by']} ({_duration(item['claimed_until'] - time.time())} left)"
    click.echo(line)
    # The conversation view is the same for every API (docs/decisions/0030-dialects.md).
    view = item.get("conversation") or item.get("request") or {}
    click.echo("\nmessages:")
    for message in view.get("messages") or []:
        click.echo(_message_text(message))
    if images_hint and any(not part.remote for part in images.image_parts(view)):
        click.echo(f"  (to look at the images: semula show {item['id']} --save-images DIR)")
    shape = item.get("shape") or {}
    for note in shape.get("notes") or []:
        click.echo(f"\nnote: {note}")
    if shape.get("tools"):
        click.echo("\ntools:")
        for tool in shape["tools"]:
            description = f" - {tool['description']}" if tool.get("description") else ""
            click.echo(f"  {tool['name']}{description}")
            click.echo(f"    parameters: {json.dumps(tool.get('parameters'), ensure_ascii=False)}")
    if shape.get("response_format") is not None:
        click.echo("\nresponse_format (the answer is a JSON object valid against):")
        click.echo("  " + json.dumps(shape["response_format"], ensure_ascii=False))
    skeleton = json.dumps(shape.get("skeleton", {"content": ""}), ensure_ascii=False)
    click.echo(f"\nanswer skeleton:\n  {skeleton}")
    pid, filled = item["id"], shlex.quote(skeleton)
    # Plain text is no answer where the call wants a tool call or a JSON object (response_format).
    structured = shape.get("tools") or shape.get("response_format") is not None
    text = "" if structured else f"semula answer {pid} 'TEXT'   or   "
    click.echo(f"\nanswer with: {text}semula answer {pid} --json {filled}")


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return f"  {message!r}"
    role = message.get("role", "?")
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(_part_text(part) for part in content)
    text = f"  [{role}] {content if content is not None else ''}"
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function", {}) if isinstance(tool_call, dict) else {}
        text += f"\n  [{role} calls] {function.get('name')}({function.get('arguments')})"
    if message.get("tool_call_id"):
        text = text.replace(f"[{role}]", f"[{role} {message['tool_call_id']}]", 1)
    return text


def _part_text(part: Any) -> str:
    # An image is a placeholder with its media type and size (or its URL), never its base64.
    url = images.image_url(part)
    if url is not None:
        return images.describe(url)
    if isinstance(part, dict):
        return str(part.get("text", f"[{part.get('type', 'part')}]"))
    return str(part)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
