"""Issue 15, item 1: in hosted mode a held call is released with its answer, on the real server.

Hosted mode on PostgreSQL runs gunicorn's gevent workers as the RLS-bound application role
(deploy/postgresql-roles.md); on SQLite there is no row-level security and the one URL serves both.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from semula.service import projects, tokens
from tests.helpers import wait_for
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture

pytestmark = pytest.mark.acceptance


def test_a_parked_call_answered_over_rest_is_released_in_hosted_mode(
    db_url,
    hosted,  # noqa: F811 - the fixture imported above
    start_server,
    openai_client,
):
    operator, _, app_settings = hosted
    acme = tenant(operator, "acme")
    projects.create(acme, {"name": "shop", "mode": "record", "record_timeout": 60})
    secret = tokens.create(acme, {"role": "editor", "scope": "full"})["token"]
    env = {"SEMULA_HOSTED": "on", "SEMULA_DATABASE_URL": app_settings.database_url}
    if db_url.startswith("postgresql"):
        assert app_settings.database_url != db_url  # the server is not the owner: RLS binds it
        env["SEMULA_OWNER_DATABASE_URL"] = db_url
    server = start_server(**env)
    client = openai_client(server, "shop", api_key=secret, timeout=60)
    rest = requests.Session()
    rest.headers["Authorization"] = f"Bearer {secret}"

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            client.chat.completions.with_raw_response.create,
            model="gpt-4o",
            messages=[{"role": "user", "content": "Where is my parcel?"}],
        )

        def parked():
            listing = rest.get(f"{server.url}/api/v1/pending", params={"project": "shop"}, timeout=10)
            assert listing.status_code == 200, listing.text
            return listing.json()["data"]

        [call] = wait_for(parked, timeout=60, what="the call parked in workspace acme")
        answered = rest.post(
            f"{server.url}/api/v1/pending/{call['id']}/answer",
            json={"content": "In Lyon, out for delivery."},
            timeout=10,
        )
        assert answered.status_code == 200, answered.text
        raw = held.result(timeout=60)

    assert raw.http_response.status_code == 200
    assert raw.parse().choices[0].message.content == "In Lyon, out for delivery."
    again = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Where is my parcel?"}]
    )
    assert again.choices[0].message.content == "In Lyon, out for delivery."
    assert "Traceback" not in server.log()
