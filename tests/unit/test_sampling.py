"""semula.core.sampling.keep: the draw behind SEMULA_ACCESS_LOG_HITS and SEMULA_CALL_LOG_HITS."""

from __future__ import annotations

from semula.core import sampling


def test_all_and_none_draw_nothing(monkeypatch):
    monkeypatch.setattr(sampling.random, "random", lambda: (_ for _ in ()).throw(AssertionError("drew")))
    assert sampling.keep(1.0) is True and sampling.keep(0.0) is False


def test_a_share_keeps_the_draws_below_it(monkeypatch):
    draws = iter([0.0, 0.24, 0.25, 0.9])
    monkeypatch.setattr(sampling.random, "random", lambda: next(draws))
    assert [sampling.keep(0.25) for _ in range(4)] == [True, True, False, False]
