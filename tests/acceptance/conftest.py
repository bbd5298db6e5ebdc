from __future__ import annotations

import pytest

from tests.helpers import Server


@pytest.fixture
def start_server(db_url, tmp_path):
    """Start real `semula serve` processes on the test database; all are stopped afterwards."""
    servers: list[Server] = []

    def start(**kwargs) -> Server:
        server = Server(db_url, tmp_path / f"server{len(servers)}.log", **kwargs)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
