"""The bare Flask route of the replay benchmark: it serves the recorded answer to the recorded request.

It parses the body and compares it with the recording, as any replay server must, and stamps a fresh id
and `created`, as semula does; nothing else. Run by `gunicorn -k gevent -w 2 bench.flask_app:app`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from flask import Flask, request

from bench import pair

REQUEST = pair.request_body()
ANSWER = pair.completion()

app = Flask(__name__)
app.json.sort_keys = False  # type: ignore[attr-defined]


@app.post("/v1/chat/completions")
def completions() -> Any:
    if request.get_json(force=True) != REQUEST:
        return {"error": {"message": "no recording matches", "type": "invalid_request_error"}}, 404
    return {**ANSWER, "id": "chatcmpl-" + os.urandom(12).hex(), "created": int(time.time())}


@app.get("/healthz")
def healthz() -> Any:
    return {"status": "ok"}
