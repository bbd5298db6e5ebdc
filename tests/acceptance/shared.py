"""One `semula serve` for the tests of a module, which each work in a workspace of their own.

A server start costs about 1 s of CPU (decision 0069); most acceptance tests take the default
configuration and only need a server, not a server of their own. A module opts in by naming these
fixtures at its top level, which overrides the per-test ones of tests/conftest.py for it:

    db_url, ctx, server = shared.db_url, shared.ctx, shared.server

- `db_url` is the module's database (one per dialect), not a test's: a test's rows stay in it.
- `ctx` is the operator inside a workspace made for the test, so `token`, `shop` and `make_token`
  (which take `ctx`) are that workspace's, and a test sees only its own projects, tokens, calls and
  call log under the names it expects (`shop`), as a test with a database of its own would.
- `server` is the module's server. What a server counts for all its workspaces (metrics, its log,
  held calls) is then shared with the module's earlier tests: a test about those, about a server's
  start, configuration, signals or restarts, keeps `start_server()`, which starts one of its own (on
  the module's database, in its test's workspace all the same).

A module-scoped fixture lives in one pytest process, whose tests run one after another, so the
server serves one test at a time however the tests are distributed; tests/conftest.py's TOGETHER
keeps a module's tests of one database on one xdist worker, so that it is started once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from semula.service import CLI, Context, workspaces
from tests.conftest import fresh_database
from tests.helpers import Server


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[str]:
    """The module's migrated database of each dialect (tests/conftest.py's db_url, once per module)."""
    yield from fresh_database(request, tmp_path_factory.mktemp("module-db"))


@pytest.fixture
def ctx(store, settings) -> Context:
    """The operator's context inside a workspace of the test's own."""
    operator = Context(store, settings, CLI)
    name = f"test-{uuid.uuid4().hex[:12]}"
    workspaces.create(operator, name)
    return workspaces.operator_in(operator, name)


@pytest.fixture
def server(module_server: Server) -> Server:
    """The module's `semula serve` (default configuration), running (tests/acceptance/conftest.py)."""
    if module_server.proc.poll() is not None:
        raise AssertionError(
            f"the module's server exited with {module_server.proc.returncode}:\n{module_server.log()}"
        )
    return module_server
