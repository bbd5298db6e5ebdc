"""Operator commands for entries, bundles, the audit log and retention, on the local database.

`semula entries P`, `semula entry show|edit|revert|pin|unpin|approve|reject|delete`,
`semula entry answer show|edit|revert|pin|unpin|delete|reorder` (one answer of a sequence),
`semula export P`, `semula import P FILE`, `semula audit`, `semula prune-logs`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

import click

from semula.core import bundle_format
from semula.core.errors import NotFound
from semula.surfaces.cli import emit, local_context

# Below this size a bundle imports in a blink; a progress bar would only flicker.
PROGRESS_BYTES = 1 << 20


@click.command("entries")
@click.argument("project")
@click.option("--model", default=None, help="Only entries recorded for this model.")
@click.option("--text", default=None, help="Only entries whose request or response contains this text.")
@click.option(
    "--status",
    "review_status",
    type=click.Choice(["unreviewed", "approved", "rejected"]),
    default=None,
    help="Only entries with this review status.",
)
@click.option("--pinned/--unpinned", default=None, help="Only pinned (or only unpinned) entries.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most this many entries."
)
@click.option("--after", default=None, help="Continue after this entry id (the last of the previous page).")
@click.option("--json", "as_json", is_flag=True, help="Print the list object as JSON.")
def entries_command(
    project: str,
    model: str | None,
    text: str | None,
    review_status: str | None,
    pinned: bool | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List PROJECT's entries, newest first: id, review status, pin, model, revision, prompt."""
    from semula.service import entries

    with local_context(read_only=True) as ctx:
        out = entries.list_entries(
            ctx,
            project,
            model=model,
            text=text,
            review_status=review_status,
            pinned=pinned,
            after=after,
            limit=limit,
        )
    if as_json:
        emit(out)
        return
    for e in out["data"]:
        pin = "pinned" if e["pinned"] else "-"
        click.echo(
            f"{e['id']}\t{e['review_status']}\t{pin}\t{e['model']}\tr{e['revision']}\t{e['preview']['prompt']}"
        )
    if out["has_more"]:
        click.echo(f"(more: --after {out['data'][-1]['id']})", err=True)


@click.group("entry")
def entry() -> None:
    """Show, edit, revert, pin, review or delete one entry (operator, on the local database)."""


def _entry_action(name: str, help_text: str, action: Callable[[Any, str], dict[str, Any]]) -> None:
    @entry.command(name, help=help_text)
    @click.argument("entry_id")
    def command(entry_id: str) -> None:
        with local_context() as ctx:
            emit(action(ctx, entry_id))


@entry.command("show")
@click.argument("entry_id")
def entry_show(entry_id: str) -> None:
    """Show ENTRY_ID in full with its revisions."""
    from semula.service import entries

    with local_context(read_only=True) as ctx:
        emit(entries.get(ctx, entry_id))


def _read_answer(content: str | None, path: str | None) -> Any:
    """--content is plain text; a file (or stdin) holds an answer object as JSON, or plain text."""
    if content is not None:
        return {"content": content}
    with click.open_file(path or "-", "r", encoding="utf-8") as f:
        text = f.read()
    try:
        value = json.loads(text)
    except ValueError:
        return {"content": text.strip()}
    return value if isinstance(value, dict) else {"content": text.strip()}


ANSWER_FILE_HELP = (
    "A file holding the answer: JSON in any answer form ({content}, {tool_calls}, {message}, "
    "a chat.completion) or plain text. Default: standard input."
)


@entry.command("edit")
@click.argument("entry_id")
@click.option("--content", default=None, help="The new reply text.")
@click.option("--file", "path", default=None, help=ANSWER_FILE_HELP)
@click.option("--summary", default="", help="What changed and why, kept with the revision.")
def entry_edit(entry_id: str, content: str | None, path: str | None, summary: str) -> None:
    """Replace ENTRY_ID's response (a new revision by a human), validated against its request."""
    from semula.service import entries

    payload = _read_answer(content, path)
    with local_context() as ctx:
        emit(entries.edit(ctx, entry_id, payload, summary=summary))


@entry.command("revert")
@click.argument("entry_id")
@click.argument("revision", type=click.IntRange(1))
@click.option("--summary", default="", help="Why, kept with the new revision.")
def entry_revert(entry_id: str, revision: int, summary: str) -> None:
    """Make REVISION's response current again (as a new revision)."""
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.revert(ctx, entry_id, revision, summary=summary))


def _pin(ctx: Any, entry_id: str) -> dict[str, Any]:
    from semula.service import entries

    return entries.set_pinned(ctx, entry_id, True)


def _unpin(ctx: Any, entry_id: str) -> dict[str, Any]:
    from semula.service import entries

    return entries.set_pinned(ctx, entry_id, False)


def _reviewer(status: str) -> Callable[[Any, str], dict[str, Any]]:
    def act(ctx: Any, entry_id: str) -> dict[str, Any]:
        from semula.service import entries

        return entries.review(ctx, entry_id, status)

    return act


_entry_action("pin", "Pin ENTRY_ID: imports and re-recording leave it alone.", _pin)
_entry_action("unpin", "Unpin ENTRY_ID.", _unpin)
_entry_action("approve", "Mark ENTRY_ID approved.", _reviewer("approved"))
_entry_action(
    "reject",
    "Mark ENTRY_ID rejected: it stops replaying (in record mode it parks again).",
    _reviewer("rejected"),
)
_entry_action("unreview", "Mark ENTRY_ID unreviewed again.", _reviewer("unreviewed"))


@entry.command("delete")
@click.argument("entry_id")
@click.confirmation_option(prompt="Delete this entry and all its revisions?")
def entry_delete(entry_id: str) -> None:
    """Delete ENTRY_ID and its revisions; its request misses again."""
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.delete(ctx, entry_id))


@entry.group("answer")
def answer() -> None:
    """Show, edit, revert, pin, delete or reorder one answer of an entry's sequence (answer SEQ is what
    the SEQ-th identical call of a replay session gets)."""


@answer.command("show")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
def answer_show(entry_id: str, seq: int) -> None:
    """Show answer SEQ of ENTRY_ID with its revisions."""
    from semula.service import entries

    with local_context(read_only=True) as ctx:
        emit(entries.get_answer(ctx, entry_id, seq))


@answer.command("edit")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
@click.option("--content", default=None, help="The new reply text.")
@click.option("--file", "path", default=None, help=ANSWER_FILE_HELP)
@click.option("--summary", default="", help="What changed and why, kept with the answer's revision.")
def answer_edit(entry_id: str, seq: int, content: str | None, path: str | None, summary: str) -> None:
    """Replace answer SEQ of ENTRY_ID (a new revision of it, by a human), validated against the request."""
    from semula.service import entries

    payload = _read_answer(content, path)
    with local_context() as ctx:
        emit(entries.edit_answer(ctx, entry_id, seq, payload, summary=summary))


@answer.command("revert")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
@click.argument("revision", type=click.IntRange(1))
@click.option("--summary", default="", help="Why, kept with the new revision.")
def answer_revert(entry_id: str, seq: int, revision: int, summary: str) -> None:
    """Make REVISION of answer SEQ current again (as a new revision of that answer)."""
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.revert_answer(ctx, entry_id, seq, revision, summary=summary))


def _pin_answer(entry_id: str, seq: int, pinned: bool) -> None:
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.pin_answer(ctx, entry_id, seq, pinned))


@answer.command("pin")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
def answer_pin(entry_id: str, seq: int) -> None:
    """Pin answer SEQ of ENTRY_ID: imports and re-recording leave it alone (answer 1's pin is the entry's)."""
    _pin_answer(entry_id, seq, True)


@answer.command("unpin")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
def answer_unpin(entry_id: str, seq: int) -> None:
    """Unpin answer SEQ of ENTRY_ID."""
    _pin_answer(entry_id, seq, False)


@answer.command("delete")
@click.argument("entry_id")
@click.argument("seq", type=click.IntRange(1))
@click.confirmation_option(prompt="Delete this answer and its revisions?")
def answer_delete(entry_id: str, seq: int) -> None:
    """Delete answer SEQ of ENTRY_ID and its revisions; the answers after it move up one."""
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.delete_answer(ctx, entry_id, seq))


@answer.command("reorder")
@click.argument("entry_id")
@click.argument("order", nargs=-1, required=True, type=click.IntRange(1))
def answer_reorder(entry_id: str, order: tuple[int, ...]) -> None:
    """Put ENTRY_ID's answers in a new ORDER: every answer's number once, as they are to replay
    (`3 1 2` makes answer 3 the first)."""
    from semula.service import entries

    with local_context() as ctx:
        emit(entries.reorder_answers(ctx, entry_id, list(order)))


@click.command("export")
@click.argument("project", required=False)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the project's stored entries or settings hold anything shaped like a credential "
    "(reported by path on standard error; the bundle is written redacted either way).",
)
@click.option(
    "--check-file",
    "check_file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    default=None,
    help="Check an existing bundle file (or - for standard input) instead of exporting.",
)
def export_command(project: str | None, check: bool, check_file: str | None) -> None:
    """Write PROJECT's bundle to standard output (semula export P > bundle.json)."""
    from semula.service import bundles

    if check_file is not None:
        if project is not None:
            raise click.UsageError("give a PROJECT to export or --check-file, not both")
        with click.open_file(check_file, "rb") as source, local_context(read_only=True) as ctx:
            _report_secrets(*bundle_format.find_secrets(source, ctx.settings.secrets()), name=check_file)
        click.echo(f"{check_file}: nothing shaped like a credential", err=True)
        return
    if project is None:
        raise click.UsageError("give the PROJECT to export (or --check-file FILE)")
    out = sys.stdout.buffer
    with local_context(read_only=True) as ctx:
        for piece in bundles.export_bundle(ctx, project):
            out.write(piece)
        out.flush()
        if not check:
            return
        # The entries as stored: the export above redacted their values, so checking it would only
        # ever find credentials used as keys.
        found = bundles.find_stored_secrets(ctx, project)
    _report_secrets(*found, name=f"project {project}'s stored entries")


def _report_secrets(found: list[str], total: int, *, name: str) -> None:
    if not total:
        return
    strings = "1 string" if total == 1 else f"{total} strings"
    verb = "hold" if name.endswith("entries") else "holds"
    click.echo(f"{name} {verb} {strings} shaped like a credential:", err=True)
    for path in found:
        click.echo(f"  {path}", err=True)
    if total > len(found):
        click.echo(f"  … and {total - len(found)} more", err=True)
    raise SystemExit(1)


@click.command("import")
@click.argument("project")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--progress/--no-progress", default=None, help="Show a progress bar (default: on large files).")
def import_command(project: str, bundle: str, progress: bool | None) -> None:
    """Import BUNDLE (a file, or - for standard input) into PROJECT; print the report.

    PROJECT must exist (semula project create). All or nothing: a malformed bundle leaves the
    project as it was. Entries are matched by fingerprint, pinned entries are left alone, and
    operator settings are reset to defaults (mode record, record-through and the answerer off); the
    report's settings_changed lists every setting the import changed.
    """
    from semula.service import bundles, projects

    size = os.path.getsize(bundle) if bundle != "-" else 0
    show = progress if progress is not None else size >= PROGRESS_BYTES
    with click.open_file(bundle, "rb") as source, local_context() as ctx:
        try:
            projects.get_row(ctx, project)
        except NotFound:
            raise click.ClickException(
                f"No project named {project!r}: create it first (semula project create {project}), then "
                "import into it."
            ) from None
        if not show:
            emit(bundles.import_bundle(ctx, project, source))
            return
        emit(_import_with_progress(ctx, project, source, size))


def _import_with_progress(ctx: Any, project: str, source: IO[bytes], size: int) -> dict[str, Any]:
    from semula.service import bundles

    bars: dict[str, Any] = {}

    def progress(stage: str, amount: int, total: int | None) -> None:
        bar = bars.get(stage)
        if bar is None:
            for other in bars.values():
                other.render_finish()
            label = "reading and checking" if stage == "read" else "writing entries"
            length = total if total is not None else size or None
            bar = bars[stage] = click.progressbar(length=length, label=label, file=sys.stderr)
            bar.__enter__()
        bar.update(amount)

    try:
        report = bundles.import_bundle(ctx, project, source, progress=progress)
    finally:
        for bar in bars.values():
            bar.__exit__(None, None, None)
    return report


@click.command("audit")
@click.option("--action", default=None, help="Only this action, e.g. entry.edit or project.import.")
@click.option("--target", default=None, help="Only this target: a project name, entry or token id.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most this many events."
)
@click.option("--before", default=None, help="Continue before this audit id (the last of the previous page).")
@click.option("--json", "as_json", is_flag=True, help="Print the list object as JSON.")
def audit_command(
    action: str | None, target: str | None, limit: int, before: str | None, as_json: bool
) -> None:
    """List the audit log, newest first: time, actor, action, target, changed fields (never values)."""
    import time

    from semula.service import audit

    with local_context(read_only=True) as ctx:
        out = audit.list_events(ctx, action=action, target=target, before=before, limit=limit)
    if as_json:
        emit(out)
        return
    for event in out["data"]:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["created"]))
        fields = ",".join(event["fields"]) or "-"
        click.echo(f"{when}\t{event['actor']}\t{event['action']}\t{event['target'] or '-'}\t{fields}")


@click.command("prune-logs")
@click.option(
    "--days",
    type=click.IntRange(1, 3650),
    default=None,
    help="Keep this many days of call log (default SEMULA_LOG_RETENTION_DAYS, 14).",
)
@click.option(
    "--session-days",
    type=click.IntRange(1, 3650),
    default=None,
    help="Delete the counters of replay sessions unused this many days "
    "(default SEMULA_SESSION_RETENTION_DAYS, 30).",
)
def prune_logs_command(days: int | None, session_days: int | None) -> None:
    """Delete call-log rows older than the retention period, and the counters of replay sessions
    unused for theirs, in small batches."""
    from semula.service import retention

    with local_context() as ctx:
        days = days or ctx.settings.log_retention_days
        session_days = session_days or ctx.settings.session_retention_days
        deleted = retention.prune_call_log(ctx.store, days)
        counters = retention.prune_session_counters(ctx.store, session_days)
    click.echo(f"deleted {deleted} call-log row(s) older than {days} day(s)")
    click.echo(f"deleted {counters} session counter(s) of sessions unused for {session_days} day(s)")


COMMANDS = (entries_command, entry, export_command, import_command, audit_command, prune_logs_command)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
