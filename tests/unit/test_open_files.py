"""`semula serve` raises the open-file limit its workers' connections need (issue 52)."""

from __future__ import annotations

import logging
import resource

import pytest

from semula.surfaces import cli


@pytest.fixture
def limits(monkeypatch):
    """A fake RLIMIT_NOFILE: [soft, hard], and what setrlimit was asked."""
    state = {"limit": [1024, 524288], "set": []}

    def getrlimit(which):
        assert which == resource.RLIMIT_NOFILE
        return tuple(state["limit"])

    def setrlimit(which, value):
        assert which == resource.RLIMIT_NOFILE and value[1] == state["limit"][1]
        state["set"].append(value)
        state["limit"] = list(value)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return state


def test_the_soft_limit_is_raised_to_the_connections_and_the_files_beside(limits, caplog):
    with caplog.at_level(logging.WARNING, "semula.serve"):
        assert cli.raise_open_files(15_000) == 15_000 + cli.FILES_BESIDE
    assert limits["set"] == [(15_000 + cli.FILES_BESIDE, 524288)]
    assert not caplog.records


def test_a_limit_high_enough_is_left_alone(limits):
    limits["limit"] = [65536, 65536]
    assert cli.raise_open_files(10_000) == 65536 and limits["set"] == []


def test_a_hard_limit_too_low_is_reached_and_said(limits, caplog):
    limits["limit"] = [1024, 20_000]
    with caplog.at_level(logging.WARNING, "semula.serve"):
        assert cli.raise_open_files(25_000) == 20_000
    assert limits["set"] == [(20_000, 20_000)]
    assert "fewer than SEMULA_WORKER_CONNECTIONS (25,000)" in caplog.text
