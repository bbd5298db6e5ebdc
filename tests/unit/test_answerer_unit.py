"""The answerer without a database: configuration, the child runner's mechanics, the stop signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from answerer import __main__ as entry
from answerer import config as answerer_config
from answerer import containment
from answerer.daemon import document, to_payload
from answerer.runners import ChildRunner
from answerer.signals import on_stop
from semula.config import ConfigError, Settings
from tests.answerer_helpers import CHILD, alive, unprivileged
from tests.helpers import wait_for

SECRET_ARGV = ["python3", "-c", "print('secret-prompt-in-argv')"]


def settings(**env: str) -> Settings:
    return Settings.from_env({"SEMULA_DATABASE_URL": "sqlite:///:memory:", **env})


# Configuration: refuse to start with a message naming the variable, never its value


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "SEMULA_ANSWERER_COMMAND"),
        ({"SEMULA_HOSTED": "on"}, "SEMULA_HOSTED"),
        (
            {
                "SEMULA_ANSWERER_COMMAND": json.dumps([sys.executable]),
                "SEMULA_ANSWERER_BEARER": "secret-value",
            },
            "SEMULA_ANSWERER_BEARER",
        ),
        ({"SEMULA_ANSWERER_COMMAND": json.dumps(["no-such-binary-secret-value"])}, "SEMULA_ANSWERER_COMMAND"),
    ],
)
def test_config_refusals_name_the_variable(env, named):
    with pytest.raises(ConfigError) as info:
        answerer_config.from_settings(settings(**env), {"PATH": os.environ["PATH"]})
    assert named in str(info.value) and "secret-value" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SEMULA_ANSWERER_TOKEN": "smt_secret-value"}, "SEMULA_ANSWERER_TOKEN"),
        (
            {
                "SEMULA_ANSWERER_SERVER": "http://127.0.0.1:8080",
                "SEMULA_DATABASE_URL": "sqlite:///secret-value",
            },
            "SEMULA_DATABASE_URL",
        ),
        (
            {
                "SEMULA_ANSWERER_SERVER": "http://127.0.0.1:8080",
                "SEMULA_OWNER_DATABASE_URL": "postgresql://secret-value@h/db",
            },
            "SEMULA_OWNER_DATABASE_URL",
        ),
    ],
)
def test_over_http_the_daemon_refuses_a_database_url_and_a_token_without_a_server(env, named):
    environ = {"PATH": os.environ["PATH"], "SEMULA_ANSWERER_COMMAND": json.dumps([sys.executable]), **env}
    with pytest.raises(ConfigError) as info:
        answerer_config.from_settings(Settings.from_env(environ), environ)
    assert named in str(info.value) and "secret-value" not in str(info.value)
    config = answerer_config.from_settings(
        Settings.from_env(
            {**environ, "SEMULA_ANSWERER_SERVER": "http://h:1", "SEMULA_ANSWERER_TOKEN": "smt_t"}
        ),
        {"PATH": os.environ["PATH"]},
    )
    assert (config.server, config.token) == ("http://h:1", "smt_t") and "smt_t" not in repr(config)


@pytest.mark.parametrize(
    "env",
    [
        {"SEMULA_ANSWERER_COMMAND": json.dumps(SECRET_ARGV), "SEMULA_ANSWERER_URL": "http://h/secret-prompt"},
        {"SEMULA_ANSWERER_COMMAND": json.dumps(SECRET_ARGV), "SEMULA_ANSWERER_ENV": "SEMULA_DATABASE_URL"},
        {"SEMULA_ANSWERER_COMMAND": "secret-prompt-not-json"},
        {},
        {"SEMULA_ANSWERER_COMMAND": json.dumps(SECRET_ARGV), "SEMULA_HOSTED": "on"},
    ],
)
def test_main_refuses_to_start_without_showing_the_command(monkeypatch, capsys, env):
    for name in list(os.environ):
        if name.startswith("SEMULA_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert entry.main([]) == entry.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("semula-answerer: ") and "SEMULA_" in err and "secret-prompt" not in err


def test_child_env_is_the_allowlist_plus_the_operators_names():
    environ = {
        "PATH": "/bin",
        "HOME": "/home/op",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "k",
        "SEMULA_UPSTREAM_KEY": "sk-upstream",
        "SEMULA_DATABASE_URL": "postgresql://x",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "PYTHONPATH": "/x",
    }
    env = answerer_config.child_env(("ANTHROPIC_API_KEY", "UNSET_NAME"), environ)
    assert env == {"PATH": "/bin", "HOME": "/home/op", "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": "k"}
    with pytest.raises(ConfigError):
        answerer_config.child_env(("semula_secret",), environ)


def test_lease_is_the_timeout_plus_a_margin_within_the_maximum():
    assert answerer_config.AnswererConfig(argv=("x",), timeout=120).lease_seconds == 150
    assert answerer_config.AnswererConfig(argv=("x",), timeout=3600).lease_seconds == 3600


def test_label_is_the_basename_only():
    assert answerer_config.AnswererConfig(argv=("/opt/secret/dir/claude", "-p", "x")).label == "claude"
    assert answerer_config.AnswererConfig(url="https://h/t?token=x").label == "webhook"
    assert "secret" not in repr(answerer_config.AnswererConfig(argv=("/opt/secret/claude",)))


# The output contract


@pytest.mark.parametrize(
    ("output", "payload"),
    [
        (b"  hello  \n", {"content": "hello"}),
        (b'{"content": "x"}', {"content": "x"}),
        (b'[{"content": "x"}]', [{"content": "x"}]),
        (b'"quoted"', {"content": '"quoted"'}),
        (b"42", {"content": "42"}),
        (b"\xff text", {"content": "\ufffd text"}),
    ],
)
def test_output_becomes_the_payload(output, payload):
    assert to_payload(output) == payload


def test_document_carries_rejection_and_previous_output_only_on_attempt_two():
    from semula.core.errors import InvalidAnswer

    call = {"id": "pnd_1", "project": "p", "shape": {}, "request": {"model": "m", "messages": []}}
    first = json.loads(document(call, 1, None, None))
    assert first == {
        "request": {"messages": [], "tools": [], "params": {"model": "m"}},
        "shape": {},
        "project": "p",
        "api": "openai.chat",
        "pending_id": "pnd_1",
        "attempt": 1,
    }
    second = json.loads(document(call, 2, InvalidAnswer("bad", param="content"), "out"))
    assert second["rejection"] == {"code": "invalid_answer", "message": "bad", "param": "content"}
    assert second["previous_output"] == "out"


# The child runner


def runner(script: str, timeout: float = 10, max_output: int = 1024 * 1024) -> ChildRunner:
    return ChildRunner((sys.executable, "-c", script), {"PATH": os.environ["PATH"]}, timeout, max_output)


def test_a_big_stdin_is_fed_while_output_is_read():
    # The child writes before it reads: writing all stdin first would deadlock on the pipe.
    script = "import sys; print('x' * 200000, flush=True); data = sys.stdin.read(); print(len(data))"
    outcome = runner(script).run(b"y" * 5_000_000)
    assert outcome.ok and outcome.output.split()[-1] == b"5000000"


def test_a_child_that_ignores_stdin_is_fine():
    outcome = runner("print('answer')").run(b"z" * 5_000_000)
    assert outcome.ok and outcome.output.strip() == b"answer"


def test_a_grandchild_holding_stdout_does_not_hold_the_call(tmp_path):
    # The child answers and exits; its background grandchild keeps stdout open and is killed.
    pid_file = tmp_path / "grandchild"
    script = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); print('done')"
    )
    started = time.monotonic()
    outcome = runner(script, timeout=30).run(b"{}")
    assert outcome.ok and outcome.output.strip() == b"done"
    assert time.monotonic() - started < 5
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(grandchild)


def test_exact_cap_is_accepted_and_one_byte_more_is_not():
    assert runner("import sys; sys.stdout.write('a' * 1000)", max_output=1000).run(b"").ok
    assert runner("import sys; sys.stdout.write('a' * 1001)", max_output=1000).run(b"").status == "overflow"


def test_statuses_are_safe_to_log():
    assert runner("import sys; sys.exit(3)").run(b"").status == "exit:3"
    assert runner("import os, signal; os.kill(os.getpid(), signal.SIGKILL)").run(b"").status == "signal:9"
    assert runner("pass").run(b"").status == "no_output"
    assert runner("import time; time.sleep(5)", timeout=0.3).run(b"").status == "timeout"
    missing = ChildRunner(("/nonexistent/secret-tool",), {}, 5, 100).run(b"")
    assert missing.status == "exec_failed:ENOENT"


def test_kill_all_ends_running_children_at_once():
    import threading

    r = runner("import time; time.sleep(60)", timeout=60)
    results = []
    thread = threading.Thread(target=lambda: results.append(r.run(b"")))
    thread.start()
    deadline = time.monotonic() + 5
    while not r._live and time.monotonic() < deadline:
        time.sleep(0.01)
    [pid] = r._live
    r.kill_all()
    thread.join(5)
    assert results[0].status == "killed" and not alive(pid)
    assert r.run(b"").status == "stopped"


def test_the_stand_in_child_exists():
    assert CHILD.exists()


# Signals


def test_first_signal_stops_second_aborts_and_handlers_are_restored():
    calls = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with on_stop(lambda: calls.append("stop"), lambda: calls.append("abort")):
        assert signal.getsignal(signal.SIGTERM) not in (before[signal.SIGTERM], signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert calls == ["stop", "abort", "abort"]
    assert {sig: signal.getsignal(sig) for sig in before} == before


# No descendant outlives its call


def escaping_runner(out, timeout: float = 20) -> ChildRunner:
    env = {"PATH": os.environ["PATH"], "ANSWERER_TEST_DIR": str(out)}
    return ChildRunner((sys.executable, str(CHILD), "escape"), env, timeout, 1024 * 1024)


def run_escape(tmp_path, how: str, timeout: float = 20):
    r = escaping_runner(tmp_path, timeout)
    r.argv.append(how)
    outcome = r.run(json.dumps({"pending_id": f"pnd_{how}", "attempt": 1}).encode())
    child, left, workdir = (tmp_path / f"escaped-pnd_{how}").read_text().split()
    return outcome, int(child), int(left), workdir


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
def test_a_grandchild_that_leaves_the_group_dies_with_its_call(tmp_path, how):
    outcome, child, left, workdir = run_escape(tmp_path, how)
    assert outcome.ok and outcome.output.strip() == b"answered"
    wait_for(lambda: not alive(left), timeout=5, what=f"the {how} grandchild gone")
    assert not alive(child) and not os.path.exists(workdir)


def test_a_child_that_ignores_sigterm_dies_at_its_timeout_with_its_escaped_grandchild(tmp_path):
    outcome, child, left, workdir = run_escape(tmp_path, "ignore-term", timeout=3)
    assert outcome.status == "timeout"
    wait_for(lambda: not alive(child) and not alive(left), timeout=5, what="child and grandchild gone")
    assert not os.path.exists(workdir)


# A stand-in for the daemon process (not a subreaper, so only the call's supervisor can find what
# escaped): one call whose child ignores SIGTERM and leaves a grandchild behind.
CALLER = """
import json, sys
from answerer.runners import ChildRunner
*argv, out = sys.argv[1:]
env = {"PATH": "/usr/bin:/bin", "ANSWERER_TEST_DIR": out}
runner = ChildRunner((sys.executable, *argv), env, 600, 1 << 20)
runner.run(json.dumps({"pending_id": "pnd_killed", "attempt": 1}).encode())
"""


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
def test_nothing_of_a_call_outlives_a_daemon_killed_with_sigkill(tmp_path, how):
    # The grandchild called setsid (and, double-forked, dropped the call's mark and its parent),
    # and ignores SIGTERM, like the child. No daemon starts after: the call's supervisor alone ends it.
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    daemon = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(CHILD), "escape", f"ignore-term+{how}", str(out)],
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    escaped = out / "escaped-pnd_killed"
    try:
        child, left, workdir = wait_for(
            lambda: escaped.exists() and escaped.read_text(), what="the child"
        ).split()
        assert alive(int(child)) and alive(int(left)) and os.path.isdir(workdir)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
        wait_for(
            lambda: not alive(int(child)) and not alive(int(left)),
            timeout=10,
            what="every process of the call gone",
        )
        wait_for(lambda: not list(tmp.iterdir()), timeout=10, what="the call's temporary directory removed")
    finally:
        daemon.kill()
        daemon.wait()


def test_a_child_that_kills_its_supervisor_is_still_swept_with_what_it_left(tmp_path):
    # Behind the supervisor, the daemon kills what carries the call's mark.
    outcome, child, left, workdir = run_escape(tmp_path, "kill-parent+setsid")
    assert outcome.status == "supervisor_failed"
    wait_for(lambda: not alive(child) and not alive(left), timeout=5, what="child and grandchild gone")
    assert not os.path.exists(workdir)


def test_a_sweep_goes_on_until_no_marked_process_is_left(monkeypatch):
    """A process forked after a pass looked at /proc is not among that pass's victims: the sweep
    looks again, and kills again, until a look finds none (a fork bomb's children are found so)."""
    mark = containment.new_mark()
    env = {"PATH": os.environ["PATH"], containment.MARK: mark}
    first, late = (subprocess.Popen(["sleep", "60"], env=env) for _ in range(2))
    looks = []
    processes = containment._processes

    def as_if_forked_after_the_first_look():
        looks.append(1)
        return (p for p in processes() if len(looks) > 1 or p[0] != late.pid)

    monkeypatch.setattr(containment, "_processes", as_if_forked_after_the_first_look)
    try:
        assert containment.sweep(mark) == 2
        assert not alive(first.pid) and not alive(late.pid)
        assert len(looks) >= 3  # killed one, killed the other, found none
    finally:
        for process in (first, late):
            process.kill()
            process.wait()


# None of the server's secrets reach the child

# A stand-in for the daemon process: the server's secret in its environment, hardened as
# semula-answerer's entry point hardens itself (or not), running one child that snoops.
STAND_IN = """
import json, sys
from answerer import containment
from answerer.runners import ChildRunner
if sys.argv[1] == "hardened":
    containment.harden_daemon()
runner = ChildRunner((sys.executable, *sys.argv[2:]), {"PATH": "/usr/bin:/bin"}, 20, 1 << 20)
outcome = runner.run(json.dumps({"pending_id": "pnd_snoop", "attempt": 1}).encode())
print(outcome.output.decode() if outcome.ok else outcome.status)
"""


def snooped(hardened: bool, secret: str, *paths: str) -> dict[str, str]:
    # Daemon and child are one user that is not root, as under the unit (root reads any process
    # whatever it set).
    python, as_user, env = unprivileged()
    done = subprocess.run(
        [*as_user, python, "-c", STAND_IN, "hardened" if hardened else "plain", str(CHILD), "snoop", secret]
        + list(paths),
        env={"PATH": "/usr/bin:/bin", "SEMULA_UPSTREAM_KEY": secret, "SEMULA_ANSWERER_TOKEN": secret, **env},
        cwd="/",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(json.loads(done.stdout)["content"])


def test_the_child_cannot_read_the_daemons_environment_or_memory():
    secret = f"sk-canary-{os.getpid()}-{time.monotonic_ns()}"
    # The deploy rule (deploy/semula.env.example): the environment file is 0600 root, read by
    # systemd before it starts the unit as its user.
    # (Only a root test run can make a file of another user than the child's.)
    with tempfile.TemporaryDirectory() as etc:
        os.chmod(etc, 0o755)
        env_file = Path(etc) / "semula.env"
        env_file.write_text(f"SEMULA_UPSTREAM_KEY={secret}\n")
        env_file.chmod(0o600)
        seen = snooped(True, secret, *([str(env_file)] if os.geteuid() == 0 else []))
    # Its own environment opens, and holds none of it; every other route is refused.
    assert seen.pop("/proc/self/environ") == "opened", seen
    assert all(result.startswith("refused:") for result in seen.values()), seen
    # The routes are real: without the hardening the same child reads the secret.
    plain = snooped(False, secret)
    assert "secret" in plain.values(), plain


def test_help_prints_the_usage_and_arguments_are_refused(capsys):
    from answerer import __main__ as entry

    assert entry.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: semula-answerer") and "SEMULA_ANSWERER_SERVER" in out
    assert "--env-file FILE" in out
    assert entry.main(["--server", "x"]) == entry.EXIT_CONFIG
    assert "unknown argument '--server'" in capsys.readouterr().err
    assert entry.main(["--env-file"]) == entry.EXIT_CONFIG
    assert "--env-file needs a FILE" in capsys.readouterr().err


def test_an_env_file_that_cannot_be_read_is_a_configuration_refusal(capsys, tmp_path):
    missing = tmp_path / "answerer.env"
    assert entry.main(["--env-file", str(missing)]) == entry.EXIT_CONFIG
    assert (
        capsys.readouterr().err.strip()
        == f"semula-answerer: cannot read {missing}: No such file or directory"
    )


def test_an_env_files_settings_win_over_the_environment(monkeypatch, tmp_path):
    # The same reader as `semula --env-file` (systemd's rules): the file's values win.
    # Both set beforehand, so monkeypatch puts the environment back afterwards.
    monkeypatch.setenv("SEMULA_ANSWERER_TIMEOUT", "5")
    monkeypatch.setenv("SEMULA_ANSWERER_COMMAND", '["false"]')
    env_file = tmp_path / "answerer.env"
    env_file.write_text('SEMULA_ANSWERER_TIMEOUT=7\nSEMULA_ANSWERER_COMMAND=["true"]\n')
    entry.load_env_file(env_file)
    assert Settings.from_env().answerer_timeout == 7
    assert Settings.from_env().answerer_command == ["true"]


# Polling: a failed poll is logged once with where and why, then backs off to a cap


class FlakyServer:
    """A server whose polls fail while `down` says so; it stops the daemon after `polls` polls."""

    poll_url = "http://127.0.0.1:8080/api/v1/answerer/candidates"

    def __init__(self, down, polls: int):
        self.down, self.polls, self.seen = down, polls, 0
        self.daemon = None

    def candidates(self, *, after, limit):
        self.seen += 1
        if self.seen >= self.polls:
            self.daemon.stop()
        if self.down(self.seen):
            from answerer.server import Unavailable

            raise Unavailable("http:503")
        return []


def test_failed_polls_log_once_back_off_to_the_cap_and_say_when_the_server_is_back(caplog, monkeypatch):
    from answerer.daemon import Daemon

    # Polls 2 to 9 fail, 10 and 11 work, 12 and 13 fail again, 14 works.
    server = FlakyServer(lambda n: 2 <= n <= 9 or 12 <= n <= 13, polls=14)
    daemon = Daemon(
        None,
        answerer_config.AnswererConfig(argv=("true",)),
        server=server,
        poll_interval=0.5,
        backoff_cap=4.0,
    )
    server.daemon = daemon
    waits = []
    # The waits the daemon chose between polls, taken instead of waited: counted, not timed.
    monkeypatch.setattr(daemon._waker, "wait", waits.append)
    caplog.set_level("INFO", logger="semula.answerer")
    daemon.run()
    assert server.seen == 14
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 0.5, 0.5, 1.0, 2.0, 0.5]
    polls = [r for r in caplog.records if r.msg in ("poll_failed", "poll_recovered")]
    assert [(r.msg, getattr(r, "failed_polls", None)) for r in polls] == [
        ("poll_failed", None),
        ("poll_recovered", 8),
        ("poll_failed", None),
        ("poll_recovered", 2),
    ]
    assert polls[0].url == server.poll_url and polls[0].error == "http:503"
    assert polls[0].retry_max_seconds == 4.0 and polls[1].url == server.poll_url


def test_the_url_and_the_token_a_log_line_may_show():
    from answerer.server import public_url, token_label

    assert public_url("https://user:pw@semula.internal:8443/api/v1/x?key=secret#f") == (
        "https://semula.internal:8443/api/v1/x"
    )
    assert public_url("http://[::1]:8080/api") == "http://[::1]:8080/api"
    secret = "smt_" + "Q" * 43
    assert token_label(secret) == "SEMULA_ANSWERER_TOKEN (smt_QQQQ…)"
    assert "sk-live" not in token_label("sk-live-123") and "not a semula token" in token_label("sk-live-123")
    assert token_label(None) == "SEMULA_ANSWERER_TOKEN (not set)"
