"""Docs that tests keep honest: every setting is in the example environment file, and every CLI
command and option has help and is in docs/cli.md."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import click
import pytest

from semula.config import Settings
from semula.surfaces import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "semula.env.example"


def test_every_setting_is_in_the_example_environment_file():
    text = EXAMPLE.read_text()
    missing = [f.metadata["env"] for f in fields(Settings) if f"{f.metadata['env']}=" not in text]
    assert missing == [], f"document these in deploy/semula.env.example: {missing}"


CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def cli_commands() -> list[tuple[str, click.Command]]:
    """Every command and group of `semula`, by its full name ("semula project create")."""
    found = []

    def walk(command: click.Command, path: str) -> None:
        found.append((path, command))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(cli.main, "semula")
    return found


def cli_sections() -> dict[str, str]:
    """docs/cli.md by heading: the command a heading names (its first `semula …` words) -> its text."""
    sections: dict[str, str] = {}
    for part in re.split(r"^#+ ", CLI_DOC.read_text(), flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        words = heading.strip("`").split()
        name = " ".join(w for w in words if re.fullmatch(r"[a-z][a-z-]*", w))
        sections[name] = heading + "\n" + body
    return sections


@pytest.mark.parametrize("path, command", cli_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_cli_command_and_option_has_help_and_is_in_docs_cli_md(path, command):
    assert command.help and len(command.help) > 10, f"{path} needs a docstring"
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    for option in options:
        assert option.help, f"{path} {option.opts[0]} needs help="
    if path == "semula":
        return
    section = cli_sections().get(path)
    assert section is not None, f"docs/cli.md needs a section headed `{path} …`"
    for option in options:
        for flag in option.opts + option.secondary_opts:
            assert f"`{flag}`" in section, f"docs/cli.md: document {flag} under `{path}`"
    for argument in (p for p in command.params if isinstance(p, click.Argument)):
        assert argument.human_readable_name in section.partition("\n")[0], (
            f"docs/cli.md: name {argument.human_readable_name} in the heading of `{path}`"
        )


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
    # Its own file (decision 0042): the server over REST with its own token, none of the server's
    # secrets, no database URL (with SQLite its user need not read the database at all).
    assert settings["EnvironmentFile"] == "/etc/semula/answerer.env"
    own = (deploy / "answerer.env.example").read_text()
    assert "mode 0600" in own and "SEMULA_ANSWERER_SERVER=http" in own and "SEMULA_ANSWERER_TOKEN=" in own
    for name in ("SEMULA_DATABASE_URL", "SEMULA_OWNER_DATABASE_URL", "SEMULA_SECRET=", "SEMULA_UPSTREAM_KEY"):
        assert name not in own, name
    assert own.count("semula token create --role editor --scope record") == 1


@pytest.mark.parametrize("command", ["create", "set"])
def test_project_create_and_set_help_list_every_setting_with_its_default(command):
    from click.testing import CliRunner

    from semula.service.projects import DEFAULTS

    assert set(cli.SETTING_MEANINGS) == set(DEFAULTS)
    text = CliRunner().invoke(cli.main, ["project", command, "--help"], terminal_width=200).stdout
    text = text.replace("*=", "=")  # the star marks operator fields
    for key, default in DEFAULTS.items():
        shown = default if isinstance(default, str) else json.dumps(default)
        assert f"  {key}={shown}  {cli.SETTING_MEANINGS[key]}" in text, key
        assert f"`{key}`" in cli_sections()["semula project create"], key
