"""The draw behind the sampled records: replay hits' access-log lines (SEMULA_ACCESS_LOG_HITS) and
their call-log rows in the database (SEMULA_CALL_LOG_HITS)."""

from __future__ import annotations

import random


def keep(share: float) -> bool:
    """Whether to keep one record of a sampled kind, for a share from 0 (none) to 1 (all); no draw at
    either end."""
    return share >= 1.0 or (share > 0.0 and random.random() < share)
