"""Claims under load: 8 processes (spawned, not threads) claim from one queue on SQLite and PostgreSQL.

The claim is docs/design/queue-and-claims.md.

Every call is claimed exactly once and none is lost; a call whose lease expired is claimed again,
and a call whose lease runs is never claimed by anyone else.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict

from semula.config import Settings
from semula.core.ids import new_id
from semula.db import Store, connect
from semula.service import Context, Principal, dumps, projects
from semula.service import pending as pending_service
from tests.helpers import wait_for

PROCESSES = 8
SHORT, LONG = 1, 3600
EDITOR = Principal(workspace_id="wsp_default", role="editor", scope="record", actor="tok_race")


def insert_pending_rows(store: Store, project_id: str, count: int) -> list[str]:
    """Park count distinct calls in one transaction, straight through the store."""
    ids = []
    request = dumps({"model": "m", "messages": [{"role": "user", "content": "race"}]})
    with store.transaction("wsp_default") as tx:
        for i in range(count):
            pending_id = new_id("pending")
            tx.run(
                "insert_pending",
                id=pending_id,
                workspace_id="wsp_default",
                project_id=project_id,
                fingerprint=f"v1:race:{i}",
                model="m",
                request=request,
                stream=0,
                api="openai.chat",
                seq=1,
                held_until=None,
                max_misses=count + 1,
                now=time.time(),
            )
            ids.append(pending_id)
    return ids


def claimer(db_url: str, worker: str, lease: int, start, out, stop_at: float) -> None:
    """Claim until there is nothing left (or stop_at); report (id, started, finished, lease) per claim."""
    store = connect(db_url, pool_size=1)
    ctx = Context(store, Settings(database_url=db_url), EDITOR)
    claims = []
    try:
        start.wait(60)  # every claimer is connected before any claims, so all of them race
        while time.time() < stop_at:
            started = time.time()
            claimed = pending_service.claim_next(ctx, lease_seconds=lease, worker=worker)
            if claimed is None:
                break
            claims.append((claimed["id"], started, time.time(), lease))
    finally:
        out.put((worker, claims))
        store.close()


def run_claimers(
    db_url: str, leases: list[int], stop_after: float = 120
) -> list[tuple[str, float, float, int]]:
    """Run one claimer process per lease, started together; every claim any of them made."""
    mp = multiprocessing.get_context("spawn")
    start, out = mp.Barrier(len(leases)), mp.Queue()
    stop_at = time.time() + stop_after
    procs = [
        mp.Process(target=claimer, args=(db_url, f"w{i}", lease, start, out, stop_at))
        for i, lease in enumerate(leases)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=stop_after + 60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return [claim for _, claims in results for claim in claims]


def test_2000_calls_are_each_claimed_exactly_once(ctx, db_url):
    project = projects.create(ctx, {"name": "race"})
    parked = insert_pending_rows(ctx.store, project["id"], 2000)
    claims = run_claimers(db_url, [LONG] * PROCESSES)
    claimed = [c[0] for c in claims]
    assert len(claimed) == len(set(claimed)), "a call was claimed twice"
    assert sorted(claimed) == sorted(parked), "a call was lost"
    listing = pending_service.list_pending(ctx, limit=1000)["data"]
    assert all(p["claimed_by"] in {f"w{i}" for i in range(PROCESSES)} for p in listing)


def test_expired_leases_are_claimed_again_and_running_ones_never(ctx, db_url):
    project = projects.create(ctx, {"name": "race"})
    parked = insert_pending_rows(ctx.store, project["id"], 600)
    # Half the claimers take 1-second leases, which expire while the others still claim.
    first = run_claimers(db_url, [SHORT, LONG] * (PROCESSES // 2), stop_after=60)
    by_call = defaultdict(list)
    for claim in sorted(first, key=lambda c: c[1]):
        by_call[claim[0]].append(claim)
    assert sorted(by_call) == sorted(parked), "a call was lost"
    for claims in by_call.values():
        for i, one in enumerate(claims):
            for other in claims[i + 1 :]:
                # Each claim took effect between its start and its finish, and a lease runs from there.
                # Of two claims of one call, one took effect after the other's lease had ended: the
                # other's start + lease is before its finish. Order by start is not that order on a
                # loaded machine (a claim started first may take effect last), so either order may hold.
                assert other[2] >= one[1] + one[3] or one[2] >= other[1] + other[3], (
                    f"claimed during a running lease: {one} {other}"
                )
    last_lease = {call: claims[-1] for call, claims in by_call.items()}
    expiring = {call for call, c in last_lease.items() if c[3] == SHORT}
    held = set(last_lease) - expiring
    # An expired lease was claimed again here already (a call with two claims), or is left to the
    # second round (a call whose last lease is short): on a loaded machine every short lease may have
    # expired and been taken by a long one before the claimers stopped, leaving none for the second.
    assert held and (expiring or any(len(claims) > 1 for claims in by_call.values()))

    latest_end = max((c[2] + c[3] for c in last_lease.values() if c[3] == SHORT), default=0.0)
    wait_for(lambda: time.time() > latest_end + 0.05, timeout=10, what="the short leases to end")
    second = [c[0] for c in run_claimers(db_url, [LONG] * PROCESSES)]
    assert len(second) == len(set(second)), "a call was claimed twice"
    assert set(second) == expiring, "an expired call was not claimed again, or a held one was"
