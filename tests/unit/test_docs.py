"""Docs that tests keep honest: every setting is in the example environment file."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from semula.config import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "semula.env.example"


def test_every_setting_is_in_the_example_environment_file():
    text = EXAMPLE.read_text()
    missing = [f.metadata["env"] for f in fields(Settings) if f"{f.metadata['env']}=" not in text]
    assert missing == [], f"document these in deploy/semula.env.example: {missing}"
