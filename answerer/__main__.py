"""Entry point of `semula-answerer`."""

from __future__ import annotations

import sys


def main() -> int:
    print("semula-answerer: not yet implemented (see the answerer issue)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
