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


def test_deploy_keeps_the_environment_file_from_the_answerers_child():
    deploy = EXAMPLE.parent
    assert "mode 0600" in EXAMPLE.read_text() and "0640" not in EXAMPLE.read_text()
    unit = (deploy / "semula-answerer.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    # Its user shares no group with the server (whose files the child would read) ...
    assert settings["Group"] != "semula" and "SupplementaryGroups" not in settings
    # ... and the directory of the file systemd read for it is gone from its view.
    assert settings["EnvironmentFile"].rsplit("/", 1)[0] in settings["InaccessiblePaths"].split()
