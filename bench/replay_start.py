"""Time from `semula replay BUNDLE` start to its first served hit, with a 1,000-entry bundle.

    .venv/bin/python -m bench.replay_start [--entries 1000] [--runs 5]

Issue 10's target: at most 1 s. Each run starts a fresh process (a cold temporary database,
the bundle imported) and polls the printed URL with the bundle's first request until a 200.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from tests.bundle_helpers import write_bundle


def make_bundle(path: Path, count: int) -> dict:
    """A bundle of `count` recorded questions; returns the first request, to ask for a hit."""
    recorded = [
        (
            {
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant. " * 10},
                    {"role": "user", "content": f"Question number {i}: what is {i} squared?"},
                ],
            },
            {"content": f"{i} squared is {i * i}. " * 5},
        )
        for i in range(count)
    ]
    write_bundle(path, recorded)
    return recorded[0][0]


def one_run(bundle: Path, request: dict) -> float:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "semula", "replay", str(bundle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        with requests.Session() as session:
            while True:
                r = session.post(
                    url + "/chat/completions",
                    data=json.dumps(request),
                    headers={"Content-Type": "application/json"},
                    timeout=10,
                )
                if r.status_code == 200:
                    return time.monotonic() - started
                if time.monotonic() - started > 30:
                    raise RuntimeError(f"no hit after 30 s: {r.status_code}")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle.json"
        request = make_bundle(bundle, args.entries)
        size = bundle.stat().st_size
        times = [one_run(bundle, request) for _ in range(args.runs)]
    print(
        f"semula replay, {args.entries}-entry bundle ({size:,} bytes):"
        f" start to first hit p50 {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms,"
        f" max {max(times) * 1000:.0f} ms over {args.runs} runs"
    )


if __name__ == "__main__":
    main()
