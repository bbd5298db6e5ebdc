"""The agent commands (semula pending/show/answer/claim) over REST, here against the app in-process.

tests/acceptance/test_agents.py runs the same commands as real processes against a real server.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from semula.service import pending as pending_service
from semula.service import projects as projects_service
from semula.surfaces.cli import main
from tests.agent_helpers import PNG, PNG_URL, REMOTE_IMAGE, in_process_client, park, two_project_queue


@pytest.fixture
def queue(ctx):
    return two_project_queue(ctx)


@pytest.fixture
def cli(app, make_token):
    """Run `semula ARGS` as a token of this role/scope/binding; the result has stdout, stderr, exit_code."""

    def run(*args: str, role: str = "editor", scope: str = "record", project: str | None = None, input=None):
        client = in_process_client(app, make_token(role, scope=scope, project=project))
        return CliRunner().invoke(main, list(args), obj={"client": client}, input=input)

    return run


def test_pending_lists_calls_for_people_and_scripts(cli, queue):
    human = cli("pending")
    assert human.exit_code == 0
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["ID", "PROJECT", "API", "MODEL", "STATUS", "CLIENT", "AGE", "CLAIMED"]
    assert lines[1].startswith(queue["a1"]) and lines[1].split()[1:3] == ["alpha", "openai.chat"]
    assert lines[1].rstrip().endswith("-")
    listing = json.loads(cli("pending", "--project", "beta", "--json").stdout)
    assert [p["id"] for p in listing["data"]] == [queue["b1"]]
    assert cli("pending", "--status", "answered").stdout.strip() == "no answered calls"


def test_show_prints_the_messages_tools_and_skeleton(cli, queue):
    shown = cli("show", queue["b1"])
    assert shown.exit_code == 0
    assert "[user] Weather in Paris?" in shown.stdout
    assert "get_weather - Current weather in a city." in shown.stdout
    assert '"tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]' in shown.stdout
    assert f"semula answer {queue['b1']} --json" in shown.stdout
    as_json = json.loads(cli("show", queue["b1"], "--json").stdout)
    assert as_json["request"]["tools"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_images_show_as_placeholders_and_save_images_writes_them(cli, ctx, tmp_path, api):
    projects_service.create(ctx, {"name": "pics"})
    pid = park(ctx, "pics", "What is in this picture?", image=True, api=api)
    label = f"[image image/png {len(PNG)} B]"

    shown = cli("show", pid)
    assert shown.exit_code == 0, shown.stderr
    assert f"[user] What is in this picture?\n{label}\n[image {REMOTE_IMAGE}]" in shown.stdout
    assert PNG_URL.partition(",")[2] not in shown.stdout  # never the base64
    assert f"semula show {pid} --save-images DIR" in shown.stdout

    saved = cli("show", pid, "--save-images", str(tmp_path / "imgs"))
    assert saved.exit_code == 0, saved.stderr
    path = tmp_path / "imgs" / f"{pid}-0-1.png"
    assert path.read_bytes() == PNG
    assert f"messages[0].content[1]: {path}  {label}" in saved.stdout
    assert f"messages[0].content[2]: [image {REMOTE_IMAGE}] (remote: not fetched)" in saved.stdout
    assert sorted(p.name for p in (tmp_path / "imgs").iterdir()) == [path.name]

    claimed = cli("claim", "--json", "--save-images", str(tmp_path / "claimed"))
    assert claimed.exit_code == 0, claimed.stderr
    assert json.loads(claimed.stdout)["id"] == pid  # stdout stays the API's JSON
    assert str(tmp_path / "claimed" / f"{pid}-0-1.png") in claimed.stderr
    assert (tmp_path / "claimed" / f"{pid}-0-1.png").read_bytes() == PNG


def test_save_images_refuses_what_is_not_an_image(cli, ctx, tmp_path):
    projects_service.create(ctx, {"name": "pics"})
    row = projects_service.get_row(ctx, "pics")
    html = "data:text/html;base64,PHNjcmlwdD4="
    parts = [{"type": "text", "text": "Look"}, {"type": "image_url", "image_url": {"url": html}}]
    request = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    pid = pending_service.park(ctx, row, "v1:test:html", request, False)

    shown = cli("show", pid, "--save-images", str(tmp_path / "imgs"))
    assert shown.exit_code == 0, shown.stderr
    assert "[user] Look\n[data text/html 8 B]" in shown.stdout
    why = "text/html is not an image media type: not decoded"
    assert f"messages[0].content[1]: [data text/html 8 B] ({why})" in shown.stdout
    assert not (tmp_path / "imgs").exists()
    none = cli("show", park(ctx, "pics", "no image"), "--save-images", str(tmp_path / "imgs"))
    assert "images: none" in none.stdout


def answered_content(ctx, pending_id):
    entry = ctx.store.one(
        "get_entry",
        workspace_id=ctx.principal.workspace_id,
        id=pending_service.get(ctx, pending_id)["entry_id"],
    )
    return json.loads(entry["response"])["choices"][0]["message"]["content"]


def test_answer_with_text_stdin_file_and_json(cli, queue, ctx, tmp_path):
    done = cli("answer", queue["a1"], "4")
    assert done.exit_code == 0 and done.stdout.startswith(f"answered {queue['a1']}: entry ent_")
    assert cli("answer", queue["a1"], "4").exit_code == 1  # no longer pending

    bad = cli("answer", queue["b1"], "--json", '{"tool_calls": [{"name": "get_weather", "arguments": {}}]}')
    assert bad.exit_code == 1
    assert "tool_calls[0].arguments" in bad.stderr and "city" in bad.stderr
    good = cli(
        "answer",
        queue["b1"],
        "--json",
        "-",
        input='{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
    )
    assert good.exit_code == 0, good.stderr

    c1, c2 = park(ctx, "alpha", "from stdin"), park(ctx, "alpha", "from a file")
    assert cli("answer", c1, "-", input="typed answer\n\n").exit_code == 0
    path = tmp_path / "answer.txt"
    path.write_text("file answer")
    assert cli("answer", c2, "--file", str(path), "--summary", "by hand").exit_code == 0
    assert [p["status"] for p in pending_service.list_pending(ctx, status="all")["data"]] == ["answered"] * 4
    # What came on stdin is the answer without the one newline that ends it (a blank line stays).
    assert answered_content(ctx, c1) == "typed answer\n"


def test_answer_usage_errors_exit_2(cli, queue):
    assert cli("answer", queue["a1"]).exit_code == 2
    assert cli("answer", queue["a1"], "text", "--json", "{}").exit_code == 2
    not_json = cli("answer", queue["a1"], "--json", "{oops")
    assert not_json.exit_code == 2 and "not valid JSON" in not_json.stderr


def test_claim_shows_the_call_and_exits_3_when_there_is_none(cli, queue):
    first = cli("claim", "--worker", "me", "--lease", "60")
    assert first.exit_code == 0
    assert first.stdout.startswith(f"{queue['a1']}  project alpha") and "claimed by me" in first.stdout
    second = json.loads(cli("claim", "--json").stdout)
    assert second["id"] == queue["b1"] and second["claim"]["lease_seconds"] == 300
    empty = cli("claim")
    assert empty.exit_code == 3 and empty.stdout == "" and "nothing to claim" in empty.stderr
    waited = cli("claim", "--wait", "--timeout", "0.3")
    assert waited.exit_code == 3


def test_errors_exit_1_with_the_message_and_never_the_token(app, make_token, queue):
    headers = make_token("viewer", scope="record")
    client = in_process_client(app, headers)
    result = CliRunner().invoke(main, ["claim"], obj={"client": client})
    assert result.exit_code == 1 and "role is viewer" in result.stderr
    assert headers["Authorization"][7:] not in result.output


# Roles, scopes and binding on every pending command (docs/design/product.md §5, §8)


def commands(queue):
    return {
        "pending": ("pending", "--project", "beta"),
        "show": ("show", queue["b1"]),
        "claim": ("claim", "--project", "beta"),
        "answer": ("answer", queue["b1"], "hello"),
        "release": ("release", queue["b1"]),
        "cancel": ("cancel", queue["b1"]),
    }


@pytest.mark.parametrize("command", ["claim", "answer", "release", "cancel"])
def test_viewer_cannot_claim_or_answer(cli, queue, command):
    result = cli(*commands(queue)[command], role="viewer")
    assert result.exit_code == 1 and "needs editor" in result.stderr


@pytest.mark.parametrize("command", ["pending", "show", "claim", "answer", "release", "cancel"])
def test_replay_scope_cannot_use_the_queue(cli, queue, command):
    result = cli(*commands(queue)[command], role="admin", scope="replay")
    assert result.exit_code == 1 and "scope is replay" in result.stderr


@pytest.mark.parametrize("command", ["pending", "show", "claim", "answer", "release", "cancel"])
def test_bound_token_gets_not_found_for_another_project(cli, queue, command):
    result = cli(*commands(queue)[command], project="alpha")
    assert result.exit_code == 1 and "No " in result.stderr
    assert cli("pending", "--json", project="alpha").exit_code == 0


def test_release_and_cancel(cli, queue):
    assert cli("claim", "--project", "beta", "--worker", "w1").exit_code == 0
    wrong = cli("release", queue["b1"])  # claimed as w1, released as the token's own name
    assert wrong.exit_code == 1 and "is not claimed by 'tok_" in wrong.stderr
    released = cli("release", queue["b1"], "--worker", "w1")
    assert released.exit_code == 0 and released.stdout.strip() == f"released {queue['b1']}"
    assert queue["b1"] in cli("claim", "--project", "beta").stdout  # at once, not after w1's lease
    cancelled = cli("cancel", queue["b1"])
    assert cancelled.exit_code == 0 and cancelled.stdout.strip() == f"cancelled {queue['b1']}"
    again = cli("cancel", queue["b1"])
    assert again.exit_code == 1 and "is cancelled already" in again.stderr


def test_set_up_errors_name_the_variable_and_the_fix(app, monkeypatch):
    monkeypatch.delenv("SEMULA_URL", raising=False)
    monkeypatch.delenv("SEMULA_TOKEN", raising=False)
    monkeypatch.setattr("semula.surfaces.client.DEFAULT_URL", "http://127.0.0.1:9")
    unset = CliRunner().invoke(main, ["pending"])
    assert unset.exit_code == 1
    assert (
        "SEMULA_URL is not set" in unset.stderr and "set SEMULA_URL to the server's address" in unset.stderr
    )

    monkeypatch.setenv("SEMULA_URL", "http://127.0.0.1:9/p/shop/v1")
    base = CliRunner().invoke(main, ["claim"])
    assert base.exit_code == 1
    assert (
        "(SEMULA_URL) is an OpenAI base URL" in base.stderr
        and "set SEMULA_URL=http://127.0.0.1:9" in base.stderr
    )

    no_token = CliRunner().invoke(main, ["claim"], obj={"client": in_process_client(app)})
    assert no_token.exit_code == 1
    assert (
        "SEMULA_TOKEN is not set" in no_token.stderr
        and "semula token create --role editor" in no_token.stderr
    )


@pytest.mark.parametrize("command", ["claim", "answer", "mcp"])
def test_help_names_the_variables(command):
    text = CliRunner().invoke(main, [command, "--help"]).stdout
    assert "SEMULA_URL" in text and "SEMULA_TOKEN" in text


def test_a_parked_call_for_a_later_answer_of_a_sequence_says_which(capsys):
    from semula.surfaces import cli_agent

    item = {"id": "pnd_1", "project": "p", "model": "m", "status": "pending", "seq": 3, "request": {}}
    cli_agent.render(item)
    assert "answer #3 of its sequence" in capsys.readouterr().out.splitlines()[0]
    cli_agent.render({**item, "seq": 1})
    assert "sequence" not in capsys.readouterr().out.splitlines()[0]


def test_a_refusal_names_its_field_once():
    from semula.surfaces.client import ClientError

    named = ClientError(
        422, {"message": "content.total: 'total' is a required property", "param": "content.total"}
    )
    assert str(named) == "content.total: 'total' is a required property"
    unnamed = ClientError(400, {"message": "Invalid type.", "param": "messages[0].role"})
    assert str(unnamed) == "Invalid type. (messages[0].role)"
    short = ClientError(400, {"message": "The setting must be a number between 1 and 100.", "param": "n"})
    assert str(short).endswith("100. (n)")


def test_a_structured_call_is_not_offered_a_text_answer(capsys):
    from semula.surfaces import cli_agent

    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    item = {"id": "pnd_1", "project": "p", "model": "m", "status": "pending", "request": {}}
    cli_agent.render({**item, "shape": {"tools": [], "response_format": schema, "skeleton": {"total": 0}}})
    structured = capsys.readouterr().out
    assert "semula answer pnd_1 --json" in structured and "'TEXT'" not in structured
    cli_agent.render({**item, "shape": {"tools": [], "response_format": None, "skeleton": {"content": ""}}})
    assert "semula answer pnd_1 'TEXT'" in capsys.readouterr().out
