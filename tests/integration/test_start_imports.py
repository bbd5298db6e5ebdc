"""What a start imports: `semula replay` and every worker build the app before their first request, and
the modules only some requests need come with the first of those (decision 0062)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.bundle_helpers import write_bundle

ROOT = Path(__file__).resolve().parents[2]
HELLO = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello"}]}

# Not needed before the first replay hit: JSON Schema (a schema to check), HTTP clients (the agent
# commands, record-through through a proxy), WebSockets, and the REST API's, dashboard's and OpenAPI's
# modules (a request that is not an LLM call).
DEFERRED = (
    "jsonschema",
    "referencing",
    "requests",
    "urllib3",
    "websockets",
    "semula.web.api",
    "semula.web.api_entries",
    "semula.web.api_pending",
    "semula.web.ui",
    "semula.web.openapi",
    "apispec",
)


def _imported(tmp_path: Path, after: str = "") -> dict[str, bool]:
    """Which of DEFERRED a fresh process holds once it imported the CLI and built `semula replay`'s app
    (then ran `after`, with `app` and `client` at hand)."""
    script = textwrap.dedent(
        f"""
        import json, sys
        import semula.surfaces.cli
        from semula.surfaces import replay_server
        from semula.web import create_app
        app = create_app(replay_server.replay_settings({str(tmp_path)!r}))
        client = app.test_client()
        """
    )
    script += textwrap.dedent(after)
    script += f"\nprint(json.dumps({{m: m in sys.modules for m in {DEFERRED!r}}}))\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_the_app_is_built_without_the_modules_a_hit_does_not_need(tmp_path):
    assert _imported(tmp_path) == dict.fromkeys(DEFERRED, False)


def test_a_replay_hit_while_the_bundle_loads_imports_none_of_them(tmp_path):
    (tmp_path / "source").mkdir()
    bundle = tmp_path / "source" / "llm.json"
    write_bundle(bundle, [(HELLO, {"content": "Hello there!"})])
    # As `semula replay` starts (replay_server.serve): the hit is answered ahead of the import.
    after = f"""
        from pathlib import Path
        from werkzeug.test import Client
        from semula.migrate import migrate
        from semula.service import CLI, Context, projects
        from semula.surfaces.replay_loading import Loading
        store = app.extensions["semula"]["store"]
        migrate(store)
        ctx = Context(store, app.extensions["semula"]["settings"], CLI)
        projects.create(ctx, {{"name": "default"}})
        loading = Loading(ctx, "default", Path({str(bundle)!r}), {{"mode": "replay", "record_timeout": 300}})
        client = Client(loading.gate(create_app(ctx.settings, loading.store)))
        loading.start(on_failure=lambda: None)
        r = client.post("/p/default/v1/chat/completions", json={HELLO!r})
        assert r.status_code == 200 and r.json["choices"][0]["message"]["content"] == "Hello there!", r.data
        loading.stop()
        loading.check()
        """
    assert _imported(tmp_path, after) == dict.fromkeys(DEFERRED, False)


def test_a_rest_request_registers_the_routes_first(tmp_path):
    after = """
        from semula.migrate import migrate
        migrate(app.extensions["semula"]["store"])
        r = client.get("/api/v1/openapi.json")
        assert r.status_code == 200 and "/api/v1/projects" in r.get_json()["paths"], r.status_code
        assert client.get("/ui/login").status_code == 200
        assert any(rule.rule == "/api/v1/projects" for rule in app.url_map.iter_rules())
        """
    imported = _imported(tmp_path, after)
    assert imported["semula.web.api"] and imported["semula.web.openapi"] and imported["semula.web.ui"]


def test_a_tool_schema_imports_jsonschema_when_it_is_checked(tmp_path):
    after = """
        from semula.core import chat_requests
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        chat_requests.check({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]})
        """
    assert _imported(tmp_path, after)["jsonschema"]
