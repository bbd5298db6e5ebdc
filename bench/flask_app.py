"""The bare Flask route of the replay benchmarks: it serves the recorded answer to a recorded request.

It parses the body, drops the fields semula's fingerprint leaves out (`user`, `stream` and the like),
and looks the sha256 of the rest, as sorted JSON, up in a dict of recorded answers, as any replay
server must; it stamps a fresh id and `created`, as semula does; nothing else. The recordings are
bench.pair's, or those of the JSON-lines file named by SEMULA_BENCH_RECORDINGS (one
{"request", "response"} a line, as bench.sizes writes them). Run by
`gunicorn -k gevent -w 2 bench.flask_app:app`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, request

from bench import pair
from semula.core.fingerprint import TRANSPORT_FIELDS

NOT_FOUND = {"error": {"message": "no recording matches", "type": "invalid_request_error"}}


def key(body: Any) -> bytes:
    if not isinstance(body, dict):
        return b""
    kept = {k: v for k, v in body.items() if k not in TRANSPORT_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).digest()


def tail(answer: dict[str, Any]) -> bytes:
    """The answer's JSON without id and created and without its opening brace: stamped at reply."""
    rest = {k: v for k, v in answer.items() if k not in ("id", "created")}
    return json.dumps(rest).encode()[1:]


def recordings() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    path = os.environ.get("SEMULA_BENCH_RECORDINGS")
    if not path:
        yield pair.request_body(), pair.completion()
        return
    with open(path, "rb") as lines:
        for line in lines:
            item = json.loads(line)
            yield item["request"], item["response"]


ANSWERS = {key(req): tail(answer) for req, answer in recordings()}

app = Flask(__name__)
app.json.sort_keys = False  # type: ignore[attr-defined]


@app.post("/v1/chat/completions")
def completions() -> Any:
    found = ANSWERS.get(key(request.get_json(force=True)))
    if found is None:
        return NOT_FOUND, 404
    stamp = f'{{"id": "chatcmpl-{os.urandom(12).hex()}", "created": {int(time.time())}, '.encode()
    return Response(stamp + found, mimetype="application/json")


@app.get("/healthz")
def healthz() -> Any:
    return {"status": "ok"}
