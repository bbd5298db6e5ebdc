"""Call-log retention on SQLite and PostgreSQL: batches, the periodic pruner, `semula prune-logs`."""

from __future__ import annotations

import threading
import time

from click.testing import CliRunner

from semula.service import projects
from semula.service.calllog import CallLog
from semula.service.retention import DAY, prune_call_log, start_pruner
from semula.surfaces.cli import main
from tests.helpers import call_row, wait_for


def fill(ctx, project_id, ages_in_days):
    log = CallLog(ctx.store)
    now = time.time()
    for age in ages_in_days:
        log.record(call_row(project_id=project_id, created_at=now - age * DAY))


def remaining(ctx, project_id):
    return len(ctx.store.all("calls_in_project", project_id=project_id))


def test_prune_deletes_only_expired_rows_in_small_batches(ctx):
    project = projects.create(ctx, {"name": "shop"})
    fill(ctx, project["id"], [20] * 7 + [15, 13.9, 1, 0])
    statements = []
    original = ctx.store.run

    def counting(name, /, **params):
        statements.append(name)
        return original(name, **params)

    ctx.store.run = counting
    assert prune_call_log(ctx.store, 14, batch=3) == 8
    # 8 expired rows, 3 per statement: 3, 3, 2 (the short batch ends the loop).
    assert statements == ["prune_call_log"] * 3
    assert remaining(ctx, project["id"]) == 3
    assert prune_call_log(ctx.store, 14, batch=3) == 0


def test_the_periodic_pruner_runs_until_stopped(ctx):
    project = projects.create(ctx, {"name": "shop"})
    fill(ctx, project["id"], [30, 30, 0])
    stop = threading.Event()
    thread = start_pruner(ctx.store, 14, interval=0.05, stop=stop)
    wait_for(lambda: remaining(ctx, project["id"]) == 1, what="expired rows pruned")
    fill(ctx, project["id"], [40])
    wait_for(lambda: remaining(ctx, project["id"]) == 1, what="rows pruned again on the next run")
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_prune_logs_command(ctx, db_url, monkeypatch):
    project = projects.create(ctx, {"name": "shop"})
    fill(ctx, project["id"], [3, 3, 1])
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    monkeypatch.setenv("SEMULA_LOG_RETENTION_DAYS", "30")
    result = CliRunner().invoke(main, ["prune-logs"])
    assert result.exit_code == 0 and "deleted 0 call-log row(s) older than 30 day(s)" in result.output
    result = CliRunner().invoke(main, ["prune-logs", "--days", "2"])
    assert result.exit_code == 0 and "deleted 2" in result.output
    assert remaining(ctx, project["id"]) == 1
