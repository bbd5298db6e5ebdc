"""The route table (semula/dialects/routes.py) refuses routes it could not tell apart, when a dialect
is registered rather than on some later request."""

from __future__ import annotations

import pytest

from semula import dialects
from semula.dialects import Dialect
from semula.dialects.routes import Route, Table


def speaking(name: str, *routes: Route) -> Dialect:
    return type(name, (Dialect,), {"name": name, "title": name, "routes": routes})()


DEFAULT = speaking("default")


@pytest.mark.parametrize("path", ["/p/shop/v1/x", "/s/run/v1/x", "v1/x"])
def test_a_path_that_a_project_part_would_take_is_refused(path):
    with pytest.raises(ValueError, match="begins with a slash"):
        Table([speaking("a", Route(path, "/x"))], DEFAULT)


def test_two_routes_on_one_path_are_refused():
    with pytest.raises(ValueError, match="same path"):
        Table([speaking("a", Route("/v1/x", "/v1/x")), speaking("b", Route("/v1/x", "/v1/x"))], DEFAULT)


def test_a_path_another_route_matches_too_is_refused():
    catch_all = Route(r"/v1/x/(?P<id>[^/]+)", "/v1/x/{id}")
    with pytest.raises(ValueError, match="another route's path"):
        Table([speaking("a", catch_all), speaking("b", Route("/v1/x/list", "/v1/x/list"))], DEFAULT)


def test_a_path_is_found_with_its_project_and_values():
    table = dialects.table()
    route, project, values = table.find("/p/shop/s/run-1/v1beta/models/gemini-2.0:streamGenerateContent")
    assert (route.dialect.name, project["project"], project["session"]) == (dialects.GEMINI, "shop", "run-1")
    assert values == ("gemini-2.0", "streamGenerateContent")
    assert route.labels == (
        "/v1beta/models/{model}:streamGenerateContent",
        "/p/{project}/v1beta/models/{model}:streamGenerateContent",
    )
    route, project, values = table.find("/v1/chat/completions")
    assert (route.dialect.name, project["project"], values) == (dialects.CHAT, None, ())
    assert table.find("/p/Shop/v1/chat/completions") is None  # not a project name
    assert table.find("/api/v1/pending") is None
