"""Replay hits per API: the recorded pair as a Chat Completions request and as a Responses API, an
Anthropic Messages and a Gemini API request of the same size, served by one semula process, measured
side by side in interleaved rounds.

The targets (issues #17, #18 and #47): a Responses, a Messages and a Gemini hit at >= 0.9 x the Chat
Completions hit rate, on SQLite and PostgreSQL. Beside them, the same Chat Completions request with
`"stream": true` (a transport field: the same recording answers it as server-sent events), whose
target (issue #22) is >= 0.8 x the non-stream rate; the Gemini request streamed
(`:streamGenerateContent?alt=sse`, what Gemini CLI sends), >= 0.8 x the Chat Completions hit. And the
Responses request as turns on WebSockets
(bench.websocket, issue #47: >= 0.9 x the Chat Completions hit, with the turns' p50 and p99), and
the same turns on one socket (their p50 and p99 without 49 other sockets queued in front).
`python -m bench dialects [--db sqlite,postgres]`.
"""

from __future__ import annotations

import json

import requests

from bench import pair, replay, runs, websocket
from bench.common import BenchError, median, require_tool

TARGET = 0.9
STREAM_TARGET = 0.8
STREAM = "Chat Completions, stream"
GEMINI_STREAM = "Gemini, stream"


def stream_text(body: bytes) -> dict[str, str]:
    """The text of a Chat Completions stream: its chunks' content deltas, joined."""
    text = []
    for line in body.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[len("data: ") :]).get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
    return {"text": "".join(text)}


def gemini_stream_text(body: bytes) -> dict[str, str]:
    """The text of a Gemini stream (alt=sse): its chunks' text parts, joined."""
    text = []
    for line in body.decode().splitlines():
        if line.startswith("data: "):
            for candidate in json.loads(line[len("data: ") :]).get("candidates", []):
                text += [part.get("text", "") for part in candidate.get("content", {}).get("parts", [])]
    return {"text": "".join(text)}


# The other APIs measured against Chat Completions: label, dialect, route (in place of
# /v1/chat/completions), the pair's body, where the recorded text is in the response.
GEMINI_ROUTE = f"/v1beta/models/{pair.GEMINI_MODEL}:generateContent"
OTHERS = (
    (
        "Responses",
        "openai.responses",
        "/v1/responses",
        pair.responses_body,
        lambda d: d["output"][0]["content"][0],
    ),
    ("Messages", "anthropic.messages", "/v1/messages", pair.messages_body, lambda d: d["content"][0]),
    (
        "Gemini",
        "gemini.generate_content",
        GEMINI_ROUTE,
        pair.gemini_body,
        lambda d: d["candidates"][0]["content"]["parts"][0],
    ),
)


def load(db_url: str) -> str:
    """Record every form of the pair (the chat one as bench.replay does) and return a replay token."""
    from semula import dialects
    from semula.service import pending, projects

    token = replay.load_pair(db_url)
    with replay.service(db_url) as ctx:
        projects.update(ctx, replay.PROJECT, {"mode": "record"})
        row = projects.get_row(ctx, replay.PROJECT)
        for _, api, route, make_body, _ in OTHERS:
            body, dialect = make_body(), dialects.get(api)
            if route == GEMINI_ROUTE:  # the stored request has the path's model
                body = dialect.with_route(body, pair.GEMINI_MODEL, "generateContent")
            fingerprint = dialect.fingerprint(body, [], [])
            pending_id = pending.park(ctx, row, fingerprint, body, False, api=dialect.name)
            assert pending_id is not None
            pending.answer(
                ctx, pending_id, {"content": pair.ANSWER_TEXT}, actor="import", summary="bench pair"
            )
        projects.update(ctx, replay.PROJECT, {"mode": "replay"})
    return token


def check(target: replay.Target, text_of) -> None:
    got = requests.post(target.url, data=target.body, headers=target.headers, timeout=10)
    if got.status_code != 200:
        raise BenchError(f"{target.name} answered {got.status_code}: {got.text[:300]}")
    streamed = target.name.endswith((STREAM, GEMINI_STREAM))
    if text_of(got.content if streamed else got.json())["text"] != pair.ANSWER_TEXT:
        raise BenchError(f"{target.name} answered something else than the recorded answer")


def run(
    *, duration: int = 10, rounds: int = 3, warmup: int = 5, dbs: tuple[str, ...] = ("sqlite", "postgres")
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    targets: list[replay.Target] = []
    with runs.Run("dialects") as run:
        for db in dbs:
            url, pg = run.database(db)
            token = load(url)
            chat = run.track(
                replay.start_semula(f"{db}: Chat Completions", f"semula-{db}", url, token, database=pg)
            )
            chat.body = pair.request_bytes()
            chat.headers["Content-Type"] = "application/json"
            measured = [(chat, lambda d: {"text": d["choices"][0]["message"]["content"]})]
            for label, _, path, make_body, text_of in OTHERS:
                other = replay.Target(
                    f"{db}: {label}",
                    chat.url.replace("/v1/chat/completions", path),
                    {**chat.headers, "anthropic-version": "2023-06-01"}
                    if path == "/v1/messages"
                    else dict(chat.headers),
                    body=json.dumps(make_body()).encode(),
                )
                # One server answers all: the CPU of each run is its own.
                other.process, other.database = chat.process, chat.database
                measured.append((other, text_of))
            stream = replay.Target(
                f"{db}: {STREAM}",
                chat.url,
                dict(chat.headers),
                body=json.dumps({**pair.request_body(), "stream": True}).encode(),
            )
            stream.process, stream.database = chat.process, chat.database
            measured.append((stream, stream_text))
            # What Gemini CLI sends for every turn: the Gemini pair streamed (the same recording).
            gemini_stream = replay.Target(
                f"{db}: {GEMINI_STREAM}",
                chat.url.replace(
                    "/v1/chat/completions", GEMINI_ROUTE.replace(":generateContent", ":streamGenerateContent")
                )
                + "?alt=sse",
                dict(chat.headers),
                body=json.dumps(pair.gemini_body()).encode(),
            )
            gemini_stream.process, gemini_stream.database = chat.process, chat.database
            measured.append((gemini_stream, gemini_stream_text))
            for target, text_of in measured:
                check(target, text_of)
                if warmup:
                    replay.warm_up(target, warmup)
                targets.append(target)
            turns = replay.Target(
                f"{db}: {websocket.LABEL}",
                chat.url.replace("/chat/completions", "/responses"),
                dict(chat.headers),
                chat.process,
                chat.database,
                runner=websocket.run_turns,
            )
            if warmup:
                websocket.run_turns(turns, warmup)
            targets.append(turns)
            # The same turns one after another on one socket: their own latency, no queue in front.
            single = replay.Target(
                f"{db}: {websocket.ONE_SOCKET}",
                turns.url,
                dict(chat.headers),
                chat.process,
                chat.database,
                connections=1,
                runner=websocket.run_turns,
            )
            targets.append(single)
        runs.interleave(targets, rounds=rounds, duration=duration)
        return report(targets, duration, rounds)


def report(targets: list[replay.Target], duration: int, rounds: int) -> str:
    sizes = ", ".join(
        f"a {len(json.dumps(make_body()))} B {label} request" for label, _, _, make_body, _ in OTHERS
    )
    lines = [
        f"Replay hits per API: wrk -t{replay.THREADS} -c{replay.CONNECTIONS} -d{duration}s --latency; the "
        f"pair as a {len(pair.request_bytes())} B Chat Completions request, {sizes}; medians of {rounds} "
        "interleaved rounds.",
        "",
        "| server and API | req/s | p50 ms | p99 ms | server CPU µs/req | client CPU µs/req "
        "| × Chat Completions |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    chat_rps: dict[str, float] = {}
    verdicts = []
    for t in targets:
        rps = median([r["rps"] for r in t.rounds])
        db, api = t.name.split(": ")
        if api == "Chat Completions":
            chat_rps[db] = rps
        ratio = rps / chat_rps[db] if db in chat_rps else float("nan")
        p50, p99 = median([r["p50_ms"] for r in t.rounds]), median([r["p99_ms"] for r in t.rounds])
        cpu = median([r["cpu_us"] for r in t.rounds])
        client = median([r.get("client_cpu_us", float("nan")) for r in t.rounds])
        lines.append(
            f"| {t.name} | {rps:,.0f} | {p50:.2f} | {p99:.1f} | {cpu:.0f} | {client:.0f} | {ratio:.2f} |"
        )
        if api not in ("Chat Completions", websocket.ONE_SOCKET):  # one socket: its latency only
            goal = STREAM_TARGET if api in (STREAM, GEMINI_STREAM) else TARGET
            verdict = "met" if ratio >= goal else "NOT met"
            verdicts.append(f"- {db}: {api} at {ratio:.2f} × Chat Completions (target {goal}): {verdict}")
    target = (
        f"Targets: a Responses, a Messages and a Gemini hit and a WebSocket turn ≥ {TARGET} × a Chat "
        f"Completions hit; the Chat Completions stream ≥ {STREAM_TARGET} × the same request without stream, "
        f"the Gemini stream ≥ {STREAM_TARGET} × the Chat Completions hit."
    )
    notes = [websocket.summary(t) for t in targets if t.runner is websocket.run_turns]
    return "\n".join([*lines, "", target, *verdicts, *notes])
