"""bench.sight_split's report: a first sight's server CPU split by where it went, as ratios to the floor
of the same round."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

from bench import sight_split
from bench.sight_split import BACKENDS, LOOP, NATIVE


def test_each_round_is_compared_with_the_floor_of_that_round() -> None:
    floor = [(1000, {LOOP: (0.040, 0.010)}, {}), (1000, {LOOP: (0.080, 0.020)}, {})]  # 50, then 100 µs
    semula = [
        (1000, {LOOP: (0.090, 0.010), NATIVE: (0.010, 0.0)}, {"xact_commit": 1.0}),  # 110 µs: 2.2 ×
        (2000, {LOOP: (0.200, 0.020), BACKENDS: (0.020, 0.0)}, {"xact_commit": 0.5}),  # 120 µs: 1.2 ×
    ]
    results = {(2048, "floor"): floor, (2048, "semula"): semula}
    args = SimpleNamespace(rounds=2, duration=4)
    lines = sight_split.report(results, (2048,), ["floor", "semula"], args).splitlines()
    [row] = [line for line in lines if line.startswith("| 2 | semula |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # The medians of the CPU (115 µs) and of the rounds' ratios (1.7 ×), not the ratio of the medians.
    assert cells[2:4] == ["115", "1.70"]
    assert cells[4] == "95/10"  # the event loop's user and system time a request, medians
    assert cells[-1] == "xact_commit 0.75"


def test_a_task_is_named_by_the_part_of_the_server_it_is() -> None:
    target = SimpleNamespace(process=SimpleNamespace(proc=SimpleNamespace(pid=10)))
    assert sight_split.role(target, 10, 10, set()) == sight_split.MASTER
    assert sight_split.role(target, 11, 11, set()) == LOOP
    assert sight_split.role(target, 11, 12, set()) == NATIVE
    assert sight_split.role(target, 20, 20, {20}) == BACKENDS


def test_every_thread_of_a_process_is_read() -> None:
    started, stop = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        stop.wait()

    thread = threading.Thread(target=spin)
    thread.start()
    started.wait()
    try:
        tasks = sight_split.task_cpu([os.getpid()])
    finally:
        stop.set()
        thread.join()
    assert (os.getpid(), os.getpid()) in tasks
    assert (os.getpid(), thread.native_id) in tasks
