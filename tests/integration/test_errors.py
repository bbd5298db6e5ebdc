"""Every failure is an OpenAI error object: one place locks the shape down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from semula.web import create_app


def assert_error_shape(body, code):
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code and body["error"]["message"]


@pytest.fixture
def open_client(store, settings):
    return create_app(replace(settings, auth=False, max_body_bytes=2048), store).test_client()


def test_unknown_path_is_404(open_client):
    r = open_client.get("/no/such/path")
    assert r.status_code == 404
    assert_error_shape(r.json, "not_found")


def test_wrong_method_is_405(open_client):
    r = open_client.delete("/api/v1/projects")
    assert r.status_code == 405
    assert_error_shape(r.json, "method_not_allowed")


def test_body_over_the_limit_is_413(open_client):
    r = open_client.post("/api/v1/projects", data="x" * 4096, content_type="application/json")
    assert r.status_code == 413
    assert_error_shape(r.json, "payload_too_large")


@pytest.mark.parametrize("body", ["{not json", "", "[1,2"])
def test_malformed_json_is_400(open_client, body):
    r = open_client.post("/api/v1/projects", data=body, content_type="application/json")
    assert r.status_code == 400
    assert_error_shape(r.json, "invalid_request")


def test_non_object_body_is_400(open_client):
    r = open_client.post("/api/v1/projects", json=[1, 2])
    assert r.status_code == 400
    assert_error_shape(r.json, "invalid_request")


def test_healthz_is_liveness_and_readyz_readiness(open_client):
    assert open_client.get("/healthz").json == {"status": "ok"}
    assert open_client.get("/readyz").json == {"status": "ready"}
