"""The OpenAPI document describes every /api/v1 route the app registers, and is served as JSON."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from semula.config import Settings
from semula.web import create_app
from semula.web.openapi import document

IGNORED_METHODS = {"HEAD", "OPTIONS"}


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi')}/semula.db"
    return create_app(replace(Settings(), database_url=url))


def registered_operations(app) -> set[tuple[str, str]]:
    operations = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/"):
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
            operations |= {(path, method.lower()) for method in rule.methods - IGNORED_METHODS}
    return operations


def test_every_api_route_is_in_the_document(sqlite_app):
    documented = {(path, method) for path, item in document()["paths"].items() for method in item}
    registered = registered_operations(sqlite_app)
    assert registered - documented == set(), "routes missing from semula/web/openapi.py"
    assert documented - registered == set(), "documented routes the app does not have"


def test_document_is_served_and_loads_in_schemathesis(sqlite_app):
    import schemathesis

    response = sqlite_app.test_client().get("/api/v1/openapi.json")
    assert response.status_code == 200 and response.is_json
    assert response.json["openapi"].startswith("3.1")
    operations = list(schemathesis.openapi.from_dict(response.json).get_all_operations())
    assert len(operations) == len(registered_operations(sqlite_app))
    assert all(type(op).__name__ == "Ok" for op in operations), [
        op for op in operations if type(op).__name__ != "Ok"
    ]
    operation_ids = [op["operationId"] for item in response.json["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))


def test_every_operation_documents_its_errors_as_openai_errors():
    for path, item in document()["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, status)
