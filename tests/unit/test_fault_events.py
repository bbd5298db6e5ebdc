"""A stream's body cut into its events, as a disconnect fault counts them (semula.core.faults.events)."""

from __future__ import annotations

import pytest

from semula.core import faults


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n"], ids=["lf", "crlf"])
def test_events_end_at_a_blank_line_of_either_line_end(end):
    body = b"data: 1" + end + b"event: x\ndata: 2" + end + b"data: [DONE]" + end
    parts = faults.events(body)
    assert parts == [b"data: 1" + end, b"event: x\ndata: 2" + end, b"data: [DONE]" + end]
    assert b"".join(parts) == body


def test_an_unfinished_last_event_is_kept_as_it_is():
    assert faults.events(b"data: 1\n\ndata: 2") == [b"data: 1\n\n", b"data: 2"]
    assert faults.events(b"") == []
