"""Capture what the real coding agents send: run one against a small fake provider and keep its requests.

    python -m tests.agents.capture claude-code|codex|gemini-cli [--runs 2] [--out tests/data/agents]

The fake provider listens on 127.0.0.1 and answers like the agent's API would, with fixed ids: the first
model call that offers the agent's file-listing tool gets a call of that tool, every other call a short
text. So the agent runs one tool and finishes, and whatever differs between two runs' requests comes from
the agent, not the server. Every request is written as JSON (method, path, query, headers, body) under
OUT/AGENT/runN/, secrets replaced by "<redacted>" and the server's port by PORT. The agents are the ones
`make agents` installs (AGENTS_PREFIX, default /opt/semula-agents); the task runs in a fixed directory
(TASK_DIR) with a fixed HOME, both made afresh for each run, so the paths in the requests are the same
on every machine. Nothing but 127.0.0.1 is given to the agents; their telemetry is turned off.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

AGENTS_PREFIX = Path(os.environ.get("SEMULA_AGENTS_PREFIX", "/opt/semula-agents"))
# One pair of directories for each test process (its pytest-xdist worker and process id; the fixed pair
# outside pytest, where the captured requests' paths must be the same on every machine), so that tests
# running the agents in parallel do not share them, nor do two test sessions on one machine (each has a
# gw0: one's fresh_dirs() deleted the other's running agent's directories).
_WORKER = f"{os.environ.get('PYTEST_XDIST_WORKER', '')}-{os.getpid()}" if "pytest" in sys.modules else ""
TASK_DIR = Path(f"/tmp/semula-agent-task{_WORKER}")
HOME_DIR = Path(f"/tmp/semula-agent-home{_WORKER}")
if _WORKER:
    atexit.register(lambda: [shutil.rmtree(path, ignore_errors=True) for path in (TASK_DIR, HOME_DIR)])
PROMPT = "List the files in this directory with your shell or file-listing tool, then reply with their names."
FILES = {"notes.txt": "remember the milk\n", "hello.py": "print('hello')\n"}
FINAL_TEXT = "The files are hello.py and notes.txt."
SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "cookie"}
KEY = "sk-capture-not-a-real-key"


def listing_call(tools: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(tool name, arguments) of a call that lists the task directory, from the tools a request offers
    (name -> JSON schema of its parameters), or None when it offers none of them."""
    for name in ("Bash", "exec_command", "shell_command", "shell", "list_directory", "LS", "Glob", "exec"):
        schema = tools.get(name)
        if schema is None:
            continue
        props = schema.get("properties", {})
        if name == "exec" and list(props) == ["input"]:
            # Codex's default model: a custom tool whose free-text input is JavaScript over its tools.
            return name, {"input": 'text(await tools.exec_command({cmd: "ls"}))'}
        if "cmd" in props:
            return name, {"cmd": "ls"}
        if "command" in props:
            array = props["command"].get("type") == "array"
            return name, {"command": ["ls"] if array else "ls"}
        if "dir_path" in props:
            return name, {"dir_path": str(TASK_DIR)}
        if "pattern" in props:
            return name, {"pattern": "*"}
        return name, {"path": str(TASK_DIR)}
    return None


def sample(schema: dict[str, Any]) -> dict[str, Any]:
    """An object for a flat JSON schema (Gemini CLI's routing classifier asks for one): a low score."""
    values = {"STRING": "a simple task", "INTEGER": 10, "NUMBER": 10, "BOOLEAN": False}
    return {k: values.get(str(v.get("type")).upper(), "") for k, v in schema.get("properties", {}).items()}


# ---- Anthropic Messages -------------------------------------------------------------------------


def anthropic_answer(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    tools = {t.get("name"): t.get("input_schema", {}) for t in body.get("tools", []) if "name" in t}
    answered = any(
        isinstance(block, dict) and block.get("type") == "tool_result"
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )
    call = None if answered else listing_call(tools)
    if call:
        return [{"type": "tool_use", "id": "toolu_capture_1", "name": call[0], "input": call[1]}], "tool_use"
    return [{"type": "text", "text": FINAL_TEXT}], "end_turn"


def anthropic_events(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    content, stop = anthropic_answer(body)
    usage = {"input_tokens": 10, "output_tokens": 5}
    message = {"id": "msg_capture_1", "type": "message", "role": "assistant", "model": body.get("model", "")}
    message |= {"content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}
    events = [{"type": "message_start", "message": message | {"content": [], "stop_reason": None}}]
    for index, block in enumerate(content):
        if block["type"] == "text":
            start, delta = block | {"text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = block | {"input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}
    )
    events.append({"type": "message_stop"})
    return message, events


# ---- OpenAI Responses ---------------------------------------------------------------------------


def responses_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input") if isinstance(body.get("input"), list) else []
    tools = {t.get("name"): t.get("parameters") or {} for t in body.get("tools", []) if t.get("name")}
    # Codex's own models get their tools as an `additional_tools` input item: namespaces of tools, the
    # shell reached from JavaScript run by the `exec` custom tool.
    nested = [
        t
        for i in items
        if i.get("type") == "additional_tools"
        for n in i["tools"]
        for t in n.get("tools", [])
    ]
    outputs = ("function_call_output", "custom_tool_call_output")
    answered = any(item.get("type") in outputs for item in items if isinstance(item, dict))
    call = None if answered else listing_call(tools)
    if not answered and not call and any(t.get("name") == "exec" for t in nested):
        item = {
            "type": "custom_tool_call",
            "id": "ctc_capture_1",
            "call_id": "call_capture_1",
            "name": "exec",
        }
        item |= {"input": 'text(await tools.exec_command({cmd: "ls"}))', "status": "completed"}
    elif call:
        item = {"type": "function_call", "id": "fc_capture_1", "call_id": "call_capture_1", "name": call[0]}
        item |= {"arguments": json.dumps(call[1]), "status": "completed"}
    else:
        text = {"type": "output_text", "text": FINAL_TEXT, "annotations": []}
        item = {"type": "message", "id": "msg_capture_1", "role": "assistant", "status": "completed"}
        item |= {"content": [text]}
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    usage |= {"input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    response = {
        "id": "resp_capture_1",
        "object": "response",
        "created_at": 1700000000,
        "model": body.get("model"),
    }
    response |= {"status": "in_progress", "output": [], "usage": None}
    events = [{"type": "response.created", "response": response}]
    events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
    if item["type"] == "message":
        delta = {"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": FINAL_TEXT}
        events.append({"type": "response.output_text.delta"} | delta)
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    done = response | {"status": "completed", "output": [item], "usage": usage}
    events.append({"type": "response.completed", "response": done})
    return [event | {"sequence_number": n} for n, event in enumerate(events)]


# ---- Gemini -------------------------------------------------------------------------------------


def gemini_chunk(body: dict[str, Any]) -> dict[str, Any]:
    tools = {
        f.get("name"): f.get("parametersJsonSchema") or f.get("parameters") or {}
        for tool in body.get("tools", [])
        for f in tool.get("functionDeclarations", [])
    }
    answered = any(
        "functionResponse" in part
        for content in body.get("contents", [])
        for part in content.get("parts", [])
    )
    call = None if answered else listing_call(tools)
    if call:
        part = {"functionCall": {"name": call[0], "args": call[1]}}
    elif (body.get("generationConfig") or {}).get("responseJsonSchema"):
        part = {"text": json.dumps(sample(body["generationConfig"]["responseJsonSchema"]))}
    else:
        part = {"text": FINAL_TEXT}
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": "capture",
        "responseId": "capture",
    }


# ---- the server ---------------------------------------------------------------------------------


class Capture(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Capture
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.handle_any()

    def do_POST(self) -> None:
        self.handle_any()

    def handle_any(self) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"undecoded": raw.decode("utf-8", "replace")}
        record = {"method": self.command, "path": url.path, "query": dict(parse_qsl(url.query))}
        record |= {"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        with self.server.lock:
            self.server.records.append(record)
        path, stream = url.path, isinstance(body, dict) and bool(body.get("stream"))
        if self.command == "POST" and path.endswith("/messages/count_tokens"):
            return self.json({"input_tokens": 10})
        if self.command == "POST" and path.endswith("/messages"):
            message, events = anthropic_events(body)
            return self.sse(events, typed=True) if stream else self.json(message)
        if self.command == "POST" and path.endswith("/responses"):
            return self.sse(responses_events(body), typed=True)
        if self.command == "POST" and ":countTokens" in path:
            return self.json({"totalTokens": 10})
        if self.command == "POST" and ":streamGenerateContent" in path:
            return self.sse([gemini_chunk(body)], typed=False)
        if self.command == "POST" and ":generateContent" in path:
            return self.json(gemini_chunk(body))
        self.json({"error": {"type": "not_found_error", "message": f"no route {path}"}}, status=404)

    def json(self, payload: Any, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def sse(self, events: list[dict[str, Any]], *, typed: bool) -> None:
        frames = b"".join(
            (f"event: {e['type']}\n".encode() if typed else b"")
            + b"data: "
            + json.dumps(e).encode()
            + b"\n\n"
            for e in events
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(frames)))
        self.end_headers()
        self.wfile.write(frames)


# ---- the agents ---------------------------------------------------------------------------------


def base_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = f"{AGENTS_PREFIX / 'node_modules' / '.bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env | {"HOME": str(HOME_DIR), "NO_PROXY": "127.0.0.1", "CI": "1"}


def claude_code(url: str, key: str) -> tuple[list[str], dict[str, str]]:
    """Claude Code: ANTHROPIC_BASE_URL (semula: http://HOST/p/PROJECT) and a key; no non-essential traffic."""
    env = {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env |= {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}
    args = ["claude", "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash(ls)"]
    return args, env


def codex_config(url: str) -> str:
    """Codex's config.toml: a model_provider speaking the Responses API (OPENAI_BASE_URL alone is ignored)."""
    return (
        'model_provider = "semula"\n'
        "check_for_update_on_startup = false\n"
        "[analytics]\nenabled = false\n"
        "[model_providers.semula]\n"
        'name = "semula"\n'
        f'base_url = "{url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "SEMULA_API_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "supports_websockets = false\n"
    )


def codex(url: str, key: str) -> tuple[list[str], dict[str, str]]:
    codex_home = HOME_DIR / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(url))
    args = ["codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", PROMPT]
    return args, {"CODEX_HOME": str(codex_home), "SEMULA_API_KEY": key}


def gemini_cli(url: str, key: str) -> tuple[list[str], dict[str, str]]:
    """Gemini CLI: GOOGLE_GEMINI_BASE_URL (its "gateway" auth) and GEMINI_API_KEY; usage statistics off."""
    settings = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
    settings |= {"general": {"disableAutoUpdate": True, "disableUpdateNag": True}}
    # GOOGLE_GEMINI_BASE_URL alone selects the "gateway" auth type, which `gemini -p` 0.61 refuses
    # ("Invalid auth method selected."); with the API-key type selected it still uses the base URL.
    settings |= {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    (HOME_DIR / ".gemini").mkdir(parents=True, exist_ok=True)
    (HOME_DIR / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": key, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    return ["gemini", "-p", PROMPT, "--output-format", "json"], env


def codex_classic(url: str, key: str) -> tuple[list[str], dict[str, str]]:
    """Codex with a model it has no metadata for: its tools then come as plain `tools` (exec_command)
    rather than the `additional_tools` input item it sends its own default model."""
    args, env = codex(url, key)
    return args[:2] + ["--model", CLASSIC_CODEX_MODEL] + args[2:], env


CLASSIC_CODEX_MODEL = "gpt-5.1-codex"
AGENTS = {
    "claude-code": claude_code,
    "codex": codex,
    "codex-classic": codex_classic,
    "gemini-cli": gemini_cli,
}


def fresh_dirs() -> None:
    for path in (TASK_DIR, HOME_DIR):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    for name, text in FILES.items():
        (TASK_DIR / name).write_text(text)


def redact(record: dict[str, Any], port: int) -> dict[str, Any]:
    headers = {k: ("<redacted>" if k in SECRET_HEADERS and v else v) for k, v in record["headers"].items()}
    text = json.dumps(record | {"headers": headers}).replace(KEY, "<redacted>")
    return json.loads(text.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT"))


def run_agent(agent: str, url: str, key: str, timeout: float) -> subprocess.CompletedProcess:
    """Run the task once with `agent` pointed at `url` (a provider's base URL, or semula's
    http://HOST/p/PROJECT), in fresh task and home directories."""
    fresh_dirs()
    args, env = AGENTS[agent](url, key)
    return subprocess.run(
        args,
        env=base_env() | env,
        cwd=TASK_DIR,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def final_text(agent: str, stdout: str) -> str:
    """The agent's last answer, from what it printed (Codex prints only that on stdout)."""
    if agent.startswith("codex"):
        return stdout.strip()
    result = json.loads(stdout)
    return str(result.get("result") if agent == "claude-code" else result.get("response")).strip()


def run(agent: str, timeout: float) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess]:
    server = Capture()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = run_agent(agent, server.url, KEY, timeout)
    finally:
        server.shutdown()
        server.server_close()
    return [redact(r, server.server_address[1]) for r in server.records], done


def differing(a: Any, b: Any, path: str = "") -> set[str]:
    """The JSON pointers (list indices as `*`) at which two values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set().union(*(differing(a.get(k), b.get(k), f"{path}/{k}") for k in a.keys() | b.keys()))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(*(differing(x, y, f"{path}/*") for x, y in zip(a, b, strict=True)))
    return set() if a == b else {path}


def diff(folder: Path) -> None:
    """Print, request by request, what differs between run1 and run2 under `folder`."""
    for first in sorted((folder / "run1").glob("*.json")):
        one, other = json.loads(first.read_text()), json.loads((folder / "run2" / first.name).read_text())
        print(first.name)
        for pointer in sorted(differing(one, other)):
            print("   ", pointer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("agent", choices=sorted(AGENTS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("tests/data/agents"))
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--diff", action="store_true", help="only print what differs between run1 and run2")
    opts = parser.parse_args(argv)
    if opts.diff:
        diff(opts.out / opts.agent)
        return 0
    for n in range(1, opts.runs + 1):
        records, done = run(opts.agent, opts.timeout)
        out = opts.out / opts.agent / f"run{n}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for i, record in zip(itertools.count(1), records):
            name = record["path"].rsplit("/", 1)[-1].replace(":", "-") or "root"
            (out / f"{i:02d}-{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"run {n}: exit {done.returncode}, {len(records)} requests -> {out}", file=sys.stderr)
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
