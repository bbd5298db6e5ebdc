"""CPU of one request at the caps, each API (issue #49: "any request the body limit admits is refused or
answered within 200 ms of CPU").

    python -m bench.caps_cpu [--kinds gemini,responses,chat,anthropic,embeddings] [--rounds 5]
        [--entries] [--items 99999]

Each request holds as much as the caps admit (semula/core/limits.py: one item under 100,000 Responses
input items, chat or Anthropic messages, Gemini contents, each with one short text; an embeddings
request of 300,000 token ids), well under the 8 MiB body limit, and is sent to the proxy's WSGI app
in this process (no server, no client) in a replay project on SQLite. It misses: parsed, checked,
fingerprinted, looked up, and answered with the 424 whose message names the closest entry. With
`--entries` the project holds an entry of each API, so the miss compares the request with it (the
canonical copy of the whole request); without, it holds one chat entry only. Prints this process's
CPU for the request, the least of --rounds, and whether it is within 200 ms.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench.common import machine
from bench.inprocess import post_environ, proxy_app

BOUND_MS = 200
TEXT_MODEL = "gpt-4o"


def gemini(n: int) -> tuple[str, dict[str, Any]]:
    path = "/p/caps/v1beta/models/gemini-2.5-flash:generateContent"
    return path, {"contents": [{"role": "user", "parts": [{"text": f"item {i}"}]} for i in range(n)]}


def responses(n: int) -> tuple[str, dict[str, Any]]:
    return "/p/caps/v1/responses", {
        "model": TEXT_MODEL,
        "input": [{"role": "user", "content": f"item {i}"} for i in range(n)],
    }


def chat(n: int) -> tuple[str, dict[str, Any]]:
    return "/p/caps/v1/chat/completions", {
        "model": TEXT_MODEL,
        "messages": [{"role": "user", "content": f"item {i}"} for i in range(n)],
    }


def anthropic(n: int) -> tuple[str, dict[str, Any]]:
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"item {i}"} for i in range(n | 1)]
    return "/p/caps/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": turns}


def embeddings(_: int) -> tuple[str, dict[str, Any]]:
    ids = [[(i * 7 + j) % 50_000 for j in range(146)] for i in range(2048)]  # 299,008 token ids
    return "/p/caps/v1/embeddings", {"model": "text-embedding-3-small", "input": ids}


# The APIs whose entries --entries records, by kind.
APIS = {
    "gemini": "gemini.generate_content",
    "responses": "openai.responses",
    "chat": "openai.chat",
    "anthropic": "anthropic.messages",
}
KINDS: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "gemini": gemini,
    "responses": responses,
    "chat": chat,
    "anthropic": anthropic,
    "embeddings": embeddings,
}


def post(app: Any, path: str, raw: bytes) -> str:
    environ = post_environ(raw, path)
    status: list[str] = []
    b"".join(app(environ, lambda line, headers, exc_info=None: status.append(line)))
    return status[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.caps_cpu", description=__doc__)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=99_999, help="items in each request (the cap: 100,000)")
    parser.add_argument("--entries", action="store_true", help="an entry of each API to compare with")
    args = parser.parse_args(argv)
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context, pending, projects

    kinds = args.kinds.split(",")
    print(f"machine: {machine()}")
    over = 0
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/caps.db"
        store = connect(url)
        migrate(store)
        settings = replace(Settings(), database_url=url, auth=False)
        ctx = Context(store, settings, CLI)
        projects.create(ctx, {"name": "caps", "mode": "record"})
        app = proxy_app(settings, store)
        row = projects.get_row(ctx, "caps")
        small = {"model": TEXT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        pending_id = pending.park(ctx, row, "v1:chat", small, False)
        pending.answer(ctx, pending_id, {"content": "Hello."})
        if args.entries:  # one entry of each text API: the miss compares the request with it
            for kind in kinds:
                if kind in APIS:
                    body = {"model": "gemini-2.5-flash", **KINDS[kind](1)[1]}  # Gemini's is the path's
                    pending_id = pending.park(ctx, row, f"v1:{kind}", body, False, api=APIS[kind])
                    pending.answer(ctx, pending_id, {"content": "Hello."})
        projects.update(ctx, "caps", {"mode": "replay"})
        for kind in kinds:
            path, body = KINDS[kind](args.items)
            raw = json.dumps(body).encode()
            status = post(app, path, raw)
            best = float("inf")
            for _ in range(args.rounds):
                started = time.process_time()
                post(app, path, raw)
                best = min(best, time.process_time() - started)
            ms = best * 1000
            over += ms > BOUND_MS
            verdict = "within" if ms <= BOUND_MS else "OVER"
            size = f"{len(raw) / 1e6:4.1f} MB"
            print(f"{kind:<11} {size}  {status:<24} CPU {ms:6.0f} ms  ({verdict} {BOUND_MS} ms)")
        store.close()
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
