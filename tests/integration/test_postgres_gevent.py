"""PostgreSQL in a gevent worker: psycopg's waits go to gevent's own watchers (semula.db.postgres,
Recording.wait) and a statement in flight lets the worker's other greenlets run.

The test suite's processes are not monkey-patched, so this runs in a child process that is, as a
gunicorn gevent worker is before it imports the app.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()

    import os
    import socket
    import sys
    import time

    import gevent

    from semula.db import connect
    from semula.db import postgres

    asked = []  # what each statement's generator waited for (psycopg.waiting.Wait)
    original = postgres._wait_on_gevent

    def counting(gen, fileno):
        def watched():
            try:
                wanted = next(gen)
                while True:
                    asked.append(wanted)
                    wanted = gen.send((yield wanted))
            except StopIteration as done:
                return done.value

        return original(watched(), fileno)

    postgres._wait_on_gevent = counting
    store = connect(sys.argv[1], pool_size=4)
    big = "x" * 300_000

    def sent_in_parts():
        # A send buffer of a few KiB: the 300 KB statement cannot go in one send() (loopback TCP
        # takes megabytes), so libpq waits to read or write until it is flushed.
        with store._conn() as conn:
            raw = socket.socket(fileno=os.dup(conn.raw.pgconn.socket))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            os.close(raw.detach())  # the dup only: the option is the socket's
            [length] = conn.raw.execute("SELECT length(%s)", (big,)).fetchone().values()
        assert length == len(big)

    def reads():
        for _ in range(10):
            assert store.one("ping") is not None
            assert store.all("calls_in_project", project_id=big) == []
            assert store.version("wsp_default") is not None

    ticks = []

    def sleeper():
        with store._conn() as conn:
            conn.raw.execute("SELECT pg_sleep(0.5)")

    def ticker():
        while not slept.ready():
            ticks.append(time.monotonic())
            gevent.sleep(0.02)

    slept = gevent.spawn(sleeper)
    workers = [gevent.spawn(reads) for _ in range(12)] + [gevent.spawn(ticker), gevent.spawn(sent_in_parts)]
    gevent.joinall([slept, *workers], raise_error=True)
    store.close()
    from psycopg.waiting import Wait

    assert Wait.R in asked, "no statement waited on gevent's watchers"
    assert Wait.RW in asked, "the statement sent in parts never waited to read or write"
    assert len(ticks) >= 10, f"the loop was held while a statement ran: {len(ticks)} ticks"
    print("waits", len(asked), "ticks", len(ticks))
    """
)


def test_statements_wait_on_gevent_and_let_other_greenlets_run(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip(
            "SQLite's calls block the worker by design (Store.blocks_process); its writes are offloaded"
        )
    done = subprocess.run([sys.executable, "-c", CHILD, db_url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("waits "), done.stdout
