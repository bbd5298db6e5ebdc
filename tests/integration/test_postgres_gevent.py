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

    import sys
    import time

    import gevent

    from semula.db import connect
    from semula.db import postgres

    waits = []
    original = postgres._wait_on_gevent

    def counting(gen, fileno):
        waits.append(fileno)
        return original(gen, fileno)

    postgres._wait_on_gevent = counting
    store = connect(sys.argv[1], pool_size=4)
    big = "x" * 300_000  # more than a socket buffer: the statement's send waits to write

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
    workers = [gevent.spawn(reads) for _ in range(12)] + [gevent.spawn(ticker)]
    gevent.joinall([slept, *workers], raise_error=True)
    store.close()
    assert waits, "no statement waited on gevent's watchers"
    assert len(ticks) >= 10, f"the loop was held while a statement ran: {len(ticks)} ticks"
    print("waits", len(waits), "ticks", len(ticks))
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
