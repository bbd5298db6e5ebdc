"""The real `semula serve`: gunicorn with gevent workers, over HTTP."""

from __future__ import annotations

import subprocess
import sys

import requests

pytestmark = __import__("pytest").mark.acceptance


def test_serve_answers_health_and_projects(start_server, db_url):
    server = start_server(workers=2)
    assert requests.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(server.url + "/readyz", timeout=5).json() == {"status": "ready"}
    assert requests.get(server.url + "/api/v1/projects", timeout=5).status_code == 401

    created = subprocess.run(
        [sys.executable, "-m", "semula", "token", "create", "--role", "admin"],
        env=server.env,
        capture_output=True,
        text=True,
        check=True,
    )
    canary = created.stdout.strip()
    headers = {"Authorization": f"Bearer {canary}"}
    r = requests.post(server.url + "/api/v1/projects", json={"name": "shop"}, headers=headers, timeout=5)
    assert r.status_code == 201 and r.json()["name"] == "shop"
    listing = requests.get(server.url + "/api/v1/projects", headers=headers, timeout=5)
    assert [p["name"] for p in listing.json()["data"]] == ["shop"]
    bad = requests.post(server.url + "/api/v1/projects", data="{oops", headers=headers, timeout=5)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"

    # The canary token reached the server many times; it is in no log line and no response but its own.
    tokens = requests.get(server.url + "/api/v1/tokens", headers=headers, timeout=5)
    assert canary not in tokens.text and tokens.status_code == 200
    server.stop()
    log = server.log()
    assert "Booting worker" in log and "gevent" in log
    assert canary not in log


def test_serve_dev_is_local_auth_off_with_a_default_project(start_server):
    server = start_server(dev=True)
    assert server.url.startswith("http://127.0.0.1:")
    projects = requests.get(server.url + "/api/v1/projects", timeout=5).json()["data"]
    assert [(p["name"], p["mode"]) for p in projects] == [("default", "record")]
