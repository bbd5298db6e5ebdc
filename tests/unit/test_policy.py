"""The request policy both pipelines share (semula/web/policy.py): bearer secrets, statuses, body limits."""

from __future__ import annotations

import io

import pytest

from semula.core import errors
from semula.web import policy


@pytest.mark.parametrize(
    "header, secret",
    [
        ("Bearer smt_a", "smt_a"),
        ("bEaReR   smt_a  ", "smt_a"),
        ("  Bearer smt_a", "smt_a"),
        ("Bearer", ""),
        ("Bearer    ", ""),
        ("Basic smt_a", None),
        ("Bearersmt_a", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_secret_of_an_authorization_header(header, secret):
    assert policy.bearer(header) == secret


def test_an_api_key_stands_for_a_missing_authorization_header_only():
    assert policy.authorization(None, "smt_k") == "Bearer smt_k"
    assert policy.authorization("Bearer smt_a", "smt_k") == "Bearer smt_a"
    assert policy.authorization(None, None) is None
    assert policy.authorization(None, "") is None


def every_error_class(cls=errors.SemulaError):
    yield cls
    for sub in cls.__subclasses__():
        yield from every_error_class(sub)


def test_every_error_status_has_its_reason_phrase():
    """A 502 from the provider is `502 Bad Gateway` on the fast path too, as Flask writes it."""
    assert policy.status_line(502) == "502 Bad Gateway"
    assert policy.status_line(424) == "424 Failed Dependency"
    for cls in every_error_class():
        assert policy.status_line(cls.status) != f"{cls.status} Error", cls


class Reader(io.BytesIO):
    """A body stream that records how much was asked of it."""

    asked: list[int]

    def read(self, size=-1):
        self.asked = [*getattr(self, "asked", []), size]
        return super().read(size)


def test_a_declared_body_past_the_limit_is_refused_unread():
    stream = Reader(b"x" * 20)
    with pytest.raises(errors.PayloadTooLarge):
        policy.read_body(stream, "20", 10)
    assert getattr(stream, "asked", []) == []


def test_an_undeclared_body_is_read_to_one_byte_past_the_limit():
    stream = Reader(b"x" * 20)
    with pytest.raises(errors.PayloadTooLarge):
        policy.read_body(stream, None, 10)
    assert stream.asked == [11]
    assert policy.read_body(Reader(b"x" * 10), None, 10) == b"x" * 10
    assert policy.read_body(Reader(b"x" * 10), "10", 10) == b"x" * 10
