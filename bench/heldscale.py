"""Held calls at a host's scale (issue 52): N distinct calls held by as many workers as that takes.

    python -m bench heldscale --db sqlite,postgres --calls 50000 [--per-worker 12500]

One `semula serve` host with ceil(N / per-worker) gevent workers, each taking up to per-worker + 2,500
connections (SEMULA_WORKER_CONNECTIONS), under a 20,000 open-file limit per process. The clients are
`bench.holdclient` processes of at most CLIENT_CALLS calls each, each bound to a loopback address of its
own (one source address has ~28,000 ephemeral ports towards one server port).

1. Park: every client sends its calls; the time until the host's semula_held_calls reaches N (target
   60 s), and the workers' memory per held call (their RSS after a warm-up and while holding, the
   difference / N; target 30 KiB).
2. Restart: the host is killed (SIGKILL to its process group, as a crash or a machine going down) with N
   calls pending, and started again: the time from the start to its first /healthz 200, to a replay hit
   and to the first page of `GET /api/v1/pending` (target 10 s); the N rows are still pending. The
   clients, reset, send their calls again (an app's retry): they join the rows; parked again in ...
3. Answer: 8 threads answer every call over REST (`POST /api/v1/pending/ID/answer`), fed by one thread
   paging `GET /api/v1/pending?limit=500`; the release latency is the time from the answer's commit
   (the row's resolved_at) to the whole response at the client (p99 target 250 ms), and every call must
   come back with its own answer (none lost).

Throughout, a prober GETs /healthz on a new connection every 50 ms: p99 target 100 ms.
"""

from __future__ import annotations

import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import requests

from bench import holdclient
from bench.common import (
    OUT,
    BenchError,
    PostgresDatabase,
    percentile,
    raise_nofile,
    rss_kib,
    semula_server,
    wait_for,
)
from bench.hold import PROJECT, metrics, prepare, tear_down, warm_up

WINDOW = 1_000  # calls sent and not yet held at once, across the clients (below the listen backlog, 2,048)
CLIENT_CALLS = 10_000  # calls per client process: its sockets stay well under the 20,000 files a process has
ANSWER_THREADS = 8
PAGE = 500
PROBE_EVERY = 0.05
RECORD_TIMEOUT = 3600  # the longest there is: a loaded machine may take long to answer 50,000
PARK_PATIENCE = 1800
BACKLOG = "backlog"


class Prober(threading.Thread):
    """GET /healthz on a new connection every PROBE_EVERY s; latencies (s) by phase, failures counted."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.phase = "idle"
        self.times: dict[str, list[float]] = {}
        self.failures: dict[str, int] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(PROBE_EVERY):
            phase, started = self.phase, time.perf_counter()
            if phase == "down":
                continue
            try:
                ok = requests.get(self.url + "/healthz", timeout=10).status_code == 200
            except requests.RequestException:
                ok = False
            if ok:
                self.times.setdefault(phase, []).append(time.perf_counter() - started)
            else:
                self.failures[phase] = self.failures.get(phase, 0) + 1

    def p99_ms(self, phase: str) -> str:
        times = self.times.get(phase, [])
        failures = self.failures.get(phase, 0)
        if not times:
            return f"n/a ({failures} failed)"
        p99, top = 1000 * percentile(times, 99), 1000 * max(times)
        return f"{p99:.0f} ms (n={len(times)}, max {top:.0f}, {failures} failed)"


def start_clients(
    url: str, token: str, calls: int, workdir: Any, tag: str, net: int = 1
) -> list[subprocess.Popen[bytes]]:
    """The client processes, on source addresses 127.0.`net`.10 and up (a client binds a port of its
    own address whatever the server: runs side by side take different `net`s)."""
    clients = []
    for k, first in enumerate(range(0, calls, CLIENT_CALLS)):
        n = min(CLIENT_CALLS, calls - first)
        clients.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.holdclient",
                    url,
                    f"/p/{PROJECT}/v1/chat/completions",
                    str(n),
                    token,
                    str(workdir / f"client-{tag}-{k}.json"),
                    "--deadline",
                    str(RECORD_TIMEOUT - 60),
                    "--first",
                    str(first),
                    "--source",
                    f"127.0.{net + k // 200}.{10 + k % 200}",
                    "--budget",
                    str(workdir / "budget"),
                ]
            )
        )
    return clients


def client_results(workdir: Any, tag: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for path in sorted(workdir.glob(f"client-{tag}-*.json")):
        results.update(json.loads(path.read_text())["results"])
    return results


def held(url: str) -> float:
    try:
        return metrics(url).get("semula_held_calls", 0.0)
    except requests.RequestException:
        return -1.0


def answer_all(url: str, token: str, numbers: dict[str, int]) -> tuple[float, int]:
    """Every pending call of the project answered over REST by ANSWER_THREADS threads; (seconds, answered)."""
    headers = {"Authorization": f"Bearer {token}"}
    todo: queue.Queue[str | None] = queue.Queue(maxsize=4 * PAGE)
    answered = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def lister() -> None:
        after = None
        with requests.Session() as session:
            while True:
                params = {"project": PROJECT, "limit": str(PAGE), **({"after": after} if after else {})}
                reply = session.get(f"{url}/api/v1/pending", params=params, headers=headers, timeout=300)
                reply.raise_for_status()
                page = reply.json()
                for row in page["data"]:
                    todo.put(row["id"])
                if not page["has_more"]:
                    break
                after = page["data"][-1]["id"]
        for _ in range(ANSWER_THREADS):
            todo.put(None)

    def answerer() -> None:
        with requests.Session() as session:
            while (pid := todo.get()) is not None:
                number = numbers[pid]
                try:
                    reply = session.post(
                        f"{url}/api/v1/pending/{pid}/answer",
                        json={"content": holdclient.answer_text(number)},
                        headers=headers,
                        timeout=300,
                    )
                except requests.RequestException as exc:
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                with lock:
                    if reply.status_code == 200:
                        answered[0] += 1
                    else:
                        errors.append(f"{reply.status_code} {reply.text[:200]}")

    started = time.monotonic()
    threads = [threading.Thread(target=lister)] + [
        threading.Thread(target=answerer) for _ in range(ANSWER_THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(f"{len(errors)} answers refused, the first: {errors[0]}")
    return time.monotonic() - started, answered[0]


def restart(server: Any, url: str) -> tuple[float, float]:
    """Kill the host (SIGKILL to its process group, as a crash) and start it again: the seconds to its
    first /healthz 200, and the CPU seconds its processes spent by then (load-insensitive)."""
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    started = time.monotonic()
    server.start(url + "/healthz", timeout=120)
    return time.monotonic() - started, server_cpu(server)


def note(figures: dict[str, Any], name: str, value: Any) -> None:
    """Keep a figure, and print it at once: a run the machine cannot finish still shows its first ones."""
    figures[name] = value
    print(f"heldscale: {name}: {value}", file=sys.stderr, flush=True)


def fill_backlog(ctx: Any, calls: int) -> str:
    """`calls` distinct calls parked in project BACKLOG straight through the store, nobody holding them;
    a token that lists them."""
    from semula.core import fingerprint as fp
    from semula.core.ids import new_id
    from semula.service import dumps, projects, tokens

    project = projects.create(ctx, {"name": BACKLOG, "mode": "record", "max_misses": calls + 100})
    for first in range(0, calls, 1000):
        with ctx.store.transaction("wsp_default") as tx:
            for number in range(first, min(calls, first + 1000)):
                body = holdclient.request_body(1_000_000 + number)
                tx.run(
                    "insert_pending",
                    id=new_id("pending"),
                    workspace_id="wsp_default",
                    project_id=project["id"],
                    fingerprint=fp.fingerprint(body),
                    model=body["model"],
                    request=dumps(body),
                    stream=0,
                    api="openai.chat",
                    seq=1,
                    held_until=time.time() + 30,
                    max_misses=calls + 100,
                    now=time.time(),
                )
    made = tokens.create(ctx, {"role": "viewer", "scope": "record", "project": BACKLOG, "name": "backlog"})
    return made["token"]


def numbers_by_id(ctx: Any, project_id: str, calls: int) -> dict[str, int]:
    """Which call number each pending row of the project is (by its request's fingerprint)."""
    from semula.core import fingerprint as fp

    by_fingerprint = {fp.fingerprint(holdclient.request_body(n)): n for n in range(calls)}
    rows = ctx.store.all("parked_in_project", project_id=project_id)
    return {
        row["id"]: by_fingerprint[row["fingerprint"]] for row in rows if row["fingerprint"] in by_fingerprint
    }


def resolved_at(ctx: Any, project_id: str) -> dict[str, float]:
    """Each answered call's commit time (resolved_at), by pending id."""
    out: dict[str, float] = {}
    after = None
    while True:
        rows = ctx.store.all(
            "list_pending",
            workspace_id="wsp_default",
            project_id=project_id,
            status="answered",
            abandoned=None,
            after=after,
            limit=5000,
            now=time.time(),
        )
        out.update((row["id"], row["resolved_at"]) for row in rows)
        if len(rows) < 5000:
            return out
        after = rows[-1]["id"]


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def server_cpu(server: Any) -> float:
    """CPU seconds of the host's processes so far."""
    return sum(server.cpu_by_pid().values())


def workers_rss(server: Any) -> int:
    return sum(rss_kib(pid) for pid in server.children())


def wait_held(
    url: str, calls: int, timeout: float, clients: list[subprocess.Popen[bytes]], workdir: Any
) -> float:
    """Seconds until the host holds `calls`, the clients paced to WINDOW calls sent and not yet held
    (each may have started its share of held + WINDOW)."""
    started = time.monotonic()
    budget = workdir / "budget"

    def done() -> bool:
        if any(c.poll() not in (None, 0) for c in clients):
            raise BenchError("a held-calls client failed while parking")
        now_held = held(url)
        allowed = math.ceil((max(0.0, now_held) + WINDOW) / len(clients))
        (workdir / "budget.new").write_text(str(allowed))
        (workdir / "budget.new").replace(budget)
        return now_held >= calls

    wait_for(done, timeout, f"{calls} held calls", interval=0.2)
    return time.monotonic() - started


def run(*, db: str = "postgres", calls: int = 50_000, per_worker: int = 12_500) -> str:
    from semula.service import projects

    raise_nofile(20_000)
    net = 1 if db == "sqlite" else 11
    workers = math.ceil(calls / per_worker)
    connections = min(per_worker + 2_500, 19_000)
    pg = PostgresDatabase().create() if db == "postgres" else None
    workdir = OUT / f"heldscale-{db}-{int(time.time())}"
    workdir.mkdir(parents=True)
    # The server's name, so its metrics directory is this run's alone: a second run's `semula serve`
    # empties the directory it is given, and the first one's held calls would vanish from /metrics.
    db_url = pg.url if pg else f"sqlite:///{workdir}/semula.db"
    server = None
    clients: list[subprocess.Popen[bytes]] = []
    prober: Prober | None = None
    ctx = None
    figures: dict[str, Any] = {"load before": load()}
    try:
        ctx, token = prepare(db_url, calls)
        project_id = projects.get_row(ctx, PROJECT)["id"]
        env = {
            "SEMULA_WORKER_CONNECTIONS": str(connections),
            "SEMULA_POLL_INTERVAL": "0.2",
        }
        server, url = semula_server(workdir.name, db_url, auth=True, workers=workers, **env)
        warm_up(ctx, url, token, project_id)
        time.sleep(1)
        prober = Prober(url)
        prober.start()

        # 1. Restart with N calls pending (parked straight through the store, in a project of their
        # own: a host killed with its calls held leaves them so, and they are no longer held).
        headers = {"Authorization": f"Bearer {token}"}
        prober.phase = "down"
        note(figures, "up empty", restart(server, url))
        lister = {"Authorization": f"Bearer {fill_backlog(ctx, calls)}"}
        started = time.monotonic()
        note(figures, "up", restart(server, url))
        hit = requests.post(
            f"{url}/p/{PROJECT}/v1/chat/completions",
            json=holdclient.request_body(-1),
            headers=headers,
            timeout=60,
        )
        note(figures, "hit", time.monotonic() - started)
        page = requests.get(f"{url}/api/v1/pending", params={"project": BACKLOG}, headers=lister, timeout=60)
        note(figures, "page", time.monotonic() - started)
        if hit.status_code != 200 or page.status_code != 200:
            raise BenchError(f"after the restart: replay {hit.status_code}, listing {page.status_code}")
        backlog_id = projects.get_row(ctx, BACKLOG)["id"]
        still = len(ctx.store.all("parked_in_project", project_id=backlog_id))
        note(figures, "kept", f"{still:,} of {calls:,}")
        time.sleep(1)
        rss_before = workers_rss(server)
        prober.phase = "idle"

        # 2. Park.
        prober.phase = "parking"
        (workdir / "budget").write_text(str(math.ceil(WINDOW / math.ceil(calls / CLIENT_CALLS))))
        cpu = server_cpu(server)
        clients = start_clients(url, token, calls, workdir, "a", net)
        note(figures, "parked in", wait_held(url, calls, PARK_PATIENCE, clients, workdir))
        note(figures, "cpu park", 1000 * (server_cpu(server) - cpu) / calls)
        prober.phase = "holding"
        cpu = server_cpu(server)
        time.sleep(5)
        note(figures, "cpu hold", (server_cpu(server) - cpu) / 5)
        note(figures, "memory", (workers_rss(server) - rss_before) / calls)
        note(figures, "load holding", load())

        # 3. Answer over REST.
        numbers = numbers_by_id(ctx, project_id, calls)
        if len(numbers) != calls:
            raise BenchError(f"{len(numbers)} pending rows for {calls} calls")
        prober.phase = "answering"
        cpu = server_cpu(server)
        answered_in, answered = answer_all(url, token, numbers)
        note(figures, "answered in", answered_in)
        note(figures, "cpu answer", 1000 * (server_cpu(server) - cpu) / calls)
        note(figures, "load answering", load())
        for client in clients:
            if client.wait(300) != 0:
                raise BenchError("a held-calls client failed")
        clients = []
        prober.phase = "done"
        committed = resolved_at(ctx, project_id)
        results = client_results(workdir, "a")
        number_to_id = {n: pid for pid, n in numbers.items()}
        good = [
            n for n in range(calls) if results.get(str(n), [0, 0, False])[0] == 200 and results[str(n)][2]
        ]
        latencies = [results[str(n)][1] - committed[number_to_id[n]] for n in good]
    finally:
        if prober is not None:
            prober.stopped.set()
        tear_down(clients, server, ctx, pg, workdir)
        shutil.rmtree(OUT / f"{workdir.name}-metrics", ignore_errors=True)

    lines = [
        f"{calls:,} distinct calls held by one host (`semula serve`, {workers} workers of "
        f"{connections:,} connections, {'PostgreSQL' if pg else 'SQLite'}, SEMULA_POLL_INTERVAL=0.2, "
        "auth on), "
        f"clients in {math.ceil(calls / CLIENT_CALLS)} processes; load {figures['load before']} before, "
        f"{figures['load holding']} holding, {figures['load answering']} answering.",
        "",
        "| measure | value | target |",
        "|---|---:|---:|",
        f"| all parked in | {figures['parked in']:.1f} s | ≤ 60 s |",
        f"| host CPU per parked call (all its processes) | {figures['cpu park']:.2f} ms | |",
        f"| host CPU while holding, idle | {100 * figures['cpu hold']:.0f}% of a core | |",
        f"| memory per held call (workers' RSS) | {figures['memory']:.1f} KiB | ≤ 30 KiB |",
        "| restart with none pending: /healthz 200 after, host CPU by then | "
        f"{figures['up empty'][0]:.2f} s, {figures['up empty'][1]:.2f} s | |",
        f"| restart with {calls:,} calls pending: /healthz 200 after, host CPU by then | "
        f"{figures['up'][0]:.2f} s, {figures['up'][1]:.2f} s | ≤ 10 s |",
        f"| ... a replay hit after | {figures['hit']:.2f} s | |",
        f"| ... the first page of pending after | {figures['page']:.2f} s | |",
        f"| pending rows across the restart | {figures['kept']} | all |",
        f"| answered over REST by {ANSWER_THREADS} threads in | {figures['answered in']:.1f} s "
        f"({answered / figures['answered in']:,.0f} answers/s) | |",
        f"| host CPU per answer and release | {figures['cpu answer']:.2f} ms | |",
        f"| answer-to-release p50 / p99 (commit to response) | {1000 * percentile(latencies, 50):.0f} / "
        f"{1000 * percentile(latencies, 99):.0f} ms | p99 ≤ 250 ms |",
        f"| calls released with their own answer | {len(good):,} of {calls:,} | all |",
    ]
    for phase in ("idle", "parking", "holding", "answering"):
        lines.append(f"| /healthz p99, {phase} | {prober.p99_ms(phase)} | ≤ 100 ms |")
    return "\n".join(lines)
