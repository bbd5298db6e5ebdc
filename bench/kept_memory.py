"""Memory a kept replay hit takes in a worker, measured with tracemalloc: each hit in all (its key, its
slot in the cache's dict, and what it holds), its answer kept as sent and kept packed.

    .venv/bin/python -m bench.kept_memory [--hits 20000] [--src DIR]

The hits are those of real calls: one first sight of the 1.6 KB pair goes through semula's worker
and app (bench.instructions), and its call is then kept again and again under keys of its own, each
with a fingerprint, entry id, response id and `created` of its own, as distinct recordings would
have. `--src DIR` imports semula from another checkout (a worktree of an older commit), to compare
two versions. The figure bounds how many hits service.hits.MAX_BYTES holds.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from dataclasses import replace
from typing import Any


def a_call() -> tuple[Any, ...]:
    """The arguments HitCache.keep got for one first sight through the worker and app."""
    from bench import instructions
    from semula.service import hits

    seen: list[tuple[Any, ...]] = []
    keep = hits.HitCache.keep

    def grab(self: Any, *args: Any, **options: Any) -> None:
        seen.append(args)
        keep(self, *args, **options)

    hits.HitCache.keep = grab  # type: ignore[method-assign]
    try:
        instructions.serve("first", False, 1)
    finally:
        hits.HitCache.keep = keep  # type: ignore[method-assign]
    return seen[-1]


def per_hit(count: int, packed: bool) -> tuple[float, int]:
    """Bytes each of `count` kept hits takes, and its answer's size."""
    from semula.core import jsonio
    from semula.service import hits

    _, call, body, version, raw, data = a_call()

    def own(number: int) -> tuple[Any, ...]:
        tail = f"{number:06d}"
        mine = replace(
            call,
            fingerprint=call.fingerprint[:-6] + tail,
            entry={**call.entry, "id": call.entry["id"][:-6] + tail},
        )
        answer = {**body, "id": body["id"][:-6] + tail, "created": body["created"] + number}
        return b"%032d" % number, mine, answer, version, raw, jsonio.compact(answer)

    cache = hits.HitCache(max_bytes=1 << 40)
    if packed:
        cache._bytes = 1 << 39  # over half full: what is kept now is packed
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    calls = [own(number) for number in range(count)]
    for args in calls * 2:  # the first sight notes, the second keeps
        cache.keep(*args)
    del calls
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    if sum(held is not hits.SEEN for held in cache._kept.values()) != count:
        raise SystemExit("not every hit was kept")
    return (after - before) / count, len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hits", type=int, default=20000)
    parser.add_argument("--src", default=None, help="import semula from this checkout instead")
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    import semula

    for packed in (False, True):
        size, answer = per_hit(args.hits, packed)
        how = "packed" if packed else "as sent"
        print(f"{size:,.0f} B a kept hit, its {answer:,} B answer {how} (semula from {semula.__path__[0]})")


if __name__ == "__main__":
    main()
