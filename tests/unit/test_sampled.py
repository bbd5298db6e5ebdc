"""semula.logs.sampled: the draw behind SEMULA_ACCESS_LOG_HITS and SEMULA_CALL_LOG_HITS."""

from __future__ import annotations

from semula import logs


def test_all_and_none_draw_nothing(monkeypatch):
    monkeypatch.setattr(logs.random, "random", lambda: (_ for _ in ()).throw(AssertionError("drew")))
    assert logs.sampled(1.0) is True and logs.sampled(0.0) is False


def test_a_share_keeps_the_draws_below_it(monkeypatch):
    draws = iter([0.0, 0.24, 0.25, 0.9])
    monkeypatch.setattr(logs.random, "random", lambda: next(draws))
    assert [logs.sampled(0.25) for _ in range(4)] == [True, True, False, False]
