"""Replay in test suites: the pytest plugin and `semula replay`, run on a sample project (pytester)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bundle_helpers import write_bundle

pytestmark = pytest.mark.acceptance
# Plugins this checkout's venv has for its own tests and a sample project would not: importing them
# cost each pytest the sample project runs some 3 s of CPU. semula's plugin and xdist still load
# from their entry points, as they would in a user's venv.
NOT_A_USERS = ("hypothesispytest", "schemathesis", "langsmith_plugin", "anyio")


@pytest.fixture(autouse=True)
def users_plugins(monkeypatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(f"-p no:{name}" for name in NOT_A_USERS))


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
RECORDED = [
    (
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello"}]},
        {"content": "Hello there!"},
    ),
    (
        {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": [WEATHER],
        },
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    ),
    ({"model": "gpt-4.1", "input": "Say hello"}, {"content": "Hello from Responses!"}, "openai.responses"),
    (
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Say hello"}],
        },
        {"content": "Hello from Claude!"},
        "anthropic.messages",
    ),
    (
        {"model": "gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]},
        {"content": "Hello from Gemini!"},
        "gemini.generate_content",
    ),
]

SAMPLE_TESTS = """
import json
from openai import OpenAI

client = OpenAI(max_retries=0)
HELLO = [{"role": "user", "content": "Say hello"}]

def test_plain():
    r = client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert r.choices[0].message.content == "Hello there!"

def test_stream():
    chunks = client.chat.completions.create(model="gpt-4o", messages=HELLO, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there!"
    assert chunks[-1].usage.total_tokens > 0

def test_tool_call():
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    r = client.chat.completions.create(model="gpt-4o", messages=question, tools=[%(tool)s])
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}

def test_responses():
    assert client.responses.create(model="gpt-4.1", input="Say hello").output_text == "Hello from Responses!"

def test_anthropic():
    from anthropic import Anthropic

    claude = Anthropic(max_retries=0)
    r = claude.messages.create(model="claude-haiku-4-5", max_tokens=64, messages=HELLO)
    assert r.content[0].text == "Hello from Claude!"

def test_gemini():
    from google import genai

    gemini = genai.Client()  # GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY come from the plugin
    r = gemini.models.generate_content(model="gemini-2.5-flash", contents="Say hello")
    assert r.text == "Hello from Gemini!"

def test_miss():
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Say hellO"}])
""".replace("%(tool)s", repr(WEATHER))


def make_bundle(path: Path, recorded=RECORDED) -> None:
    """A bundle recorded through the service layer and exported, as `semula export` would."""
    write_bundle(path, recorded)


def test_sample_project_replays_and_a_miss_explains_itself(pytester, tmp_path):
    bundle = tmp_path / "llm.json"
    make_bundle(bundle)
    pytester.makepyfile(test_app=SAMPLE_TESTS)
    result = pytester.runpytest_subprocess("--semula-bundle", str(bundle), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=1)
    output = result.stdout.str()
    assert "semula: replay from" in output and "at http://127.0.0.1:" in output
    assert "Error code: 424 - No recorded entry matches this request" in output
    # Both values at the first difference, the bundle's fingerprint, no id of the temporary database.
    assert 'first difference at messages[0].content: recorded "Say hello", sent "Say hellO"' in output
    fingerprints = [entry["fingerprint"] for entry in json.loads(bundle.read_text())["entries"]]
    assert any(f"the bundle's entry with fingerprint {f[:19]}" in output for f in fingerprints)
    assert "ent_" not in output
    assert f"Record it: pytest --semula-record --semula-bundle {bundle} test_app.py::test_miss" in output


def test_ini_option_and_record_round_trip(pytester, tmp_path):
    bundle = tmp_path / "llm.json"
    make_bundle(bundle, RECORDED[:1])
    pytester.makeini(f"[pytest]\nsemula_bundle = {bundle}\n")
    pytester.makepyfile(
        test_new="""
import os, threading, time
import requests
from openai import OpenAI

def test_new_call_is_answered_by_an_agent():
    root = os.environ["OPENAI_BASE_URL"].split("/p/")[0]
    result = {}
    ask = lambda: OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Something new"}])
    worker = threading.Thread(target=lambda: result.setdefault("r", ask()))
    worker.start()
    # The agent's loop: claim the parked call and answer it over the REST API.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        claimed = requests.post(root + "/api/v1/pending/claim", json={}, timeout=10)
        if claimed.status_code == 200:
            break
        time.sleep(0.05)
    answered = requests.post(root + "/api/v1/pending/" + claimed.json()["id"] + "/answer",
                             json={"content": "A new answer"}, timeout=10)
    assert answered.status_code == 200, answered.text
    worker.join(30)
    assert result["r"].choices[0].message.content == "A new answer"
"""
    )
    recorded = pytester.runpytest_subprocess("--semula-record", "-p", "no:cacheprovider")
    recorded.assert_outcomes(passed=1)
    saved = json.loads(bundle.read_text())
    assert len(saved["entries"]) == 2

    pytester.makepyfile(
        test_new="""
from openai import OpenAI

def test_replayed():
    r = OpenAI(max_retries=0).chat.completions.create(model="gpt-4o",
                                                      messages=[{"role": "user", "content": "Something new"}])
    assert r.choices[0].message.content == "A new answer"
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


AGENT_LOOP = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Next step?"}]}
CASSETTE_TESTS = """
from openai import OpenAI

def ask():
    client = OpenAI(max_retries=0)
    question = [{"role": "user", "content": "Next step?"}]
    reply = client.chat.completions.create(model="gpt-4o", messages=question)
    client.close()
    return reply.choices[0].message.content

def test_once():
    assert ask() == "look"

def test_twice():
    assert [ask(), ask()] == ["look", "act"]

def test_past_the_last():
    assert [ask(), ask(), ask(), ask()] == ["look", "act", "done", "done"]

def test_once_more():
    assert ask() == "look"
"""


def test_each_test_replays_its_own_calls_in_parallel_workers(pytester, tmp_path):
    """Two xdist workers, each in its own session; every test counts its calls from one."""
    bundle = tmp_path / "llm.json"
    make_bundle(bundle, [(AGENT_LOOP, [{"content": "look"}, {"content": "act"}, {"content": "done"}])])
    pytester.makepyfile(test_loop=CASSETTE_TESTS)
    for args in (["-n", "2"], []):
        result = pytester.runpytest_subprocess(
            "--semula-bundle", str(bundle), "-p", "no:cacheprovider", *args
        )
        result.assert_outcomes(passed=4)
        assert ("2 workers" in result.stdout.str()) == bool(args)


def cpu_seconds(pid: int) -> float:
    """The CPU time a running process and its children it waited for have taken (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def test_replay_command_prints_its_url_first_and_serves_a_hit(tmp_path):
    bundle = tmp_path / "llm.json"
    make_bundle(bundle)
    proc = subprocess.Popen(
        [sys.executable, "-m", "semula", "replay", str(bundle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/p/default/v1")
        from openai import OpenAI

        client = OpenAI(base_url=url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(**RECORDED[0][0])
        assert reply.choices[0].message.content == "Hello there!"
        # Quick to start: bounded in CPU seconds, which a machine other runs load does not stretch.
        assert cpu_seconds(proc.pid) < 30
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
    access_log = proc.stderr.read()
    assert "POST /p/default/v1/chat/completions" in access_log
    assert "\x1b[" not in access_log  # no colour codes when stderr is not a terminal


def test_replay_command_refuses_a_missing_bundle(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "semula", "replay", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "no bundle" in result.stderr


AGENT = """
import os, threading, time
import requests

def answer_next(text):
    \"\"\"The agent: claim the parked call over REST and answer it (a person takes a moment first).\"\"\"
    root = os.environ["OPENAI_BASE_URL"].split("/p/")[0]
    time.sleep(1.5)  # slower than the plugin's look for parked calls, as any real answerer is
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        claimed = requests.post(root + "/api/v1/pending/claim", json={}, timeout=10)
        if claimed.status_code == 200:
            break
        time.sleep(0.05)
    answered = requests.post(root + "/api/v1/pending/" + claimed.json()["id"] + "/answer",
                             json={"content": text}, timeout=10)
    assert answered.status_code == 200, answered.text
"""

RECORD_TESTS = """
import threading
from openai import OpenAI
from agent import answer_next

def test_plain():
    r = OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say hello"}])
    assert r.choices[0].message.content == "Hello there!"

def test_new():
    agent = threading.Thread(target=answer_next, args=("A new answer",))
    agent.start()
    r = OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Something new"}])
    agent.join(30)
    assert r.choices[0].message.content == "A new answer"
"""

REPLAY_TESTS = """
from openai import OpenAI

def test_plain():
    r = OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say hello"}])
    assert r.choices[0].message.content == "Hello there!"

def test_new():
    r = OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Something new"}])
    assert r.choices[0].message.content == "A new answer"

def test_weather_was_pruned():
    OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[%(tool)s])
""".replace("%(tool)s", repr(WEATHER))


def test_record_prune_then_replay(pytester, tmp_path):
    bundle = tmp_path / "llm.json"
    make_bundle(bundle, RECORDED[:2])  # hello, and a weather call no test makes any more
    pytester.makeini(f"[pytest]\nsemula_bundle = {bundle}\n")
    pytester.makepyfile(agent=AGENT, test_app=RECORD_TESTS)
    recorded = pytester.runpytest_subprocess("--semula-record", "--semula-prune", "-p", "no:cacheprovider")
    recorded.assert_outcomes(passed=2)
    output = recorded.stdout.str() + recorded.stderr.str()
    assert re.search(
        r"semula: record into .*llm.json, pruning entries no test uses at http://127\.0\.0\.1:\d+/p/default/v1",
        output,
    )
    assert re.search(
        r"semula: answer parked calls with: SEMULA_URL=http://127\.0\.0\.1:\d+ semula claim --wait", output
    )
    assert re.search(r"semula: test_app.py::test_new is waiting on parked call pnd_\w+", output)
    assert f"semula: wrote {bundle}: 2 entries, dropped 1 that no call used" in output
    saved = [
        entry["request"]["messages"][0]["content"] for entry in json.loads(bundle.read_text())["entries"]
    ]
    assert sorted(saved) == ["Say hello", "Something new"]

    pytester.makepyfile(test_app=REPLAY_TESTS)
    replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=2, failed=1)
    miss = replayed.stdout.str()
    recorded_and_sent = r'recorded "(Say hello|Something new)", sent "Weather in Oslo\?"'
    assert re.search(r"first difference at messages\[0\]\.content: " + recorded_and_sent, miss)
    assert "ent_" not in miss
    assert "Record it: pytest --semula-record test_app.py::test_weather_was_pruned" in miss


def test_help_works_and_a_missing_bundle_fails_only_the_tests_that_call(pytester, tmp_path):
    missing = tmp_path / "not-yet.json"
    pytester.makeini(f"[pytest]\nsemula_bundle = {missing}\n")
    helped = pytester.runpytest_subprocess("--help")
    assert helped.ret == 0 and "--semula-prune" in helped.stdout.str()
    pytester.makepyfile(
        test_app="""
from openai import OpenAI

def test_without_llm():
    assert 1 + 1 == 2

def test_with_llm():
    client = OpenAI(max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "not recorded yet: pytest --semula-record" in output
    assert "The bundle" in output and "not-yet.json does not exist yet." in output
    assert "Record it: pytest --semula-record test_app.py::test_with_llm" in output
    assert not missing.exists()


FAULT_TESTS = """
import anthropic
import openai
import pytest
from openai import OpenAI

HELLO = [{"role": "user", "content": "Say hello"}]

@pytest.mark.semula_fault("rate_limit", times=2, retry_after=0.1)
def test_retried_twice_then_the_recording():
    client = OpenAI(max_retries=3)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=HELLO)
    assert raw.retries_taken == 2
    assert raw.parse().choices[0].message.content == "Hello there!"
    again = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=HELLO)
    assert again.retries_taken == 0

def test_the_next_test_has_no_fault():
    reply = OpenAI(max_retries=0).chat.completions.create(model="gpt-4o", messages=HELLO)
    assert reply.choices[0].message.content == "Hello there!"

@pytest.mark.semula_fault("overloaded", match={"api": "anthropic.messages"})
def test_a_matched_api_only():
    with pytest.raises(anthropic.APIStatusError) as exc:
        anthropic.Anthropic(max_retries=0).messages.create(
            model="claude-haiku-4-5", max_tokens=64, messages=HELLO
        )
    assert exc.value.status_code == 529
    assert OpenAI(max_retries=0).chat.completions.create(model="gpt-4o", messages=HELLO).choices

@pytest.mark.semula_fault("flood")
def test_a_bad_kind():
    pass
"""


def test_the_semula_fault_marker_faults_the_tests_own_session(pytester, tmp_path):
    bundle = tmp_path / "llm.json"
    make_bundle(bundle)
    pytester.makepyfile(test_faults=FAULT_TESTS)
    result = pytester.runpytest_subprocess("--semula-bundle", str(bundle), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    assert "@pytest.mark.semula_fault: Invalid fault rule: unknown fault kind 'flood'" in result.stdout.str()
