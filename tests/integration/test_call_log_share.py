"""SEMULA_CALL_LOG_HITS: only that share of replay hits gets a call-log row; every other call gets
one, the metrics count every hit, and the dashboard says its hit counts are a share."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import REGISTRY

from semula import logs
from semula.service import projects
from semula.web import create_app
from tests.entry_helpers import request_for, save_entry

URL = "/p/shop/v1/chat/completions"


@pytest.fixture
def shop(ctx):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    save_entry(ctx, "shop", "hello", {"content": "first"})
    return projects.get(ctx, "shop")


def serve(store, settings, share):
    return create_app(replace(settings, auth=False, call_log_hits=share), store).test_client()


def logged(ctx, shop):
    return [row["outcome"] for row in ctx.store.all("calls_in_project", project_id=shop["id"])]


def hits_counted():
    return REGISTRY.get_sample_value("semula_proxy_calls_total", {"outcome": "hit"}) or 0.0


def test_with_no_share_no_hit_is_logged_but_every_miss_is_and_the_metrics_count_every_hit(
    ctx, store, settings, shop
):
    client = serve(store, settings, 0.0)
    before = hits_counted()
    # a first sight, the sight that keeps it, and a kept hit: each a hit, none logged
    for _ in range(3):
        r = client.post(URL, json=request_for("hello"))
        assert r.status_code == 200 and r.json["choices"][0]["message"]["content"] == "first"
    assert client.post(URL, json=request_for("unknown")).status_code == 424
    assert logged(ctx, shop) == ["replay_miss"]
    assert hits_counted() == before + 3


def test_a_share_logs_the_hits_its_draw_admits(ctx, store, settings, shop, monkeypatch):
    draws = iter([0.1, 0.9, 0.3, 0.7, 0.49, 0.51])
    monkeypatch.setattr(logs.random, "random", lambda: next(draws))
    client = serve(store, settings, 0.5)
    for _ in range(6):
        assert client.post(URL, json=request_for("hello")).status_code == 200
    assert logged(ctx, shop) == ["hit", "hit", "hit"]


def test_by_default_every_hit_is_logged_and_the_dashboard_says_nothing_of_a_share(ctx, store, settings, shop):
    client = create_app(replace(settings, auth=False), store).test_client()
    for _ in range(4):
        assert client.post(URL, json=request_for("hello")).status_code == 200
    assert logged(ctx, shop) == ["hit"] * 4
    assert 'id="hit-share"' not in client.get("/ui/").get_data(as_text=True)
    assert 'id="hit-share"' not in client.get("/ui/p/shop/calls").get_data(as_text=True)


def test_the_dashboard_says_its_hit_counts_are_a_share(store, settings, shop):
    client = serve(store, settings, 0.01)
    for page in ("/ui/", "/ui/p/shop/calls"):
        text = client.get(page).get_data(as_text=True)
        assert 'id="hit-share"' in text and "1% of them" in text and "SEMULA_CALL_LOG_HITS" in text, page


def test_semula_replay_logs_every_hit_whatever_the_environment_says(monkeypatch, tmp_path):
    from semula.surfaces import replay_server

    # `semula replay --record --prune` keeps only the entries its call log names.
    monkeypatch.setenv("SEMULA_CALL_LOG_HITS", "0")
    settings = replay_server.replay_settings(str(tmp_path))
    assert settings.call_log_hits == 1.0 and settings.database_url.startswith("sqlite:///")
