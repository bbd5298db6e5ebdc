"""semula.service.versions.VersionReads: concurrent version reads share queries, never an earlier one."""

from __future__ import annotations

import threading
import time

import pytest

from semula.service.versions import VersionReads


class Recorder:
    """A query that takes a while and notes when it began and what it was asked."""

    def __init__(self, fail: bool = False):
        self.began: list[tuple[float, list]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, keys):
        with self.lock:
            self.began.append((time.monotonic(), keys))
        time.sleep(0.01)
        if self.fail:
            raise RuntimeError("database down")
        return {k: ("v", k[1]) for k in keys if k[0] != "gone"}


def ask_concurrently(reads, query, keys, workspace=None):
    asked, got, errors = {}, {}, {}
    start = threading.Barrier(len(keys))

    def one(key):
        start.wait()
        asked[key] = time.monotonic()
        try:
            got[key] = reads.read(workspace, key, query)
        except RuntimeError as exc:
            errors[key] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return asked, got, errors


def test_every_caller_gets_its_own_value_from_a_query_that_began_after_it_asked():
    reads, query = VersionReads(), Recorder()
    keys = [("prj", f"fp{i}") for i in range(40)]
    asked, got, _ = ask_concurrently(reads, query, keys)
    assert got == {k: ("v", k[1]) for k in keys}
    for key in keys:
        [began] = [b for b, ks in query.began if key in ks]  # read by exactly one query
        assert began >= asked[key]
    assert len(query.began) < len(keys)  # and shared: fewer queries than callers


def test_a_missing_project_is_a_value_equal_to_nothing():
    reads, query = VersionReads(), Recorder()
    first = reads.read(None, ("gone", "fp"), query)
    assert first != reads.read(None, ("gone", "fp"), query) and first != ("v", "fp")


def test_a_failed_query_fails_every_caller_it_was_for_and_the_next_ones_query_again():
    reads, failing = VersionReads(), Recorder(fail=True)
    _, got, errors = ask_concurrently(reads, failing, [("prj", f"fp{i}") for i in range(10)])
    assert not got and len(errors) == 10
    assert reads.read(None, ("prj", "fp0"), Recorder()) == ("v", "fp0")


def test_workspaces_are_never_read_in_one_query():
    reads, query = VersionReads(), Recorder()
    barrier = threading.Barrier(2)
    results = {}

    def ask(workspace):
        barrier.wait()
        results[workspace] = ask_concurrently(
            reads, query, [(workspace, f"fp{i}") for i in range(5)], workspace
        )

    threads = [threading.Thread(target=ask, args=(w,)) for w in ("wsp_a", "wsp_b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all({k[0] for k in keys} in ({"wsp_a"}, {"wsp_b"}) for _, keys in query.began)
    assert all(len(got) == 5 for _, got, _ in results.values())


@pytest.mark.parametrize("callers", [1, 3])
def test_nothing_is_left_waiting(callers):
    reads, query = VersionReads(), Recorder()
    ask_concurrently(reads, query, [("prj", f"fp{i}") for i in range(callers)])
    assert reads._rounds.idle()
