"""The dashboard under /ui: people answer parked calls and curate entries (server-rendered, Jinja).

Everything goes through the service layer with the API's role rules. The cookie keeps a dashboard
session's secret, never the token, and the server can end that session (semula.service.sessions);
every form carries a CSRF token checked on POST. Prompts and answers are untrusted text: Jinja
autoescaping is on for every template.
"""

from __future__ import annotations

import difflib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from flask import Blueprint, abort, flash, g, redirect, render_template, request, session, url_for

from semula.core import errors, jsonio
from semula.service import (
    LOCAL,
    Context,
    audit,
    calllog,
    entries,
    faults,
    overview,
    pending,
    projects,
    sessions,
)
from semula.service.auth import principal_for_hash, token_hash
from semula.service.calllog import OUTCOMES
from semula.web import current_extension

ui = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates")


def anonymous() -> Context:
    """A context with no caller yet: for signing in and out, before the session is known."""
    ext = current_extension()
    return Context(
        ext["store"],
        ext["settings"],
        None,  # type: ignore[arg-type]
        ext["parking"].release,
        versions=ext["versions"],
    )


def ui_context() -> Context:
    ctx = g.get("ui_ctx")
    if ctx is None:
        base = anonymous()
        if not base.settings.auth:
            ctx = base.as_(LOCAL)
        elif "sid" in session:
            ctx = base.as_(sessions.authenticate(base, session["sid"]))
        else:
            raise errors.Unauthorized("Sign in first.")
        g.ui_ctx = ctx
    return ctx


def page(view: Callable[..., Any]) -> Callable[..., Any]:
    """Sign-in, CSRF and service errors for every dashboard page."""

    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if request.method == "POST":
            check_csrf()
        try:
            ui_context()
        except errors.Unauthorized:
            session.pop("sid", None)
            return redirect(url_for("ui.login", next=request.path))
        try:
            return view(*args, **kwargs)
        except errors.SemulaError as exc:
            return render_template("ui/error.html", error=exc), exc.status

    return wrapper


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(24)
    return session["csrf"]


def check_csrf() -> None:
    sent = request.form.get("csrf", "")
    if not sent or not hmac.compare_digest(sent, session.get("csrf", "")):
        abort(400, "The form's CSRF token is missing or wrong; reload the page and try again.")


@ui.app_context_processor
def helpers() -> dict[str, Any]:
    def can(role: str) -> bool:
        ctx = g.get("ui_ctx")
        if ctx is None:
            return False
        p = ctx.principal
        return ("viewer", "editor", "admin").index(p.role) >= ("viewer", "editor", "admin").index(role) and (
            role == "viewer" or p.scope != "replay"
        )

    def bound() -> bool:
        ctx = g.get("ui_ctx")
        return ctx is not None and ctx.principal.project_id is not None

    return {
        "csrf_token": csrf_token,
        "can": can,
        "bound": bound,
        "pretty": lambda v: json.dumps(v, indent=2, ensure_ascii=False),
    }


@ui.app_template_filter("when")
def when(value: float | int | None) -> str:
    """A Unix time as UTC, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value)) if value else ""


@ui.route("/login", methods=["GET", "POST"])
def login() -> Any:
    error = None
    if request.method == "POST":
        check_csrf()
        secret = request.form.get("token", "").strip()
        base = anonymous()
        try:
            principal = principal_for_hash(base, token_hash(secret))
        except errors.Unauthorized:
            error = "That token is unknown or revoked."
        else:
            if "sid" in session:
                sessions.sign_out(base, session["sid"])
            session.clear()
            session["sid"] = sessions.start(base.as_(principal))
            target = request.args.get("next", "")
            return redirect(target if target.startswith("/ui/") else url_for("ui.home"))
    return render_template("ui/login.html", error=error), 401 if error else 200


@ui.post("/logout")
def logout() -> Any:
    """End the session on the server too: a copy of the cookie stops working with this one."""
    check_csrf()
    if "sid" in session:
        sessions.sign_out(anonymous(), session["sid"])
    session.clear()
    return redirect(url_for("ui.login"))


@ui.get("/")
@page
def home() -> Any:
    ctx = ui_context()
    return render_template(
        "ui/home.html", projects=overview.overview(ctx), hit_share=ctx.settings.call_log_hits
    )


@ui.get("/p/<name>/pending")
@page
def queue(name: str) -> Any:
    ctx = ui_context()
    project = projects.get(ctx, name)
    calls = pending.list_pending(ctx, project=name, limit=200)["data"]
    template = "ui/_queue.html" if request.args.get("fragment") else "ui/queue.html"
    return render_template(template, project=project, calls=calls)


@ui.route("/pending/<pending_id>", methods=["GET", "POST"])
@page
def pending_call(pending_id: str) -> Any:
    ctx = ui_context()
    call = pending.get(ctx, pending_id)
    form: dict[str, Any] = {"kind": "text", "content": "", "tool_name": "", "arguments": "", "json": ""}
    field_errors: dict[str, str] = {}
    skeleton = call["shape"]["skeleton"]
    if skeleton.get("tool_calls"):
        form.update(
            kind="tool",
            tool_name=skeleton["tool_calls"][0]["name"],
            arguments=json.dumps(skeleton["tool_calls"][0]["arguments"], indent=2),
        )
    elif skeleton.get("content"):
        form["content"] = skeleton["content"]
    elif call["shape"]["response_format"] is not None:
        # A JSON output's skeleton is the object itself; the text box takes it as JSON text.
        form["content"] = json.dumps(skeleton, indent=2)
    form["json"] = json.dumps(skeleton, indent=2)
    if request.method == "POST":
        form.update({k: request.form.get(k, "") for k in form})
        try:
            payload = answer_payload(form)
            pending.answer(ctx, pending_id, payload, actor="human", summary="answered in the dashboard")
        except errors.InvalidAnswer as exc:
            field_errors[field_for(exc.param, form["kind"])] = exc.message
        except errors.BadRequest as exc:
            field_errors[form["kind"] if form["kind"] == "json" else "arguments"] = exc.message
        else:
            flash(f"Answered {pending_id}.")
            return redirect(url_for("ui.queue", name=call["project"]))
    status = 422 if field_errors else 200
    return render_template("ui/pending.html", call=call, form=form, errors=field_errors), status


def answer_payload(form: dict[str, Any]) -> Any:
    """The answer payload a form describes: text, one tool call, or raw JSON."""
    if form["kind"] == "json":
        return jsonio.loads(form["json"], "This answer")
    if form["kind"] == "tool":
        arguments = jsonio.loads(form["arguments"] or "{}", "The arguments")
        payload: dict[str, Any] = {"tool_calls": [{"name": form["tool_name"], "arguments": arguments}]}
        if form["content"].strip():
            payload["content"] = form["content"]
        return payload
    return {"content": form["content"]}


def field_for(param: str | None, kind: str) -> str:
    """Which form field an answer error's param points at."""
    if kind == "json" or not param:
        return "json" if kind == "json" else "general"
    if re.fullmatch(r"tool_calls\[\d+\]\.name", param):
        return "tool_name"
    if param.startswith("tool_calls"):
        return "arguments"
    return "content"


@ui.post("/pending/<pending_id>/cancel")
@page
def cancel_call(pending_id: str) -> Any:
    call = pending.cancel(ui_context(), pending_id)
    flash(f"Cancelled {pending_id}.")
    return redirect(url_for("ui.queue", name=call["project"]))


@ui.route("/p/<name>/settings", methods=["GET", "POST"])
@page
def settings(name: str) -> Any:
    ctx = ui_context()
    project = projects.get(ctx, name)
    error = None
    if request.method == "POST":
        try:
            changes = jsonio.loads(request.form.get("settings", "{}"), "The settings")
            project = projects.update(ctx, name, changes)
            flash("Settings saved.")
        except errors.SemulaError as exc:
            error = exc
    editable = {k: v for k, v in project.items() if k in projects.DEFAULTS}
    rules = faults.list_rules(ctx, name)["data"] if can_see_faults(ctx) else None
    return render_template(
        "ui/settings.html", project=project, editable=editable, error=error, rules=rules
    ), (error.status if error else 200)


def can_see_faults(ctx: Context) -> bool:
    return ctx.principal.scope != "replay"


@ui.post("/p/<name>/faults")
@page
def fault_rules(name: str) -> Any:
    """Add a fault rule (JSON) or clear the rules (all, or the one at `index`) of a project."""
    ctx = ui_context()
    if request.form.get("action") == "add":
        faults.add(ctx, name, jsonio.loads(request.form.get("rule", "{}"), "The rule"))
        flash("Fault rule added.")
    else:
        index = request.form.get("index")
        faults.clear(ctx, name, index=int(index) if index and index.isdigit() else None)
        flash("Fault rule removed." if index else "Fault rules cleared.")
    return redirect(url_for("ui.settings", name=name))


@ui.get("/audit")
@page
def audit_log() -> Any:
    events = audit.list_events(ui_context(), action=request.args.get("action") or None, limit=200)["data"]
    return render_template("ui/audit.html", events=events, action=request.args.get("action", ""))


@ui.get("/p/<name>/entries")
@page
def entries_list(name: str) -> Any:
    ctx = ui_context()
    project = projects.get(ctx, name)
    args = request.args
    pinned = {"yes": True, "no": False}.get(args.get("pinned", ""))
    listed = entries.list_entries(
        ctx,
        name,
        model=args.get("model") or None,
        text=args.get("text") or None,
        review_status=args.get("status") or None,
        pinned=pinned,
        limit=200,
    )
    return render_template("ui/entries.html", project=project, entries=listed["data"], args=args)


@ui.route("/entries/<entry_id>", methods=["GET", "POST"])
@ui.route("/entries/<entry_id>/answers/<int:seq>", methods=["GET", "POST"])
@page
def entry_view(entry_id: str, seq: int = 1) -> Any:
    """An entry, showing answer `seq` of its sequence (1: the entry's own page) with that answer's
    revisions; editors edit, revert or pin that answer, and move or delete any answer of the sequence."""
    ctx = ui_context()
    entry = entries.get(ctx, entry_id)
    answer = entries.get_answer(ctx, entry_id, seq)
    here = url_for("ui.entry_view", entry_id=entry_id, **({"seq": seq} if seq > 1 else {}))
    error = None
    edited = json.dumps(answer["answer"] or answer["response"], indent=2, ensure_ascii=False)
    if request.method == "POST":
        action = request.form.get("action")
        try:
            if action == "edit":
                edited = request.form.get("answer", "")
                try:
                    payload = jsonio.loads(edited, "The answer")
                except errors.BadRequest:
                    payload = {"content": edited}  # plain text is a text answer
                entries.edit_answer(
                    ctx,
                    entry_id,
                    seq,
                    {"message": payload} if isinstance(payload, dict) and "role" in payload else payload,
                    summary=request.form.get("summary", "") or "edited in the dashboard",
                )
            elif action in ("pin", "unpin"):
                entries.pin_answer(ctx, entry_id, seq, action == "pin")
            elif action in ("approved", "rejected", "unreviewed"):
                entries.review(ctx, entry_id, action)
            elif action == "revert":
                entries.revert_answer(ctx, entry_id, seq, _form_number("number"))
            elif action in ("up", "down", "delete_answer"):
                _rearrange(ctx, entry, action, _form_number("seq"))
                here = url_for("ui.entry_view", entry_id=entry_id)
            elif action == "delete":
                entries.delete(ctx, entry_id)
                flash(f"Deleted {entry_id}.")
                return redirect(url_for("ui.entries_list", name=entry["project"]))
            else:
                raise errors.BadRequest("Unknown action.")
        except errors.SemulaError as exc:
            error = exc
        else:
            flash("Saved.")
            return redirect(here)
    diff = revision_diff(answer["revisions"], request.args.get("a"), request.args.get("b"))
    page_ = render_template(
        "ui/entry.html", entry=entry, answer=answer, error=error, edited=edited, diff=diff
    )
    return page_, (error.status if error else 200)


def _form_number(name: str) -> int:
    """A whole number from the posted form (a revision, an answer's place); 400 on anything else."""
    raw = request.form.get(name, "0") or "0"
    if not raw.isascii() or not raw.isdigit():
        raise errors.BadRequest(f"{name} must be a whole number.", param=name)
    return int(raw)


def _rearrange(ctx: Context, entry: dict[str, Any], action: str, seq: int) -> None:
    """Move answer `seq` one place up or down, or delete it."""
    if action == "delete_answer":
        entries.delete_answer(ctx, entry["id"], seq)
        return
    order = list(range(1, entry["answers"] + 1))
    other = seq - 1 if action == "up" else seq + 1
    if seq not in order or other not in order:
        raise errors.BadRequest(f"Answer {seq} cannot move {action}.", param="seq")
    order[seq - 1], order[other - 1] = other, seq
    entries.reorder_answers(ctx, entry["id"], order)


def revision_diff(revisions: list[dict[str, Any]], a: str | None, b: str | None) -> dict[str, Any] | None:
    """A unified diff between two revisions' responses (default: the last two)."""
    if len(revisions) < 2:
        return None
    by_number = {str(r["number"]): r for r in revisions}
    old = by_number.get(a or "", revisions[-2])
    new = by_number.get(b or "", revisions[-1])

    def lines(revision: dict[str, Any]) -> list[str]:
        return json.dumps(
            revision["response"].get("choices") or revision["chunks"], indent=2, ensure_ascii=False
        ).splitlines()

    text = difflib.unified_diff(
        lines(old), lines(new), f"revision {old['number']}", f"revision {new['number']}", lineterm=""
    )
    return {"a": old["number"], "b": new["number"], "lines": list(text)}


@ui.get("/p/<name>/calls")
@page
def call_log(name: str) -> Any:
    ctx = ui_context()
    project = projects.get(ctx, name)
    outcome = request.args.get("outcome") or None
    listed = calllog.list_calls(ctx, name, outcome=outcome, limit=200)
    return render_template(
        "ui/calls.html",
        project=project,
        calls=listed["data"],
        outcome=outcome or "",
        outcomes=OUTCOMES,
        hit_share=ctx.settings.call_log_hits,
    )
