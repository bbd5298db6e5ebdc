"""The stack's floor: what the bare Flask route does (bench.flask_app), as a plain WSGI app on semula's
own gunicorn worker (semula.worker.Worker: gevent's pywsgi with semula's cuts), with orjson.

It reads the body, parses it, drops the fields the fingerprint leaves out, writes the rest as sorted
JSON, looks its sha256 up in a dict of recorded answers and stamps a fresh id and `created`: the steps
a replay server on this stack cannot skip for a request it has not seen before. No authentication, no
database, no call log, no metrics, no checks. What semula costs above it is what its features cost;
what this costs is the part of a target no change to semula can go below. Run by
`gunicorn -k semula.worker.Worker -w 2 bench.floor_app:app` (bench.replay.start_floor).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from bench import flask_app
from semula.core.fingerprint import TRANSPORT_FIELDS


def key(body: Any) -> bytes:
    if not isinstance(body, dict):
        return b""
    kept = {k: v for k, v in body.items() if k not in TRANSPORT_FIELDS}
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).digest()


def tail(answer: dict[str, Any]) -> bytes:
    """The answer's JSON without id and created and without its opening brace: stamped at reply."""
    return orjson.dumps({k: v for k, v in answer.items() if k not in ("id", "created")})[1:]


ANSWERS = {key(request): tail(answer) for request, answer in flask_app.recordings()}
NOT_FOUND = orjson.dumps(flask_app.NOT_FOUND)
HEALTHY = b'{"status":"ok"}'


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["REQUEST_METHOD"] == "GET":
        return reply(start_response, "200 OK", HEALTHY)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    found = ANSWERS.get(key(orjson.loads(environ["wsgi.input"].read(length))))
    if found is None:
        return reply(start_response, "404 Not Found", NOT_FOUND)
    stamp = b'{"id":"chatcmpl-%x","created":%d,' % (random.getrandbits(96), int(time.time()))
    return reply(start_response, "200 OK", stamp + found)


def reply(start_response: Callable[..., Any], status: str, data: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
