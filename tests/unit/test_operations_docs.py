"""docs/operations.md names every metric semula exports; deploy/semula-alerts.yml uses only those,
and promtool (when installed) accepts the rules and passes their tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from semula import metrics

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
RULES = ROOT / "deploy" / "semula-alerts.yml"


def exported() -> set[str]:
    names = {m.name for m in REGISTRY.collect() if m.name.startswith("semula_")}
    names |= {m.name for m in metrics.StoreCollector(_NoRows()).collect()}
    return names


class _NoRows:
    def all(self, name, **params):
        return []

    def run(self, query, /, **params):  # the metrics lease: held
        return 1


def test_every_metric_is_in_the_guide():
    text = GUIDE.read_text()
    missing = sorted(name for name in exported() if f"`{name}" not in text)
    assert missing == [], f"document these in docs/operations.md: {missing}"


def test_the_alert_rules_use_only_exported_series():
    used = set(re.findall(r"\bsemula_[a-z_]+", RULES.read_text()))
    known = exported()
    known |= {f"{name}_total" for name in known}
    assert used and used <= known, used - known


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules_and_their_tests_pass():
    for args in (["check", "rules", "semula-alerts.yml"], ["test", "rules", "semula-alerts.test.yml"]):
        result = subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
