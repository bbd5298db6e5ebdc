"""A bundle import on the real server: the worker keeps serving while it runs, and a bundle (or an
entry) too large to check in time is a 413 in OpenAI's error shape, never a killed worker."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from tests.entry_helpers import request_for, save_entry

pytestmark = pytest.mark.acceptance

MB = 1 << 20


def bundle(*contents: str) -> bytes:
    entries = [{"request": request_for(text), "response": {"content": "ok"}} for text in contents]
    header = {"format": "semula-bundle", "version": 1}
    return json.dumps({"bundle": header, "config": {}, "entries": entries}).encode()


def test_a_large_import_leaves_the_worker_serving_and_too_large_ones_are_413(start_server, ctx, shop, token):
    save_entry(ctx, "shop", "hello", {"content": "replayed"})
    server = start_server(workers=1, SEMULA_MAX_IMPORT_BYTES=str(40 * MB))
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{server.url}/api/v1/projects/shop/import"

    # Five entries of ~5 MB prose each: seconds of parsing and checking for the only worker.
    large = bundle(*(f"entry {i}: " + "many words of prose " * (5 * MB // 20) for i in range(5)))
    done: dict[str, requests.Response] = {}
    importing = threading.Thread(
        target=lambda: done.setdefault("r", requests.post(url, data=large, headers=headers, timeout=120))
    )
    importing.start()
    waits = []
    while importing.is_alive():
        started = time.monotonic()
        hit = requests.post(
            f"{server.url}/p/shop/v1/chat/completions", json=request_for("hello"), headers=headers, timeout=30
        )
        waits.append(time.monotonic() - started)
        assert hit.status_code == 200 and hit.json()["choices"][0]["message"]["content"] == "replayed"
    importing.join()
    assert done["r"].status_code == 200, done["r"].text
    assert done["r"].json()["created"] == 5
    assert len(waits) >= 5, "the import ended before the hits could measure anything"
    assert max(waits) < 1.0, f"a replay hit waited {max(waits):.1f} s behind the import"

    # One 30 MB string: refused while reading, at three times SEMULA_MAX_BODY_BYTES (8 MiB).
    one_string = requests.post(url, data=bundle("x" * 30 * MB), headers=headers, timeout=60)
    assert one_string.status_code == 413
    error = one_string.json()["error"]
    assert error["code"] == "bundle_too_large" and error["param"] == "entries[0]"
    assert "SEMULA_MAX_BODY_BYTES" in error["message"] and error["type"] == "invalid_request_error"

    # Past SEMULA_MAX_IMPORT_BYTES: refused for its Content-Length.
    too_large = requests.post(url, data=b" " * (41 * MB), headers=headers, timeout=60)
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "bundle_too_large"
    assert "SEMULA_MAX_IMPORT_BYTES" in too_large.json()["error"]["message"]

    server.stop()
    assert "WORKER TIMEOUT" not in server.log()


def test_a_refused_import_says_why_in_json_and_the_log_holds_neither_its_content_nor_a_traceback(
    start_server, shop, token
):
    server = start_server(workers=1)
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{server.url}/api/v1/projects/shop/import"
    header = b'{"bundle": {"format": "semula-bundle", "version": 1}, "config": {}, "entries": [{"request": '
    cases = {
        # Bytes that are not UTF-8, a lone surrogate (raw and escaped), a broken entry: each a 400.
        "not UTF-8": header
        + b'{"model": "m", "messages": [{"role": "user", "content": "pw canary-42 \xff"}]}',
        "raw surrogate": header
        + b'{"model": "m", "messages": [{"role": "user", "content": "canary-42 \xed\xa0\x80"}]}',
        "escaped high": header
        + b'{"model": "m", "messages": [{"role": "user", "content": "canary-42 \\ud800"}]}',
        "escaped low": header
        + b'{"model": "m", "messages": [{"role": "user", "content": "canary-42 \\udc00x"}]}',
    }
    for case, data in cases.items():
        r = requests.post(url, data=data + b', "response": {"content": "ok"}}]}', headers=headers, timeout=30)
        assert r.status_code == 400, (case, r.text)
        assert r.json()["error"]["code"] == "invalid_bundle", (case, r.text)
        assert "canary-42" not in r.text, (case, r.text)
    listed = requests.get(f"{server.url}/api/v1/projects/shop/entries", headers=headers, timeout=30)
    assert listed.json()["data"] == []
    server.stop()
    log = server.log()
    assert "canary-42" not in log and "Traceback" not in log
