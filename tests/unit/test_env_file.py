"""`semula --env-file` reads a file as systemd's EnvironmentFile= does (no database)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from semula.config import read_env_file
from semula.surfaces.cli import database_location, main

EXAMPLE = r"""# a comment
; another
SEMULA_BIND=127.0.0.1:8080
SEMULA_ANSWERER_COMMAND=["claude","-p","You are the model the app calls. Answer as it would."]
TRAILING=value{spaces}
QUOTED="a \"b\" \$ \\ \n" 'c d'
SINGLE='x "y" \z'
  SPACED  =   v w
CONTINUED=one \
two
EMPTY=
not an assignment
""".format(spaces="   ")


def test_values_are_read_as_systemd_reads_them():
    env = read_env_file(EXAMPLE)
    assert json.loads(env["SEMULA_ANSWERER_COMMAND"]) == [
        "claude",
        "-p",
        "You are the model the app calls. Answer as it would.",
    ]
    assert env["SEMULA_BIND"] == "127.0.0.1:8080"
    assert env["TRAILING"] == "value"
    assert env["QUOTED"] == 'a "b" $ \\ \\nc d'  # \n stays a backslash and an n, as in systemd
    assert env["SINGLE"] == 'x "y" \\z'
    assert env["SPACED"] == "v w"
    assert env["CONTINUED"] == "one two"
    assert env["EMPTY"] == ""
    assert "not an assignment" not in " ".join(env)


def test_the_option_sets_the_environment_for_the_command(tmp_path, monkeypatch):
    # Set first so that monkeypatch restores it: the option writes to os.environ.
    monkeypatch.setenv("SEMULA_DATABASE_URL", f"sqlite:///{tmp_path / 'not-this.db'}")
    db = tmp_path / "ops.db"
    env_file = tmp_path / "semula.env"
    env_file.write_text(f"SEMULA_DATABASE_URL=sqlite:///{db}\n")
    result = CliRunner().invoke(main, ["--env-file", str(env_file), "migrate"])
    assert result.exit_code == 0, result.output
    assert db.exists() and "applied" in result.output


def test_the_database_location_names_host_and_port_never_the_password():
    assert database_location("postgresql://app:hunter2@db.internal:6543/semula") == "db.internal:6543"
    assert database_location("postgresql://app@db/semula") == "db:5432"
    assert database_location("sqlite:////var/lib/semula/semula.db") == "/var/lib/semula/semula.db"
