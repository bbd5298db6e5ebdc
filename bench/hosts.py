"""Two hosts on one database (issue #48): release latency across hosts, and record-through duplicates.

    .venv/bin/python -m bench.hosts [--db sqlite,postgres] [--rounds 20] [--prompts 10]

Host A (`semula serve`, 2 gevent workers) and host B (1 worker) share one database, each a real
server on 127.0.0.1 (tests.helpers.Server).

- Release: each round parks 5 distinct calls on A, then answers them one by one through B's REST;
  the time from an answer's response to its app's reply (p50, p99 over every call). Targets: p50 <=
  120 ms on PostgreSQL, <= 300 ms on SQLite (A's default 0.2 s poll).
- Duplicates: each of `--prompts` distinct prompts is sent as 6 identical concurrent calls, 3 to
  each host, to a provider that takes 0.3 s; provider calls per distinct prompt (1.0 is single flight
  across the deployment; before decision 0057 it was about one per process).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.common import PostgresDatabase, median, percentile, wait_for
from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, projects, tokens
from tests.fake_upstream import FakeUpstream
from tests.helpers import Server

KEY = "sk-bench-0123456789abcdefghijklmnop"


def post(url: str, body: dict, headers: dict[str, str]) -> requests.Response:
    return requests.post(url, json=body, headers=headers, timeout=60)


def ask(url: str, text: str, headers: dict[str, str]) -> tuple[str, float]:
    """One app call: the answer it got, and when (perf_counter)."""
    reply = post(url, {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}, headers)
    return reply.json()["choices"][0]["message"]["content"], time.perf_counter()


def release_times(
    a: str, b: str, headers: dict[str, str], rounds: int, parked: Callable[[], list[str]]
) -> list[float]:
    """ms from each answer's response (B) to its held call's reply (A)."""
    out: list[float] = []
    url = f"{a}/p/held/v1/chat/completions"
    with requests.Session() as session, ThreadPoolExecutor(5) as pool:
        for r in range(rounds):
            futures = [pool.submit(ask, url, f"round {r} call {n}", headers) for n in range(5)]
            ids = wait_for(lambda: len(parked()) == 5 and parked(), 30, "5 parked calls")
            answered: dict[str, float] = {}
            for pending_id in ids:
                text = f"answer {pending_id}"
                answer = f"{b}/api/v1/pending/{pending_id}/answer"
                session.post(answer, json={"content": text}, headers=headers, timeout=10).raise_for_status()
                answered[text] = time.perf_counter()
            replied = dict(future.result(timeout=60) for future in futures)
            out += [(replied[text] - at) * 1000 for text, at in answered.items()]
    return out


def duplicates(a: str, b: str, headers: dict[str, str], prompts: int) -> None:
    """Send each prompt 6 times at once over both hosts (the provider counts its calls)."""
    urls = [f"{host}/p/through/v1/chat/completions" for host in (a, b)] * 3
    with ThreadPoolExecutor(6) as pool:
        for p in range(prompts):
            answers = list(pool.map(lambda url, text=f"prompt {p}": ask(url, text, headers)[0], urls))
            if len(set(answers)) != 1:
                raise RuntimeError(f"identical calls got different answers: {answers}")


def run(db: str, rounds: int, prompts: int) -> str:
    fake = FakeUpstream(delay=0.3)
    pg = PostgresDatabase().create() if db == "postgres" else None
    with tempfile.TemporaryDirectory() as tmp:
        url = pg.url if pg else f"sqlite:///{tmp}/bench.db"
        store = connect(url, pool_size=2)
        migrate(store)
        ctx = Context(store, Settings.from_env({"SEMULA_DATABASE_URL": url, "SEMULA_UPSTREAM_KEY": KEY}), CLI)
        projects.create(ctx, {"name": "held", "record_timeout": 60})
        projects.create(ctx, {"name": "through", "record_through": True, "upstream_max_calls": 10 * prompts})
        held = projects.get_row(ctx, "held")
        headers = {"Authorization": f"Bearer {tokens.create(ctx, {'role': 'admin'})['token']}"}
        env = {"SEMULA_UPSTREAM_KEY": KEY, "SEMULA_UPSTREAM_URL": fake.url, "SEMULA_LOG_LEVEL": "warning"}
        hosts = [
            Server(url, Path(tmp) / "a.log", workers=2, **env).start(),
            Server(url, Path(tmp) / "b.log", workers=1, **env).start(),
        ]
        lock = threading.Lock()

        def parked() -> list[str]:
            with lock:
                return [row["id"] for row in store.all("parked_in_project", project_id=held["id"])]

        try:
            a, b = (host.url for host in hosts)
            released = release_times(a, b, headers, rounds, parked)
            duplicates(a, b, headers, prompts)
        finally:
            for host in hosts:
                host.stop()
            store.close()
            fake.close()
            if pg:
                pg.drop()
    per_prompt = len(fake.calls) / prompts
    return (
        f"{db}: release across hosts, {len(released)} calls: p50 {median(released):.0f} ms, "
        f"p99 {percentile(released, 99):.0f} ms; record-through, {prompts} prompts x 6 identical calls "
        f"over 2 hosts (3 processes): {len(fake.calls)} provider calls, {per_prompt:.2f} per prompt"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=10)
    args = parser.parse_args()
    for db in args.db.split(","):
        print(run(db, args.rounds, args.prompts), flush=True)


if __name__ == "__main__":
    main()
