"""Embeddings against real gunicorn + gevent, driven by the official openai SDK and by LangChain."""

from __future__ import annotations

import io
import math
import threading
from dataclasses import replace

import pytest

from semula.service import Context, bundles, pending, projects
from tests.acceptance import shared
from tests.fake_upstream import FakeUpstream
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

SMALL = "text-embedding-3-small"
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"
DOCUMENTS = [
    "The cat sat on the warm mat by the fire.",
    "Stock markets fell sharply on Monday morning.",
    "A recipe for tomato soup with basil and garlic.",
    "The football match ended in a late penalty.",
]


@pytest.fixture
def fake():
    server = FakeUpstream()
    yield server
    server.close()


def answered(ctx, project, payload, make_call):
    """Make the call from this thread while another answers the call it parks with `payload`."""

    def run():
        [row] = wait_for(
            lambda: ctx.store.all("parked_in_project", project_id=project["id"]),
            timeout=60,
            what="a parked call",
        )
        pending.answer(ctx, row["id"], payload)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    result = make_call()
    thread.join(30)
    return result


def float32(values):
    from semula.core import vectors

    return vectors.decode(vectors.encode(values))


def vectors_of(result):
    return [item.embedding for item in result.data]


def test_answered_vectors_replay_single_and_batch_in_both_formats(server, ctx, shop, openai_client):
    client = openai_client(server)

    def single():  # the SDK asks for base64 and decodes it itself
        return client.embeddings.create(model=SMALL, input="What is semula?", dimensions=4)

    def batch():
        return client.embeddings.create(
            model=SMALL, input=["first", "second", "third"], dimensions=3, encoding_format="float"
        )

    one = answered(ctx, shop, {"embeddings": [[0.5, -0.5, 0.5, -0.5]]}, single)
    assert vectors_of(one) == [float32([0.5, -0.5, 0.5, -0.5])] and one.model == SMALL
    given = [[1.0, 0.0, 0.0], [0.0, 0.1, 0.2], [0.3, 0.4, 0.5]]
    three = answered(ctx, shop, {"embeddings": given}, batch)
    assert vectors_of(three) == [float32(v) for v in given]
    assert [item.index for item in three.data] == [0, 1, 2]

    projects.update(ctx, "shop", {"mode": "replay"})
    assert vectors_of(single()) == vectors_of(one)
    assert vectors_of(batch()) == vectors_of(three)
    # The same batch in the SDK's default format is the same recording.
    default = client.embeddings.create(model=SMALL, input=["first", "second", "third"], dimensions=3)
    assert vectors_of(default) == vectors_of(three)

    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 2
    copy = openai_client(server, "copy")
    assert vectors_of(
        copy.embeddings.create(model=SMALL, input="What is semula?", dimensions=4)
    ) == vectors_of(one)
    assert vectors_of(
        copy.embeddings.create(
            model=SMALL, input=["first", "second", "third"], dimensions=3, encoding_format="float"
        )
    ) == vectors_of(three)


def test_record_through_and_synthetic_then_replayed_from_a_bundle(
    start_server, ctx, token, fake, openai_client
):
    server = start_server(SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
    projects.create(ctx, {"name": "made", "embeddings": "synthetic"})
    through, made = openai_client(server, "shop"), openai_client(server, "made")
    calls = [
        {"model": SMALL, "input": "red apples"},
        {"model": SMALL, "input": ["red apples", "green pears"], "encoding_format": "float"},
        {"model": SMALL, "input": ["red apples", "green pears"], "dimensions": 64},
    ]
    recorded = {
        name: [client.embeddings.create(**c) for c in calls]
        for name, client in (("shop", through), ("made", made))
    }
    assert len(fake.calls) == 3 and all(call["path"].endswith("/embeddings") for call in fake.calls)
    assert [len(r.data[0].embedding) for r in recorded["shop"]] == [1536, 1536, 64]
    assert [len(r.data[0].embedding) for r in recorded["made"]] == [1536, 1536, 64]
    for result in recorded["made"]:
        assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors_of(result))
    # Identical texts, identical synthetic vectors: "red apples" alone and first in the batch.
    assert recorded["made"][0].data[0].embedding == recorded["made"][1].data[0].embedding

    for name in ("shop", "made"):
        exported = b"".join(bundles.export_bundle(ctx, name))
        projects.create(ctx, {"name": f"{name}-copy", "mode": "replay"})
        assert bundles.import_bundle(ctx, f"{name}-copy", io.BytesIO(exported))["created"] == 3
        copy = openai_client(server, f"{name}-copy")
        replayed = [copy.embeddings.create(**c) for c in calls]
        assert [vectors_of(r) for r in replayed] == [vectors_of(r) for r in recorded[name]]
    assert len(fake.calls) == 3


def test_langchain_retrieval_replays_offline(start_server, server, ctx, token, fake):
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import OpenAIEmbeddings

    def retrieve(server, question):
        embeddings = OpenAIEmbeddings(
            model=SMALL,
            base_url=f"{server.url}/p/shop/v1",
            api_key=token,
            max_retries=0,
            # Its default counts tokens with tiktoken, whose encodings are downloaded at first use.
            check_embedding_ctx_length=False,
        )
        store = InMemoryVectorStore.from_texts(DOCUMENTS, embeddings)
        return [doc.page_content for doc in store.similarity_search(question, k=1)]

    recording = start_server(SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
    question = "Where did the cat sit?"
    assert retrieve(recording, question) == [DOCUMENTS[0]]
    assert len(fake.calls) == 2  # the documents in one batch, the question alone
    recording.stop()
    fake.close()

    projects.update(ctx, "shop", {"mode": "replay"})
    offline = server  # the module's: no provider configured at all
    assert retrieve(offline, question) == [DOCUMENTS[0]]
