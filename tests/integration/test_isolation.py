"""Tenant isolation (hosted mode): workspace A's most privileged token acting on workspace B's
objects gets 404 on every route, and every service method says NotFound. The route matrix is
generated from the app's registered routes, so a new route whose parameters have no row here
fails the test until it gets one.
"""

from __future__ import annotations

import importlib
import inspect
import io
import itertools
import json
import pkgutil
import re
import sqlite3
import time
from types import SimpleNamespace

import psycopg
import pytest

from semula import dialects, service
from semula.core import errors
from semula.core.fingerprint import fingerprint
from semula.core.ids import new_id
from semula.db import POSTGRES_QUERIES, QUERIES, DatabaseError, takes_rows
from semula.service import (
    Principal,
    audit,
    entries,
    pending,
    projects,
    sessions,
    tokens,
    workspaces,
)
from semula.service import replay as replay_service
from semula.service.auth import token_hash
from semula.web import create_app
from semula.web import routes as all_routes
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture
from tests.query_scoping import across_workspaces, named_statements, tenant_tables

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "secret of B"}]}
# How to fill each URL parameter with one of B's objects.
PARAMETERS = {
    "name": "project",
    "pending_id": "pending",
    "entry_id": "entry",
    "token_id": "token",
    "session_id": "session",
    "session": "replay_session",  # a replay session's name, in B's project
    "seq": "seq",  # an answer's number in its entry's sequence
}
# Routes that hold no tenant data at all.
NO_TENANT_DATA = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/static/<path:filename>",
    "/api/v1/openapi.json",
    "/ui/login",
    "/ui/logout",
}
BODIES = {
    "api.update_project": {"max_misses": 7},
    "api_pending.answer": {"content": "from A"},
    "api_entries.edit_entry": {"content": "from A"},
    "api_entries.revert_entry": {"revision": 1},
    "api_entries.edit_answer": {"content": "from A"},
    "api_entries.revert_answer": {"revision": 1},
    "api_entries.reorder_answers": {"order": [1]},
    "api_entries.review_entry": {"status": "rejected"},
    "ui.entry_view": {"action": "rejected"},
    "ui.pending_call": {"kind": "text", "content": "from A"},
    "ui.settings": {"settings": '{"max_misses": 7}'},
}


@pytest.fixture
def world(hosted):  # noqa: F811 - the fixture imported above
    operator, app_store, app_settings = hosted
    b = tenant(operator, "bravo")
    b_project = projects.create(b, {"name": "bee"})
    b_row = projects.get_row(b, "bee")
    # Bound to B's project, and signed in to the dashboard: its session is one of B's objects too.
    b_token = tokens.create(b, {"role": "admin", "project": "bee"})
    answered = pending.park(b, b_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(b, answered, {"content": "B's answer"})["entry_id"]
    other = {**REQUEST, "messages": [{"role": "user", "content": "still parked"}]}
    parked = pending.park(b, b_row, fingerprint(other), other, False)
    projects.create(operator, {"name": "ant"})
    a_token = tokens.create(operator, {"role": "admin"})
    app = create_app(app_settings, app_store)
    signed_in_ui(app.test_client(), b_token["token"])
    [b_session] = sessions.list_sessions(b, b_token["id"])["data"]
    objects = {
        "project": b_project["name"],
        "pending": parked,
        "entry": entry_id,
        "token": b_token["id"],
        "session": b_session["id"],
        "replay_session": "b-session",
        "seq": "1",
    }
    return {
        "operator": operator,
        "b": b,
        "objects": objects,
        "a_token": a_token["token"],
        "a_token_id": a_token["id"],
        "answered": answered,
        "app": app,
        "secrets": [b_project["id"], parked, entry_id, b_token["id"], b_session["id"], "secret of B"],
    }


def routes(app):
    for rule in sorted(all_routes(app).url_map.iter_rules(), key=lambda r: r.rule):
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield rule, method


def signed_in_ui(client, token):
    page = client.get("/ui/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert client.post("/ui/login", data={"token": token, "csrf": csrf}).status_code == 302
    home = client.get("/ui/").get_data(as_text=True)
    return re.search(r'name="csrf" value="([^"]+)"', home).group(1)


def test_every_route_hides_another_workspace(world):
    app, objects = world["app"], world["objects"]
    client = app.test_client()
    headers = {"Authorization": f"Bearer {world['a_token']}"}
    csrf = signed_in_ui(client, world["a_token"])
    checked = 0
    for rule, method in routes(app):
        if rule.rule in NO_TENANT_DATA:
            continue
        unknown = set(rule.arguments) - set(PARAMETERS)
        assert not unknown, (
            f"{method} {rule.rule}: add a row for parameters {unknown} to the isolation matrix"
        )
        url = rule.rule
        for arg in rule.arguments:
            url = re.sub(rf"<(?:\w+:)?{arg}>", objects[PARAMETERS[arg]], url)
        body = BODIES.get(rule.endpoint, {})
        if url.startswith("/ui/"):
            response = client.open(url, method=method, data={**body, "csrf": csrf})
        else:
            response = client.open(
                url, method=method, json=body if method != "GET" else None, headers=headers
            )
        text = response.get_data(as_text=True)
        if rule.arguments:
            assert response.status_code == 404, (
                f"{method} {rule.rule} gave {response.status_code}: {text[:200]}"
            )
        else:
            assert response.status_code < 500, f"{method} {rule.rule} gave {response.status_code}"
        for secret in world["secrets"]:
            # An error may repeat the id the caller sent, and nothing else of B.
            assert secret in url or secret not in text, f"{method} {rule.rule} shows {secret}"
        checked += 1
    assert checked >= 35
    # Nothing of B changed through any of those calls.
    b = world["b"]
    assert pending.get(b, objects["pending"])["status"] == "pending"
    assert entries.get(b, objects["entry"])["review_status"] == "unreviewed"
    assert projects.get(b, "bee")["max_misses"] == 100
    assert [t["revoked"] for t in tokens.list_tokens(b)["data"] if t["id"] == objects["token"]] == [False]
    assert [s["status"] for s in sessions.list_sessions(b, objects["token"])["data"]] == ["active"]


def test_the_proxy_hides_another_workspace(world):
    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {world['a_token']}"}
    for url, kwargs in [
        ("/p/bee/v1/chat/completions", {"json": REQUEST}),
        ("/v1/chat/completions", {"json": REQUEST, "headers": {**headers, "X-Semula-Project": "bee"}}),
    ]:
        kwargs.setdefault("headers", headers)
        r = client.post(url, **kwargs)
        assert r.status_code == 404 and r.json["error"]["code"] == "project_not_found"
    assert client.get("/p/bee/v1/models", headers=headers).status_code == 404


# --- the sweeps: every named statement and every service function, with another tenant's ids ---------
#
# Generated from semula/db/queries/*.sql and the modules of semula/service/, so a new statement or
# function is swept without being listed; a parameter with no way to fill it below fails the sweep
# until it gets one. The caller's own keys (workspace, project, token, and rows it resolved) are A's;
# every id, name, fingerprint or session name of an object is B's. Each must show nothing of B
# (no id or text of B in what it returns) and change nothing of B, or refuse.

KEYS = ("workspace_id", "project_id", "token_id", "session")
MARKS = ("secret of B", "B's answer", "still parked", "resp_bravo")


def b_rows(raw, dialect: str, workspace_id: str, project_id: str | None = None) -> list:
    """Every row of the workspace (of one of its projects: the tables that have project_id)."""
    mark = "?" if dialect == "sqlite" else "%s"
    out = []
    for table in sorted(tenant_tables()):
        columns = table_columns(raw, dialect, table)
        if project_id is not None and "project_id" not in columns:
            continue
        where, params = f"workspace_id = {mark}", [workspace_id]
        if project_id is not None:
            where, params = f"{where} AND project_id = {mark}", [workspace_id, project_id]
        rows = raw.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY 1", params).fetchall()
        out.append((table, sorted(repr(tuple(dict(r).values())) for r in rows)))
    return out


def table_columns(raw, dialect: str, table: str) -> set[str]:
    if dialect == "sqlite":
        return {row[1] for row in raw.execute(f"PRAGMA table_info({table})").fetchall()}
    rows = raw.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table]
    ).fetchall()
    return {row["column_name"] for row in rows}


def shows_b(value, marks) -> str | None:
    text = json.dumps(value, default=str)
    return next((mark for mark in marks if mark in text), None)


@pytest.fixture
def swept(world):
    """The world with one more of each kind of B's rows a statement can reach: a second answer, a
    session's counter, the record-through budget, a dry run, a flight, a call-log row, a response id;
    and B's second project, for the sweep across projects of one workspace."""
    operator, b = world["operator"], world["b"]
    store, objects = operator.store, world["objects"]
    b_ws = b.principal.workspace_id
    b_row = projects.get_row(b, "bee")
    fp = fingerprint(REQUEST)
    keys = {"workspace_id": b_ws, "project_id": b_row["id"], "fingerprint": fp, "now": time.time()}
    store.one(
        "save_answer",
        **keys,
        seq=2,
        response=json.dumps({"choices": [{"message": {"content": "B's answer 2"}}]}),
        chunks=None,
        revision_id=new_id("revision"),
        actor="b",
        summary="",
        prompt_tokens=0,
        completion_tokens=0,
    )
    store.one("count_session_call", **keys, session="b-session", n=1)
    store.run("ensure_upstream_usage", workspace_id=b_ws, project_id=b_row["id"])
    store.run("record_dry_run", **keys, model="gpt-4o", request=json.dumps(REQUEST))
    store.run("claim_flight", **keys, seq=1, holder="b-holder", until=time.time() + 600)
    with store.transaction() as tx:
        tx.many("insert_calls", [calllog_row(b_ws, b_row["id"], objects["entry"])])
    with store.transaction() as tx:
        tx.script(f"UPDATE entries SET response_id = 'resp_bravo' WHERE id = '{objects['entry']}'")
    a_ws = operator.principal.workspace_id
    ant = projects.get_row(operator, "ant")
    other = projects.create(b, {"name": "bee-two"})
    revisions = [r["id"] for r in store.all("list_revisions", entry_id=objects["entry"], workspace_id=b_ws)]
    [b_token] = [t for t in tokens.list_tokens(b)["data"] if t["id"] == objects["token"]]
    return {
        **world,
        "a_keys": {"workspace_id": a_ws, "project_id": ant["id"], "token_id": world["a_token_id"]},
        "b_keys": {"workspace_id": b_ws, "project_id": b_row["id"], "token_id": objects["token"]},
        "sibling_keys": {"workspace_id": b_ws, "project_id": other["id"], "token_id": objects["token"]},
        "b_ids": [
            b_row["id"],
            objects["entry"],
            objects["pending"],
            world["answered"],
            objects["token"],
            objects["session"],
            *revisions,
        ],
        "fingerprint": fp,
        "b_token_name": b_token["name"],
    }


def calllog_row(workspace_id, project_id, entry_id):
    return {
        "id": new_id("call"),
        "workspace_id": workspace_id,
        "project_id": project_id,
        "created_at": time.time(),
        "fingerprint": fingerprint(REQUEST),
        "model": "gpt-4o",
        "stream": 0,
        "outcome": "hit",
        "status": 200,
        "duration_ms": 1.0,
        "entry_id": entry_id,
        "pending_id": None,
        "token_id": None,
        "api": "openai.chat",
        "fault": None,
    }


def statement_values(sql: str, world, keys: dict) -> list[dict]:
    """Every way this sweep fills the statement's parameters: its keys from `keys`, its objects B's."""
    now = time.time()
    fp = world["fingerprint"]
    objects = world["objects"]
    # An INSERT's :id is the new row's (a fresh id); elsewhere it names one of B's rows.
    new_row = re.search(r"VALUES \(:id\b|SELECT :id\b", sql) is not None
    choices = {
        "id": [new_id("entry")] if new_row else world["b_ids"],
        "entry_id": [objects["entry"]],
        "pending_id": [objects["pending"]],
        "fingerprint": [fp],
        "fingerprints": [[fp]] if "ANY(:fingerprints)" in sql else [json.dumps([fp])],
        "response_id": ["resp_bravo"],
        "session": ["b-session"],
        "name": ["bee"],
        "seq": [1, 2],
        "n": [1],
        "number": [1],
        "revision": [1],
        "answers": [0],
        "to": [3],
        "model": ["gpt-4o"],
        "status": [None, "pending"],
        "review_status": ["unreviewed"],
        "pinned": [0],
        "text": [None, "%secret%"],
        "outcome": [None],
        "action": [None],
        "target": [None],
        "after": [None],
        "only_id": [None],
        "before": [None, now + 3600],
        "limit": [100],
        "now": [now],
        "until": [now + 60],
        "since": [0],
        "holder": ["b-holder"],
        "worker": ["w"],
        "max_calls": [100],
        "max_tokens": [None],
        "max_misses": [100],
        "prompt_tokens": [0],
        "completion_tokens": [0],
        "revision_id": ["rev_sweep"],
        "hash": ["hash-sweep"],
        "expires_at": [None],
        "created_at": [now],
        "duration_ms": [1.0],
        "stream": [0],
        "error": ["sweep"],
    }
    names = sorted(set(re.findall(r"(?<![:\w]):(\w+)", sql)))
    filled = {n: [keys[n]] if n in keys else choices.get(n, ["sweep"]) for n in names}
    return [dict(zip(filled, values, strict=True)) for values in itertools.product(*filled.values())]


class _Undo(Exception):
    """Raised to roll a swept statement's transaction back."""


def swept_statements(taking=KEYS) -> list[str]:
    """The statements a sweep runs: those taking one of `taking`; with KEYS, also every statement
    on a tenant table but those that say they cross workspaces (so one that lost its only scoping
    column is swept still)."""
    texts = named_statements()
    across = {name.partition(".")[0] for name, text in texts.items() if across_workspaces(text)}
    tables = tenant_tables()
    out = []
    for name, sql in sorted(QUERIES.items()):
        params = set(re.findall(r"(?<![:\w]):(\w+)", sql))
        on_tenant_table = bool(set(re.findall(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+(\w+)", sql)) & tables)
        if params & set(taking) or (taking == KEYS and on_tenant_table and name not in across):
            out.append(name)
    return out


def sweep_statements(world, keys: dict, marks, changed, taking=KEYS) -> tuple[int, list[str]]:
    """Run each swept statement with `keys` and B's objects, each in a transaction rolled back;
    (statements run, what showed or changed B)."""
    store = world["operator"].store
    queries = POSTGRES_QUERIES if store.dialect == "postgresql" else QUERIES
    with store.transaction() as tx:
        before = changed(tx.raw)
    found, names = [], [n for n in swept_statements(taking) if not takes_rows(queries[n])]
    for name in names:
        sql = queries[name]
        writes = not sql.lstrip().startswith("SELECT")
        for params in statement_values(sql, world, keys):
            try:
                with store.transaction() as tx:
                    cursor = tx._execute(name, params)
                    rows = [dict(r) for r in cursor.fetchall()] if cursor.description else []
                    if (mark := shows_b(rows, marks)) is not None:
                        found.append(f"{name} {params} shows {mark}")
                    if writes and changed(tx.raw) != before:
                        found.append(f"{name} {params} changed B's rows")
                    raise _Undo
            except _Undo:
                pass
            except (DatabaseError, sqlite3.Error, psycopg.Error):
                pass  # refused
    return len(names), found


def test_every_statement_hides_another_workspace(swept):
    store = swept["operator"].store
    b_ws = swept["b_keys"]["workspace_id"]
    marks = (*MARKS, *swept["b_ids"], b_ws)
    count, found = sweep_statements(
        swept, swept["a_keys"], marks, lambda raw: b_rows(raw, store.dialect, b_ws)
    )
    assert count >= 90 and not found, "\n".join(found)


def test_every_statement_keyed_by_a_project_hides_its_siblings(swept):
    """Inside one workspace: a statement given B's other project shows nothing of project bee."""
    store = swept["operator"].store
    keys = {"project_id": swept["sibling_keys"]["project_id"], "session": "b-session"}
    b_ws, bee = swept["b_keys"]["workspace_id"], swept["b_keys"]["project_id"]
    marks = (*MARKS, *[i for i in swept["b_ids"] if i != bee])
    world = {**swept, "b_ids": [i for i in swept["b_ids"] if i != bee]}
    count, found = sweep_statements(
        world,
        {**swept["sibling_keys"], **keys},
        marks,
        lambda raw: b_rows(raw, store.dialect, b_ws, bee),
        taking=("project_id",),
    )
    assert count >= 40 and not found, "\n".join(found)


def test_the_sweep_reaches_bs_rows_with_bs_own_keys(swept):
    """The control: the same statements given B's own keys show B, so the fillers reach real rows."""
    marks = (*MARKS, *swept["b_ids"])
    _, found = sweep_statements(swept, swept["b_keys"], marks, lambda raw: None)
    shown = {line.split(" ", 1)[0] for line in found}
    print(len(shown), sorted(shown))
    assert len(shown) >= 30, " ".join(sorted(shown))


def service_functions():
    """Every public function of semula/service/ that takes a context: what every surface calls."""
    for info in pkgutil.iter_modules(service.__path__):
        module = importlib.import_module(f"semula.service.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            params = list(inspect.signature(fn).parameters)
            if fn.__module__ == module.__name__ and not name.startswith("_") and params[:1] == ["ctx"]:
                yield f"{info.name}.{name}", fn


# How to fill each parameter of a service function: ids and names are B's; rows, calls and
# credentials are the caller's own (what it resolved or holds), made from B's request and fingerprint.
SERVICE_PARAMETERS = {
    "name": lambda w, fn: "bravo" if fn.__module__.endswith("workspaces") else "bee",
    "project": lambda w, fn: w["a_project"] if "dict" in str(param(fn, "project").annotation) else "bee",
    "path_project": lambda w, fn: "bee",
    "header_project": lambda w, fn: None,
    "project_id": lambda w, fn: w["a_keys"]["project_id"],
    "entry_id": lambda w, fn: w["objects"]["entry"],
    "pending_id": lambda w, fn: w["objects"]["pending"],
    "token_id": lambda w, fn: w["objects"]["token"],
    "session_id": lambda w, fn: w["objects"]["session"],
    "session": lambda w, fn: "b-session",
    "response_id": lambda w, fn: "resp_bravo",
    "fingerprint": lambda w, fn: w["fingerprint"],
    "entry": lambda w, fn: w["a_entry"],
    "row": lambda w, fn: (
        w["a_session_row"]
        if fn.__module__.endswith("sessions")
        else w["a_project"]
        if fn.__module__.endswith("faults")
        else w["a_token_row"]
    ),
    "secret": lambda w, fn: sessions.start(w["a"]),
    "hashed": lambda w, fn: token_hash(w["a_token"]),
    "call": lambda w, fn: call_for(w, fn),
    # A kept hit of the caller's own project (what service.hits found), with B's fingerprint.
    "kept": lambda w, fn: SimpleNamespace(
        sequence=(2, "repeat_last"), project=w["a_project"], fingerprint=w["fingerprint"]
    ),
    "seq": lambda w, fn: 1,
    "rule": lambda w, fn: {"kind": "rate_limit", "times": 1},
    "number": lambda w, fn: 1,
    "pinned": lambda w, fn: True,
    "status": lambda w, fn: "rejected",
    "payload": lambda w, fn: {"content": "from A"},
    "body": lambda w, fn: REQUEST,
    "request": lambda w, fn: REQUEST,
    "raw": lambda w, fn: json.dumps(REQUEST).encode(),
    "data": lambda w, fn: {"role": "viewer"},
    "changes": lambda w, fn: {},
    "config": lambda w, fn: {},
    "settings": lambda w, fn: {"ignore_fields": [], "normalize": []},
    "value": lambda w, fn: {"request": REQUEST, "response": {"content": "from A"}},
    "items": lambda w, fn: [],
    "api": lambda w, fn: dialects.CHAT,
    "dialect": lambda w, fn: dialects.get(None),
    "stream": lambda w, fn: False,
    "worker": lambda w, fn: "w",
    "order": lambda w, fn: [1],
    "outcome": lambda w, fn: "hit",
    "field": lambda w, fn: "quota_entries",
    "source": lambda w, fn: io.BytesIO(b"{}"),
    "rules": lambda w, fn: ("", ""),
    "model_id": lambda w, fn: "gpt-4o",
    "req": lambda w, fn: None,
    "recording": lambda w, fn: False,
    "disabled": lambda w, fn: True,
    "at": lambda w, fn: time.time(),
    "started": lambda w, fn: time.time(),
    "resolved_at": lambda w, fn: time.time(),
}


def param(fn, name):
    return inspect.signature(fn).parameters[name]


def call_for(world, fn):
    """A `call` parameter: a proxied call to the caller's own project with B's request (an
    embeddings request where synthetic vectors answer), a flight's callable, or a call-log row's source."""
    annotation = str(param(fn, "call").annotation)
    if "Callable" in annotation:
        return lambda: None
    if "Logged" in annotation:
        return None
    if fn.__module__.endswith("synthetic"):
        body = {"model": "text-embedding-3-small", "input": "secret of B"}
        return replay_service.start(world["a"], world["a_project"], body, dialects.get(dialects.EMBEDDINGS))
    return replay_service.start(world["a"], world["a_project"], REQUEST)


def service_arguments(world, fn) -> dict:
    """Every parameter without a default, and the optional ones that name an object, filled."""
    out = {}
    for name, p in list(inspect.signature(fn).parameters.items())[1:]:
        if p.kind is p.VAR_KEYWORD or (p.default is not p.empty and name not in ("project", "session")):
            continue
        assert name in SERVICE_PARAMETERS, f"{fn.__module__}.{fn.__name__}: add a way to fill {name!r}"
        out[name] = SERVICE_PARAMETERS[name](world, fn)
    return out


@pytest.fixture
def as_a(swept):
    """The sweep's world with A acting through its most privileged token, and A's own rows."""
    operator = swept["operator"]
    a = operator.as_(
        Principal(
            workspace_id=operator.principal.workspace_id,
            role="admin",
            scope="full",
            actor=swept["a_token_id"],
            token_id=swept["a_token_id"],
        )
    )
    ant = projects.get_row(operator, "ant")
    own = {**REQUEST, "messages": [{"role": "user", "content": "A's own"}]}
    parked = pending.park(operator, ant, fingerprint(own), own, False)
    a_entry_id = pending.answer(operator, parked, {"content": "A's answer"})["entry_id"]
    a_entry = operator.store.one("get_entry", id=a_entry_id, workspace_id=operator.principal.workspace_id)
    raw_row = operator.store.one(
        "get_token", id=swept["a_token_id"], workspace_id=operator.principal.workspace_id
    )
    sessions.start(a)
    [a_session_row] = operator.store.all(
        "list_ui_sessions",
        token_id=swept["a_token_id"],
        workspace_id=operator.principal.workspace_id,
        after=None,
        limit=1,
    )
    return {
        **swept,
        "a": a,
        "a_project": ant,
        "a_entry": a_entry,
        "a_token_row": raw_row,
        "a_session_row": a_session_row,
    }


def test_every_service_function_hides_another_workspace(as_a):
    store = as_a["operator"].store
    b_ws = as_a["b_keys"]["workspace_id"]
    # Not "secret of B": the request text is the caller's input here, and a call may echo it.
    marks = (*[m for m in MARKS if m != "secret of B"], *as_a["b_ids"], b_ws)

    def b_now():
        with store.transaction() as tx:
            return b_rows(tx.raw, store.dialect, b_ws)

    before, found, called = b_now(), [], 0
    for name, fn in service_functions():
        called += 1
        try:
            result = fn(as_a["a"], **service_arguments(as_a, fn))
            if hasattr(result, "__next__"):
                result = list(result)
            if callable(getattr(result, "end", None)):
                result.end()  # a flight the caller leads: ended, as its caller would
        except errors.SemulaError:
            continue  # refused
        if (mark := shows_b(result, marks)) is not None:
            found.append(f"{name} shows {mark}")
        if b_now() != before:
            found.append(f"{name} changed B's rows")
            before = b_now()
    assert called >= 90 and not found, "\n".join(found)


def test_workspace_commands_are_the_operators_only(world):
    from semula.service import Principal

    as_token = world["operator"].as_(
        Principal(workspace_id="wsp_default", role="admin", scope="full", actor="tok_x", token_id="tok_x")
    )
    with pytest.raises(errors.Forbidden):
        workspaces.create(as_token, "evil")


def test_project_binding_matrix_inside_one_workspace(world):
    """A token bound to project ant gets 404 for every other project's objects of its own workspace."""
    operator = world["operator"]
    ant_row = projects.get_row(operator, "ant")
    other = projects.create(operator, {"name": "other"})
    other_row = projects.get_row(operator, "other")
    parked = pending.park(operator, other_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(operator, parked, {"content": "x"})["entry_id"]
    parked2 = pending.park(operator, other_row, "v1:other", REQUEST, False)
    bound = tokens.create(operator, {"role": "admin", "project": "ant"})["token"]
    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {bound}"}
    objects = {
        "project": other["name"],
        "pending": parked2,
        "entry": entry_id,
        "token": "tok_nope",
        "session": "ses_nope",
        "replay_session": "ant-session",
        "seq": "1",
    }
    for rule, method in routes(world["app"]):
        if rule.rule in NO_TENANT_DATA or rule.rule.startswith("/ui/") or not rule.arguments:
            continue
        if "token_id" in rule.arguments:
            continue  # token management is workspace-wide: 403 to a bound token (test_auth)
        url = rule.rule
        for arg in rule.arguments:
            url = re.sub(rf"<(?:\w+:)?{arg}>", objects[PARAMETERS[arg]], url)
        body = BODIES.get(rule.endpoint, {})
        r = client.open(url, method=method, json=body if method != "GET" else None, headers=headers)
        assert r.status_code == 404, (
            f"{method} {rule.rule} gave {r.status_code}: {r.get_data(as_text=True)[:200]}"
        )
    assert ant_row["id"] != other_row["id"]
    assert json.dumps(client.get("/api/v1/projects", headers=headers).json).count('"name"') == 1


def test_project_binding_matrix_covers_every_list(world):
    """Every route without an object in its path (the lists, the overview, the audit log) shows a token
    bound to project ant nothing of its workspace's other projects: a 403 `project_bound`, or a
    page that names none of them, their calls, entries, or the workspace's tokens and audit events."""
    operator = world["operator"]
    neighbour = projects.create(operator, {"name": "neighbour-zq"})
    neighbour_row = projects.get_row(operator, "neighbour-zq")
    answered = pending.park(operator, neighbour_row, fingerprint(REQUEST), REQUEST, False)
    entry_id = pending.answer(operator, answered, {"content": "x"})["entry_id"]
    parked = pending.park(operator, neighbour_row, "v1:neighbour", REQUEST, False)
    projects.update(operator, "neighbour-zq", {"max_misses": 9})
    unbound = tokens.create(operator, {"role": "viewer"})
    created = tokens.create(operator, {"role": "admin", "project": "ant"})
    secrets = ["neighbour-zq", neighbour["id"], answered, parked, entry_id, unbound["id"]]
    assert any(s in json.dumps(audit.list_events(operator)) for s in secrets)  # the log does name them

    client = world["app"].test_client()
    headers = {"Authorization": f"Bearer {created['token']}"}
    csrf = signed_in_ui(client, created["token"])
    checked = set()
    for rule, method in routes(world["app"]):
        if rule.rule in NO_TENANT_DATA or rule.arguments or method != "GET":
            continue
        if rule.rule.startswith("/ui/"):
            r = client.get(rule.rule, data={"csrf": csrf})
        else:
            r = client.get(rule.rule, headers=headers)
        text = r.get_data(as_text=True)
        assert r.status_code in (200, 204, 403), f"GET {rule.rule} gave {r.status_code}: {text[:200]}"
        if r.status_code == 403 and not rule.rule.startswith("/ui/"):
            assert r.json["error"]["code"] == "project_bound"
        for secret in secrets:
            assert secret not in text, f"GET {rule.rule} shows {secret} to a token bound to ant"
        checked.add(rule.rule)
    assert {"/api/v1/projects", "/api/v1/pending", "/api/v1/tokens", "/api/v1/audit", "/ui/audit"} <= checked
