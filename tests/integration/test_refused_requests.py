"""The proxy refuses what OpenAI refuses (chat_requests) before parking it: 400, param, nothing parked."""

from __future__ import annotations

import pytest

from semula.service import projects
from tests.unit.test_chat_requests import INVALID

URL = "/p/shop/v1/chat/completions"
CASES = ["unknown role", "content an object", "tool name with a space", "schema with an unknown type"]
CASES += ["unknown response_format"]


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "mode": "record", "record_timeout": 30})


@pytest.mark.parametrize("case", CASES)
def test_a_request_openai_refuses_is_400_and_never_parked(ctx, shop, client, make_token, case):
    body, param, code = INVALID[case]
    r = client.post(URL, json=body, headers=make_token("editor"))
    assert r.status_code == 400, r.json
    error = r.json["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []
