"""The OpenAPI document describes every /api/v1 route the app registers, and is served as JSON."""

from __future__ import annotations

import importlib
import json
import pathlib
import pkgutil
import re
from dataclasses import replace

import marshmallow
import pytest

from semula.config import Settings
from semula.web import create_app, routes
from semula.web.openapi import document

IGNORED_METHODS = {"HEAD", "OPTIONS"}


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi')}/semula.db"
    return create_app(replace(Settings(), database_url=url))


def registered_operations(app) -> set[tuple[str, str]]:
    operations = set()
    for rule in routes(app).url_map.iter_rules():
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


# gunicorn's entry point makes and starts an app when imported (the call log's writer, the metrics'
# flusher, the pruner): threads that would go on in this process under every later test. It defines
# no schema of its own.
ENTRY_POINT = "semula.web.wsgi"


def marshmallow_schemas() -> set[type]:
    """Every marshmallow schema the pure logic, the service layer and the web surfaces define."""
    import semula.core
    import semula.service
    import semula.web

    for package in (semula.core, semula.service, semula.web):
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            if module.name != ENTRY_POINT:
                importlib.import_module(module.name)
    found, todo = set(), [marshmallow.Schema]
    while todo:
        for cls in todo.pop().__subclasses__():
            todo.append(cls)
            if cls.__module__.startswith("semula."):
                found.add(cls)
    return found


def test_every_marshmallow_schema_is_in_the_document():
    """A body schema a route validates with has a component with its fields, bounds and required fields."""
    from semula.web.openapi import BODY_SCHEMAS, generated

    schemas = marshmallow_schemas()
    assert {"SettingsSchema", "TokenSchema", "ClaimSchema", "EntrySchema"} <= {s.__name__ for s in schemas}
    components = document()["components"]["schemas"]
    for schema in schemas:
        # Listed itself, as an instance (a schema with `only`), or inside a schema that extends it.
        names = [
            name
            for name, listed in BODY_SCHEMAS.items()
            if issubclass(listed if isinstance(listed, type) else type(listed), schema)
        ]
        missing = f"{schema.__module__}.{schema.__name__}: add it to BODY_SCHEMAS in semula/web/openapi.py"
        assert names, missing
        expected = generated(schema)
        component = components[names[0]]
        for field, prop in expected["properties"].items():
            assert same(component["properties"].get(field), prop), (names[0], field)
        assert set(expected.get("required", ())) <= set(component.get("required", ())), names[0]


def same(documented: dict | None, generated: dict) -> bool:
    """The generated property, or it with its items a reference to another generated component."""
    if documented is None or documented == generated:
        return documented == generated
    items = documented.get("items")
    if not (isinstance(items, dict) and "$ref" in items):
        return False
    return documented | {"items": None} == generated | {"items": None}


def test_request_bodies_are_the_generated_components():
    """What a schema says about a field reaches clients: the bound of a lease, an optional field's default."""
    schemas = document()["components"]["schemas"]
    lease = schemas["ClaimRequest"]["properties"]["lease_seconds"]
    assert (lease["minimum"], lease["maximum"], lease["default"]) == (1, 3600, 300)
    assert schemas["ClaimRequest"]["additionalProperties"] is False
    assert "expires_at" in schemas["TokenCreate"]["properties"]
    assert schemas["ProjectCreate"]["required"] == ["name"]
    assert set(schemas["ProjectSettings"]["properties"]) < set(schemas["ProjectCreate"]["properties"])
    settings = schemas["ProjectSettings"]["properties"]
    assert schemas["Project"]["properties"]["after_last"] == settings["after_last"]


def test_the_document_is_the_one_before_the_dialect_registry():
    """The document the dialect registry derives its API parts of equals the one written out before
    it did (tests/data/openapi-snapshot.json, the server's version left out). A change to the REST API
    updates the snapshot: `python -c "from tests.integration.test_openapi import snapshot; snapshot()"`."""
    current = document()
    current["info"] = {k: v for k, v in current["info"].items() if k != "version"}
    assert json.loads(json.dumps(current)) == json.loads(SNAPSHOT.read_text())


SNAPSHOT = pathlib.Path(__file__).parents[1] / "data" / "openapi-snapshot.json"


def snapshot() -> None:
    """Write the current document as the snapshot."""
    current = document()
    current["info"].pop("version")
    SNAPSHOT.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
