"""`semula replay`'s kept imports (decision 0062): a later start of the same bundle serves the database
the first start's import made; a changed bundle, or the cache turned off, imports again; a bundle
that fails to import fails the same way at every start and is never kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.bundle_helpers import write_bundle

pytestmark = pytest.mark.acceptance

HELLO = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello"}]}
RECORDED = [
    (HELLO, {"content": "Hello there!"}),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "Say goodbye"}]}, {"content": "Bye!"}),
]


def start(bundle: Path, cache: Path | str) -> tuple[dict[str, str], str]:
    """Start `semula replay`, ask for HELLO and the entries' ids; (fingerprint -> entry id, the answer)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "semula", "replay", str(bundle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SEMULA_REPLAY_CACHE": str(cache)},
    )
    try:
        url = proc.stdout.readline().strip()
        assert url, proc.communicate(timeout=30)[1]
        answer = requests.post(url + "/chat/completions", json=HELLO, timeout=30).json()
        root = url.split("/p/")[0]
        listed = requests.get(root + "/api/v1/projects/default/entries", timeout=30).json()["data"]
    finally:
        proc.terminate()
        proc.wait(30)
    return {e["fingerprint"]: e["id"] for e in listed}, answer["choices"][0]["message"]["content"]


def test_a_later_start_serves_the_kept_import_and_a_changed_bundle_is_imported_again(tmp_path):
    bundle = tmp_path / "llm.json"
    write_bundle(bundle, RECORDED)
    cache = tmp_path / "cache"
    first, answer = start(bundle, cache)
    assert answer == "Hello there!" and len(first) == 2
    assert len(list(cache.glob("*.db"))) == 1
    # Entry ids are new at each import: the same ids are the kept database.
    assert start(bundle, cache) == (first, "Hello there!")
    fresh, answer = start(bundle, "off")
    assert answer == "Hello there!" and fresh.keys() == first.keys()
    assert set(fresh.values()).isdisjoint(first.values())
    assert len(list(cache.glob("*.db"))) == 1

    other = tmp_path / "other"
    other.mkdir()
    write_bundle(other / "llm.json", [(HELLO, {"content": "Hello again!"})])  # its own scratch database
    bundle.write_bytes((other / "llm.json").read_bytes())
    changed, answer = start(bundle, cache)
    assert answer == "Hello again!" and len(changed) == 1
    assert set(changed.values()).isdisjoint(first.values())
    assert len(list(cache.glob("*.db"))) == 2


def test_a_bundle_that_fails_to_import_fails_alike_at_every_start_and_is_not_kept(tmp_path):
    bundle = tmp_path / "llm.json"
    write_bundle(bundle, RECORDED)
    bundle.write_text(
        bundle.read_text().replace('"review_status": "unreviewed"', '"review_status": "maybe"', 1)
    )
    cache = tmp_path / "cache"
    runs = [
        subprocess.run(
            [sys.executable, "-m", "semula", "replay", str(bundle)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SEMULA_REPLAY_CACHE": str(cache)},
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [1, 1]
    assert "review_status" in runs[0].stderr and runs[0].stderr == runs[1].stderr
    assert list(cache.glob("*")) == []


def test_a_recording_stopped_while_its_bundle_is_imported_leaves_the_bundle_whole(tmp_path):
    from bench.import_bundle import write_bundle as write_large_bundle

    bundle = tmp_path / "llm.json"
    write_large_bundle(bundle, 5000)  # an import of some seconds: the stop comes before its end
    before = bundle.read_bytes()
    proc = subprocess.Popen(
        [sys.executable, "-m", "semula", "replay", "--record", str(bundle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SEMULA_REPLAY_CACHE": str(tmp_path / "cache")},
    )
    try:
        assert proc.stdout.readline().strip(), proc.communicate(timeout=60)[1]
        proc.terminate()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    # Never a part of the bundle written over it: left as it was, or (the import ended first) whole.
    if "stopped while it was imported" in err:
        assert bundle.read_bytes() == before
        assert list((tmp_path / "cache").glob("*")) == []
    else:
        assert "5000 entries" in err
        assert len(json.loads(bundle.read_bytes())["entries"]) == 5000
