"""The benchmark's request generator and the files its servers load (bench.workloads, bench.sizes)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import firstsight, runs, sizes, workloads
from bench.workloads import NONCE
from semula import dialects
from semula.core.fingerprint import fingerprint

CHAT = dialects.get("openai.chat")


@pytest.mark.parametrize("target", [2048, 8192, 32 * 1024, workloads.AGENT_BYTES, 128 * 1024])
@pytest.mark.parametrize("tools", [True, False])
def test_agent_request_is_within_ten_percent_of_its_size(target: int, tools: bool) -> None:
    for variant in (0, 7, 99_999):
        size = len(workloads.agent_recording(target, variant, tools=tools).request_bytes())
        assert 0.9 * target <= size <= 1.1 * target, (target, variant, size)


def test_the_88_kb_request_is_an_agent_session() -> None:
    body = workloads.agent_request(workloads.AGENT_BYTES)
    roles = [m["role"] for m in body["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "user"
    trips = roles[2:-1]
    assert trips == ["assistant", "tool"] * (len(trips) // 2) and len(trips) // 2 >= 15
    outputs = [len(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    assert all(3400 <= n <= 4200 for n in outputs), outputs
    assert all(json.loads(m["content"])["status"] == "ok" for m in body["messages"] if m["role"] == "tool")
    assert len(body["tools"]) >= 20
    called = {m["tool_calls"][0]["function"]["name"] for m in body["messages"] if m["role"] == "assistant"}
    assert called <= {t["function"]["name"] for t in body["tools"]}


def test_semula_accepts_the_requests_and_their_answers() -> None:
    for recording in (workloads.agent_recording(workloads.AGENT_BYTES, 3), workloads.pair_recording(3)):
        CHAT.check(recording.request)
        response, _ = CHAT.accept_recorded(recording.response, None, recording.request, recording.request)
        assert response["choices"][0]["message"]["content"] == recording.answer_text()


def test_generation_is_deterministic() -> None:
    assert workloads.agent_request(50_000, 5) == workloads.agent_request(50_000, 5)
    assert workloads.pair_recording(5) == workloads.pair_recording(5)


@pytest.mark.parametrize(
    "make", [workloads.pair_request, lambda v: workloads.agent_request(8192, v)], ids=["pair", "agent"]
)
def test_variants_are_distinct_recordings_differing_in_the_last_user_text(make) -> None:
    bodies = [make(v) for v in range(300)]
    assert len({fingerprint(b) for b in bodies}) == 300
    for body in bodies[1:]:
        assert body["messages"][:-1] == bodies[0]["messages"][:-1]
        assert body["messages"][-1] != bodies[0]["messages"][-1]
    assert 1400 <= len(json.dumps(workloads.pair_request(999))) <= 1800


def test_a_first_sight_probe_matches_its_recording_whatever_its_user() -> None:
    recorded = firstsight.probe(8192, 1)
    raw = recorded.request_bytes()
    assert raw.count(NONCE.encode()) == 1
    sent = json.loads(raw.replace(NONCE.encode(), b"0f3c-1-12345"))
    assert sent != recorded.request
    assert fingerprint(sent) == fingerprint(recorded.request)


def test_the_bare_flask_route_keys_a_request_as_semula_matches_it() -> None:
    from bench import flask_app

    recorded = firstsight.probe(2048, 1).request
    assert flask_app.key({**recorded, "user": "someone else"}) == flask_app.key(recorded)
    other = workloads.agent_request(2048, 2)
    assert flask_app.key(other) != flask_app.key(recorded)


def test_the_floor_answers_a_recorded_request_whatever_its_user_and_refuses_others() -> None:
    import io

    import orjson

    from bench import floor_app, pair

    def post(body: dict) -> tuple[str, dict]:
        raw = orjson.dumps(body)
        environ = {"REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(raw)), "wsgi.input": io.BytesIO(raw)}
        said: list[str] = []
        out = b"".join(floor_app.app(environ, lambda status, headers: said.append(status)))
        return said[0], orjson.loads(out)

    status, answer = post({**pair.request_body(), "user": "someone else"})
    assert status == "200 OK" and answer["choices"] == pair.completion()["choices"]
    assert answer["id"].startswith("chatcmpl-") and answer["id"] != post(pair.request_body())[1]["id"]
    assert post({**pair.request_body(), "temperature": 0.9})[0] == "404 Not Found"


def test_the_instruction_count_child_serves_its_requests_through_the_worker() -> None:
    """What `python -m bench.instructions` runs under callgrind: it fails on anything but a 200, or
    when the worker closes the connection (a worker change that needs more of its fake server)."""
    from bench import instructions

    for mode in ("hit", "first"):
        instructions.serve(mode, sdk=True, requests=3)
    instructions.serve("hit", sdk=False, requests=3, which="floor")  # the floor app, for comparison


def test_the_memory_of_a_kept_hit_is_measured_on_hits_of_their_own() -> None:
    """`python -m bench.kept_memory`: each hit holds what a distinct recording's would, so the figure
    is at least its key and its answer's bytes, and packing makes it smaller."""
    from bench import kept_memory
    from semula.service import hits

    as_sent, answer = kept_memory.per_hit(300, packed=False)
    packed, _ = kept_memory.per_hit(300, packed=True)
    assert 32 + answer < as_sent < hits.HIT + answer + 512
    assert 32 < packed < as_sent - answer / 4


def test_a_workload_store_holds_probes_and_fillers() -> None:
    made = list(firstsight.recordings(1000, (2048, 8192)))
    assert len(made) == 1000
    assert sum(NONCE in r.request.get("user", "") for r in made) == 2 * firstsight.PROBES
    assert len(list(firstsight.recordings(1, (2048, 8192)))) == 2  # one probe per size at least


def test_the_files_hold_every_recording_once(tmp_path) -> None:
    files = sizes.write_files(tmp_path, "w", (workloads.pair_recording(v) for v in range(25)))
    bodies = files.bodies.read_bytes().splitlines()
    assert len(bodies) == 25 and bodies[3] == workloads.pair_recording(3).request_bytes()
    lines = [json.loads(line) for line in files.recordings.read_bytes().splitlines()]
    assert lines[24] == {
        "request": workloads.pair_request(24),
        "response": workloads.pair_recording(24).response,
    }
    bundle = json.loads(files.bundle.read_bytes())
    assert bundle["bundle"] == {"format": "semula-bundle", "version": 1}
    assert bundle["entries"] == lines
    assert (files.count, files.first, files.last) == (
        25,
        workloads.pair_recording(0),
        workloads.pair_recording(24),
    )


def test_the_bundle_imports_every_recording(db_url: str, tmp_path) -> None:
    from bench import replay
    from semula.service import entries

    files = sizes.write_files(tmp_path, "w", (workloads.pair_recording(v) for v in range(30)))
    token = replay.load_bundle(db_url, files.bundle)
    assert token
    with replay.service(db_url) as ctx:
        listed = entries.list_entries(ctx, replay.PROJECT, limit=100)
    assert len(listed["data"]) == 30


def test_a_store_is_read_into_memory_before_each_run(db_url: str, tmp_path, monkeypatch) -> None:
    """What sizes.semula_targets gives each semula target to run before its wrk runs: the SQLite file
    and its WAL read through, or PostgreSQL's tables and indexes read by pg_prewarm."""
    from bench import replay
    from bench.common import PostgresDatabase

    files = sizes.write_files(tmp_path, "w", (workloads.pair_recording(v) for v in range(30)))
    replay.load_bundle(db_url, files.bundle)
    notes: list[str] = []
    if db_url.startswith("sqlite"):
        read: list[Path] = []
        monkeypatch.setattr(sizes, "read_through", lambda *paths: read.extend(paths))
        sizes._warmer(db_url, None, notes)()
        path = Path(db_url.removeprefix("sqlite:///"))
        assert read == [path, path.with_name(path.name + "-wal")] and path.stat().st_size > 0
    else:
        pg = PostgresDatabase()
        pg.url = db_url  # this test's database, not a new one
        blocks = pg.prewarm()
        if blocks is None:
            pytest.skip("pg_prewarm is not usable on this PostgreSQL server (contrib not installed?)")
        assert blocks > 30  # the entries' table, its indexes and more: blocks read
        sizes._warmer(db_url, pg, notes)()
    assert notes == []


def test_a_run_stops_its_servers_and_removes_its_files_when_it_fails(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(runs, "OUT", tmp_path)
    stopped: list[str] = []
    server = SimpleNamespace(name="server", stop=lambda: stopped.append("server"))
    with pytest.raises(KeyboardInterrupt), runs.Run("test") as run:
        url, pg = run.database("sqlite")
        assert url.startswith(f"sqlite:///{run.workdir}/") and pg is None
        run.track(SimpleNamespace(process=server))
        run.track(SimpleNamespace(process=server))  # shared by two targets: stopped once
        (run.workdir / "bodies").write_text("x")
        raise KeyboardInterrupt
    assert stopped == ["server"]
    assert not run.workdir.exists()


def test_an_unknown_database_is_refused_clearly() -> None:
    with pytest.raises(runs.BenchError, match="unknown databases: mysql"):
        runs.parse_dbs("sqlite,mysql")
