"""The embeddings dialect through Flask's test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from semula.core import vectors
from semula.service import CLI, Context, bundles, entries, pending, projects
from semula.web import create_app
from tests.fake_upstream import FakeUpstream
from tests.helpers import wait_for

URL = "/p/shop/v1/embeddings"
SMALL = "text-embedding-3-small"
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def record(ctx, shop, client, headers, body, payload):
    """Post `body`, answer the call it parks with `payload` through the service, return the response."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=body, headers=headers)
        [row] = wait_for(
            lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="a parked call"
        )
        pending.answer(ctx, row["id"], payload)
        return future.result(10)


def float32(values):
    return vectors.decode(vectors.encode(values))


def test_a_batch_answered_with_vectors_replays_in_input_order_as_floats_or_base64(ctx, shop, client, admin):
    body = {"model": SMALL, "input": ["alpha", "beta", "gamma"], "dimensions": 2}
    given = [[1.0, 0.0], [0.6, 0.8], [0.1, -0.2]]
    first = record(ctx, shop, client, admin, body, {"embeddings": given})
    assert first.status_code == 200, first.json
    assert first.json["object"] == "list" and first.json["model"] == SMALL
    assert [item["index"] for item in first.json["data"]] == [0, 1, 2]
    assert [item["embedding"] for item in first.json["data"]] == [float32(v) for v in given]

    projects.update(ctx, "shop", {"mode": "replay"})
    as_base64 = client.post(URL, json={**body, "encoding_format": "base64", "user": "u-9"}, headers=admin)
    assert as_base64.status_code == 200, as_base64.json
    assert [vectors.decode(item["embedding"]) for item in as_base64.json["data"]] == [
        float32(v) for v in given
    ]
    assert client.post(URL, json={**body, "encoding_format": "float"}, headers=admin).json == first.json

    # Another batch is another request; the miss names the first input that differs.
    miss = client.post(URL, json={**body, "input": ["alpha", "BETA", "gamma"]}, headers=admin)
    assert miss.status_code == 424 and "input[1]" in miss.json["error"]["message"]
    # A single input is not taken out of a batch entry (docs/decisions/0035-embeddings.md).
    single = client.post(URL, json={**body, "input": "alpha"}, headers=admin)
    assert single.status_code == 424


def test_the_parked_call_shows_inputs_and_the_vector_length_and_refuses_bad_answers(ctx, shop, client, admin):
    body = {"model": SMALL, "input": "just one"}
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=body, headers=admin)
        [row] = wait_for(
            lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="a parked call"
        )
        call = client.get(f"/api/v1/pending/{row['id']}", headers=admin).json
        assert call["api"] == "openai.embeddings"
        assert call["conversation"]["messages"] == [{"role": "user", "content": "just one"}]
        assert call["shape"]["skeleton"] == {"embeddings": [[]]}
        assert call["shape"]["embeddings"] == {"inputs": 1, "dimensions": 1536}
        assert "1536 numbers" in call["shape"]["notes"][0]
        short = client.post(
            f"/api/v1/pending/{row['id']}/answer", json={"embeddings": [[0.5] * 3]}, headers=admin
        )
        assert short.status_code == 422 and short.json["error"]["param"] == "embeddings[0]"
        assert "wants 1536" in short.json["error"]["message"]
        text = client.post(f"/api/v1/pending/{row['id']}/answer", json="a vector", headers=admin)
        assert text.status_code == 422 and '{"embeddings"' in text.json["error"]["message"]
        whole = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.25] * 1536}]}
        done = client.post(f"/api/v1/pending/{row['id']}/answer", json=whole, headers=admin)
        assert done.status_code == 200, done.json
        response = future.result(10)
    assert response.status_code == 200 and response.json["data"][0]["embedding"] == [0.25] * 1536
    # Stored compactly: the entry holds base64 float32, not 1,536 decimals.
    [entry] = entries.list_entries(ctx, "shop")["data"]
    stored = entries.get(ctx, entry["id"])
    assert stored["response"]["data"][0]["embedding"] == vectors.encode([0.25] * 1536)
    assert stored["answer"]["content"] == "1 embeddings of 1536 numbers"


def test_synthetic_answers_misses_at_once_and_replays_without_the_setting(ctx, shop, client, admin):
    changed = client.patch("/api/v1/projects/shop", json={"embeddings": "synthetic"}, headers=admin)
    assert changed.status_code == 200 and changed.json["embeddings"] == "synthetic"
    bad = client.patch("/api/v1/projects/shop", json={"embeddings": "random"}, headers=admin)
    assert bad.status_code == 400
    body = {"model": SMALL, "input": ["the cat", "the dog", "the cat"], "dimensions": 256}
    first = client.post(URL, json=body, headers=admin)
    assert first.status_code == 200, first.json
    data = [item["embedding"] for item in first.json["data"]]
    assert [len(v) for v in data] == [256, 256, 256]
    assert data[0] == data[2] and data[0] != data[1]
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-6) for v in data)
    # The same text in another request has the same vector (a function of model, text, dimensions).
    alone = client.post(URL, json={"model": SMALL, "input": "the dog", "dimensions": 256}, headers=admin)
    assert alone.json["data"][0]["embedding"] == data[1]
    default = client.post(URL, json={"model": "text-embedding-3-large", "input": "x"}, headers=admin)
    assert len(default.json["data"][0]["embedding"]) == 3072
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []
    outcomes = [r["outcome"] for r in ctx.store.all("calls_in_project", project_id=shop["id"])]
    assert outcomes == ["synthetic", "synthetic", "synthetic"]
    listed = client.get("/api/v1/projects/shop/calls?outcome=synthetic", headers=admin)
    assert listed.status_code == 200 and len(listed.json["data"]) == 3, listed.json
    [entry] = [
        e for e in entries.list_entries(ctx, "shop")["data"] if e["model"] == SMALL and "cat" in str(e)
    ]
    assert entries.get(ctx, entry["id"])["revisions"][0]["actor"] == "synthetic"

    # Exported, imported into a project without the setting, replayed there as it was.
    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    assert json.loads(exported)["config"]["embeddings"] == "synthetic"
    assert b"".join(bundles.export_bundle(ctx, "shop")) == exported  # byte-stable
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 3
    projects.update(ctx, "copy", {"embeddings": "off"})
    again = client.post("/p/copy/v1/embeddings", json=body, headers=admin)
    assert [item["embedding"] for item in again.json["data"]] == data
    assert (
        b"".join(bundles.export_bundle(ctx, "copy")).split(b'"entries"')[1] == exported.split(b'"entries"')[1]
    )


def test_a_synthetic_answer_longer_than_a_recording_may_be_is_refused_before_it_is_made(
    ctx, shop, client, admin
):
    projects.update(ctx, "shop", {"embeddings": "synthetic"})
    ctx.settings.__dict__["max_body_bytes"] = 64 * 1024
    huge = {"model": "custom-model", "input": ["a"] * 64, "dimensions": 65536}
    refused = client.post(URL, json=huge, headers=admin)
    assert refused.status_code == 400, refused.json
    error = refused.json["error"]
    assert error["code"] == "synthetic_answer_too_large" and error["param"] == "input"
    assert "SEMULA_MAX_BODY_BYTES" in error["message"]
    assert entries.list_entries(ctx, "shop")["data"] == []
    # What fits is answered: 8 vectors of 1,024 numbers are ~44 KB as stored.
    fits = client.post(URL, json={**huge, "input": ["a"] * 8, "dimensions": 1024}, headers=admin)
    assert fits.status_code == 200 and len(fits.json["data"]) == 8


def test_synthetic_is_record_mode_only(ctx, shop, client, admin):
    projects.update(ctx, "shop", {"embeddings": "synthetic", "mode": "replay"})
    miss = client.post(URL, json={"model": SMALL, "input": "x"}, headers=admin)
    assert miss.status_code == 424


def test_models_lists_embedding_models_seen(ctx, shop, client, admin):
    projects.update(ctx, "shop", {"embeddings": "synthetic"})
    client.post(URL, json={"model": SMALL, "input": "x", "dimensions": 4}, headers=admin)
    listed = client.get("/p/shop/v1/models", headers=admin).json
    assert [m["id"] for m in listed["data"]] == [SMALL]
    assert client.get(f"/p/shop/v1/models/{SMALL}", headers=admin).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": SMALL}, "input"),
        ({"model": SMALL, "input": ["ok", ""]}, "input[1]"),
        ({"model": SMALL, "input": [[1, 2], "a"]}, "input[1]"),
        ({"model": SMALL, "input": ["a", [1, 2]]}, "input[1]"),
        ({"model": SMALL, "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "text-embedding-ada-002", "input": "x", "dimensions": 8}, "dimensions"),
    ],
)
def test_requests_the_api_refuses_are_400_naming_the_field(shop, client, admin, body, param):
    r = client.post(URL, json=body, headers=admin)
    assert r.status_code == 400 and r.json["error"]["param"] == param


@pytest.fixture
def fake():
    server = FakeUpstream()
    yield server
    server.close()


def test_record_through_forwards_to_embeddings_and_counts_prompt_tokens(store, settings, fake, make_token):
    upstream = replace(settings, upstream_key=CANARY, upstream_url=fake.url)
    operator = Context(store, upstream, CLI)
    projects.create(
        operator,
        {"name": "shop", "record_through": True, "upstream_model": "gpt-4o-mini", "upstream_max_calls": 5},
    )
    client = create_app(upstream, store).test_client()
    admin = make_token("admin")
    body = {"model": SMALL, "input": ["red apple", "green apple", "blue car"], "encoding_format": "base64"}
    first = client.post(URL, json=body, headers=admin)
    assert first.status_code == 200, first.json
    [call] = fake.calls
    assert call["path"].endswith("/embeddings") and call["body"]["model"] == SMALL  # not upstream_model
    assert call["body"]["encoding_format"] == "base64"
    usage = client.get("/api/v1/projects/shop/upstream", headers=admin).json
    assert (usage["calls"], usage["prompt_tokens"]) == (1, 6)
    # The same batch asked as floats replays the recording: no second provider call.
    floats = client.post(URL, json={**body, "encoding_format": "float"}, headers=admin).json
    assert len(fake.calls) == 1
    assert [item["embedding"] for item in floats["data"]] == [
        vectors.decode(item["embedding"]) for item in first.json["data"]
    ]
    [entry] = entries.list_entries(operator, "shop")["data"]
    assert entries.get(operator, entry["id"])["api"] == "openai.embeddings"
    # With embeddings: synthetic as well, the project's embeddings are made here, not forwarded.
    projects.update(operator, "shop", {"embeddings": "synthetic"})
    made = client.post(URL, json={"model": SMALL, "input": "never forwarded"}, headers=admin)
    assert made.status_code == 200 and len(made.json["data"][0]["embedding"]) == 1536
    assert len(fake.calls) == 1


def test_a_million_token_ids_are_refused_before_any_work_on_them(ctx, shop, client, admin, monkeypatch):
    """Issue #49: 1,000 arrays of 1,000 token ids (4.9 MB, under the body limit) took 3.35 s of CPU to
    fail as a replay miss. Refused now with the API's 400 from the check, before fingerprinting, for
    about the cost of parsing the body (a generous bound: the machine may be loaded)."""
    import time

    from semula.core import fingerprint

    def never(*args, **kwargs):
        raise AssertionError("fingerprinted a request the API refuses")

    monkeypatch.setattr(fingerprint, "fingerprint", never)
    monkeypatch.setattr(fingerprint, "canonical_request", never)
    projects.update(ctx, "shop", {"mode": "replay"})
    data = json.dumps({"model": SMALL, "input": [[i % 50_000 for i in range(1000)] for _ in range(1000)]})
    started = time.process_time()
    response = client.post(URL, data=data, headers={**admin, "Content-Type": "application/json"})
    spent = time.process_time() - started
    assert response.status_code == 400, response.json
    assert response.json["error"]["code"] == "max_tokens_per_request"
    assert "Requested 1000000 tokens" in response.json["error"]["message"]
    assert spent < 1.0, spent
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []
