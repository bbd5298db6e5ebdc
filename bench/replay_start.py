"""Time from `semula replay BUNDLE` start to its first served hit, at 1k / 10k / 100k entries.

    python -m bench replaystart [--bundle-entries 1000,10000,100000] [--rounds 3]
    python -m bench.replay_start [--counts ...] [--runs 3] [--against OTHER_CHECKOUT]   # the table alone

Issue #48's target: at most 1 s with a 10,000-entry bundle (~14 MB), median of 3 cold starts, and
proportionate at 100,000. Each run starts a fresh process (its own temporary database) and posts the
request of one of the bundle's entries to the printed URL until a 200. Two rows per size:

- **first start**: an empty replay cache (`SEMULA_REPLAY_CACHE` a new directory each run), so the
  bundle is read, checked and imported: what the first start after a bundle changed costs;
- **cached**: the cache filled by one start before the measured ones: every later start of the same
  bundle with the same semula (decision 0062).

A checkout without the cache (main before it) ignores the variable: both rows are its import.
Each cell is the median wall-clock time with its range, then the median CPU time the server process
had used at its first hit (user and system, from /proc): on a shared machine the wall-clock follows
the load, the CPU time much less.
`--against DIR` starts another checkout's semula (`git archive REV | tar -x -C DIR`) in turn with
this one's, run by run, so a change in the machine's load falls on both, and reports the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.common import CACHE, ROOT, BenchError
from bench.import_bundle import request, write_bundle

COUNTS = (1000, 10000, 100000)
TIMEOUT = 600  # seconds a start may take before the run fails (100,000 entries on a busy machine)


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used so far (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(
    src: Path, bundle: Path, body: dict, cache: Path, log: Path, fill: bool = False
) -> tuple[float, float]:
    """Seconds from the start of `src`'s `semula replay` to the first 200 for `body`, and the CPU
    seconds the server had used by then (on a shared machine, the figure its load changes least)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "SEMULA_REPLAY_CACHE": str(cache),
        # Compiled modules as an installed semula has them: compiling its sources costs ~0.5 s a start.
        "PYTHONPYCACHEPREFIX": str(CACHE / "pycache"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with log.open("wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "semula", "replay", str(bundle)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=bundle.parent,  # not ROOT: `-m semula` would import the checkout there first
        )
    try:
        url = proc.stdout.readline().strip()
        if not url:
            proc.wait(10)
            raise BenchError(f"semula replay exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with requests.Session() as session:
            while True:
                r = session.post(
                    url + "/chat/completions",
                    data=json.dumps(body),
                    headers={"Content-Type": "application/json"},
                    timeout=30,
                )
                if r.status_code == 200:
                    took = time.monotonic() - started, cpu_seconds(proc.pid)
                    if fill:
                        wait_for_the_kept_database(session, url, cache)
                    return took
                if time.monotonic() - started > TIMEOUT:
                    raise BenchError(f"no hit after {TIMEOUT} s: {r.status_code} {r.text[:300]}")
    finally:
        proc.terminate()
        proc.wait(60)


def wait_for_the_kept_database(session: requests.Session, url: str, cache: Path) -> None:
    """Until the start keeps its database: a start answers while it imports (replay_loading) and
    keeps what it made once the import ended, which a miss waits for."""
    miss = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "never recorded"}]}
    session.post(url + "/chat/completions", json=miss, timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while not list(cache.glob("*.db")) and time.monotonic() < deadline:
        time.sleep(0.1)


def run(counts: tuple[int, ...] = COUNTS, runs: int = 3, against: Path | None = None) -> str:
    """A markdown table: start to first hit per bundle size, first start and cached, wall-clock and
    the server's CPU time; with `against` (another checkout), its starts interleaved with this one's,
    and the ratios."""
    sources = [("this", ROOT)] + ([("against", against)] if against else [])
    head = " | ".join(f"{name} p50 s (min-max) | {name} CPU s" for name, _ in sources)
    lines = [
        f"| entries | bundle MB | start | {head} |" + (" this / against (CPU) |" if against else ""),
        "|---:|---:|---|" + "---:|" * (2 * len(sources) + bool(against)),
    ]
    with tempfile.TemporaryDirectory(prefix="semula-bench-replay-") as tmp:
        work = Path(tmp)
        log = work / "replay.log"
        for count in counts:
            bundle = work / f"bundle-{count}.json"
            write_bundle(bundle, count)
            size = bundle.stat().st_size / 1e6
            body = request(count // 2)  # an entry from the middle of the bundle
            times: dict[tuple[str, str], list[tuple[float, float]]] = {}
            caches = {name: Path(tempfile.mkdtemp(dir=work)) for name, _ in sources}
            for name, src in sources:
                one_run(src, bundle, body, caches[name], log, fill=True)  # fills the cache
            for _ in range(runs):  # the checkouts in turn, so a change in the machine's load hits both
                for name, src in sources:
                    empty = Path(tempfile.mkdtemp(dir=work))
                    for start, cache in (("first start", empty), ("cached", caches[name])):
                        times.setdefault((start, name), []).append(one_run(src, bundle, body, cache, log))
            for start in ("first start", "cached"):
                walls = [[wall for wall, _ in times[start, name]] for name, _ in sources]
                cpus = [statistics.median(cpu for _, cpu in times[start, name]) for name, _ in sources]
                row = " | ".join(
                    f"{statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f}) | {cpu:.2f}"
                    for t, cpu in zip(walls, cpus, strict=True)
                )
                ratio = statistics.median(walls[0]) / statistics.median(walls[-1])
                ratio = f" {ratio:.2f} ({cpus[0] / cpus[-1]:.2f}) |" if against else ""
                lines.append(f"| {count:,} | {size:.1f} | {start} | {row} |{ratio}")
            print(*lines[-2:], sep="\n", file=sys.stderr, flush=True)
            bundle.unlink()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default=",".join(str(n) for n in COUNTS), help="bundle sizes, in entries")
    parser.add_argument("--runs", type=int, default=3, help="cold starts per row (the median is reported)")
    parser.add_argument("--against", type=Path, help="another checkout to compare (a `git archive` of main)")
    args = parser.parse_args()
    print(run(tuple(int(n) for n in args.counts.split(",") if n.strip()), args.runs, args.against))


if __name__ == "__main__":
    main()
