"""Time from `semula replay BUNDLE` start to its first served hit, at 1k / 10k / 100k entries.

    python -m bench replaystart [--counts 1000,10000,100000] [--runs 3]
    python -m bench.replay_start [--counts ...] [--runs 3]      # the table alone

Issue #48's target: at most 1 s with a 10,000-entry bundle (~14 MB), median of 3 cold starts, and
proportionate at 100,000. Each run starts a fresh process (its own temporary database) and posts the
request of one of the bundle's entries to the printed URL until a 200. Two rows per size:

- **first start**: an empty replay cache (`SEMULA_REPLAY_CACHE` a new directory each run), so the
  bundle is read, checked and imported: what the first start after a bundle changed costs;
- **cached**: the cache filled by one start before the measured ones: every later start of the same
  bundle with the same semula (decision 0062).

A checkout without the cache (main before it) ignores the variable: both rows are its import.
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


def one_run(bundle: Path, body: dict, cache: Path, log: Path) -> float:
    """Seconds from the process's start to the first 200 for `body`."""
    # PYTHONPATH picks the semula measured (another checkout's, to compare); the bench's by default.
    env = {**os.environ, "SEMULA_REPLAY_CACHE": str(cache), "PYTHONPYCACHEPREFIX": str(CACHE / "pycache")}
    env.setdefault("PYTHONPATH", str(ROOT))
    # Compiled modules as an installed semula has them: compiling its sources costs a start ~0.5 s.
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
                    return time.monotonic() - started
                if time.monotonic() - started > TIMEOUT:
                    raise BenchError(f"no hit after {TIMEOUT} s: {r.status_code} {r.text[:300]}")
    finally:
        proc.terminate()
        proc.wait(60)


def run(counts: tuple[int, ...] = COUNTS, runs: int = 3) -> str:
    """A markdown table: start to first hit per bundle size, first start and cached."""
    lines = [
        "| entries | bundle MB | start | p50 s | min s | max s |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="semula-bench-replay-") as tmp:
        work = Path(tmp)
        for count in counts:
            bundle = work / f"bundle-{count}.json"
            write_bundle(bundle, count)
            size = bundle.stat().st_size / 1e6
            body = request(count // 2)  # an entry from the middle of the bundle
            log = work / "replay.log"
            first = [one_run(bundle, body, Path(tempfile.mkdtemp(dir=work)), log) for _ in range(runs)]
            cache = Path(tempfile.mkdtemp(dir=work))
            one_run(bundle, body, cache, log)  # fills the cache
            cached = [one_run(bundle, body, cache, log) for _ in range(runs)]
            for name, times in (("first start", first), ("cached", cached)):
                lines.append(
                    f"| {count:,} | {size:.1f} | {name} | {statistics.median(times):.2f} "
                    f"| {min(times):.2f} | {max(times):.2f} |"
                )
            print(lines[-2], lines[-1], sep="\n", file=sys.stderr, flush=True)
            bundle.unlink()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default=",".join(str(n) for n in COUNTS), help="bundle sizes, in entries")
    parser.add_argument("--runs", type=int, default=3, help="cold starts per row (the median is reported)")
    args = parser.parse_args()
    print(run(tuple(int(n) for n in args.counts.split(",") if n.strip()), args.runs))


if __name__ == "__main__":
    main()
