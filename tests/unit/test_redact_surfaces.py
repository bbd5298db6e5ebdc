"""Redaction where text leaves semula: provider error text and log lines (no database)."""

from __future__ import annotations

import json
import logging

from semula import logs
from semula.core import redact

KEY = "sk-proj-" + "Zx9" * 14


def test_provider_error_text_redacts_before_cutting():
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}. Find yours at ..."}})
    text = redact.provider_error_text(401, body.encode())
    assert text.startswith("401: ") and KEY not in text and "[REDACTED]" in text
    # A key straddling the cut is redacted first, so no prefix of it survives either.
    long = "x" * 290 + " " + KEY
    cut = redact.provider_error_text(500, long, limit=300)
    assert KEY[:8] not in cut and len(cut) <= len("500: ") + 300
    assert redact.provider_error_text(502, b"") == "502"
    assert "operator-secret-value" not in redact.provider_error_text(
        400, "echo operator-secret-value", ["operator-secret-value"]
    )


def test_a_key_straddling_the_first_cut_is_not_brought_to_the_front_by_the_whitespace_collapse():
    """Only the first limit * 16 characters are read; a key cut there must not survive in part, even
    when the whitespace before it collapses to one space and brings it into the shown text."""
    for secret in ("gw-Zq8pLm3Rt7Vx2Kw9N", KEY, "claude -p --token abc123"):
        for offset in range(1, len(secret)):
            body = " " * (4800 - offset) + secret + " more"
            shown = redact.provider_error_text(401, body, [secret])
            assert not any(secret[:n] in shown for n in range(4, len(secret) + 1)), (secret, offset, shown)
    # A credential value with spaces in it, cut by the read, shows no word of it either.
    quoted = " " * (4800 - 31) + '"password": "correct horse battery staple" more'
    assert "correct" not in redact.provider_error_text(401, quoted)
    # A long error without whitespace (or with little) still shows its first characters.
    long = redact.provider_error_text(500, '{"error":{"message":"bad","echo":"' + "A" * 6000 + '"}}')
    assert long.startswith('500: {"error":{"message":"bad","echo":"AAA') and len(long) == len("500: ") + 300
    kept = redact.provider_error_text(500, "quota exceeded " + "x" * 5000, ["unrelated-secret"])
    assert kept.startswith("500: quota exceeded xxx")


def test_log_lines_never_carry_a_credential(capsys):
    logs.setup("info", ("configured-secret-1234",))
    try:
        log = logging.getLogger("semula.test")
        log.warning(f"upstream said {KEY}", extra={"detail": f"Authorization: Bearer {KEY}", "n": 3})
        log.warning(
            "config", extra={"url": "postgresql://app:hunter2hunter2@db/x", "echo": "configured-secret-1234"}
        )
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    text = json.dumps(lines)
    assert KEY not in text and "hunter2hunter2" not in text and "configured-secret-1234" not in text
    assert lines[0]["n"] == 3 and lines[0]["msg"] == "upstream said [REDACTED]"
    assert lines[1]["url"] == "postgresql://app:[REDACTED]@db/x"


def test_log_lines_for_a_person_say_the_same_and_carry_no_credential(capsys):
    """SEMULA_LOG_FORMAT=text (auto at a terminal, as under `make run`): one line a record, the same
    fields and the same redaction; auto is JSON when stderr is no terminal (capsys's is none)."""
    logs.setup("info", ("configured-secret-1234",), "text")
    outside = logs.CURRENT.set(None)  # no request being served: no request_id field
    try:
        access = logging.getLogger("semula.access")
        logs.info_line(access, "request", {"method": "POST", "status": 200, "route": "/v1/chat completions"})
        log = logging.getLogger("semula.test")
        log.warning(f"upstream said {KEY}", extra={"echo": "configured-secret-1234", "n": 3})
        try:
            raise ValueError("kaboom")
        except ValueError:
            log.exception("failed")
        logs.setup("info", (), "auto")
        log.warning("plain", extra={"n": 4})
    finally:
        logs.CURRENT.reset(outside)
        logging.getLogger().handlers.clear()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith(
        'INFO    semula.access: request method=POST status=200 route="/v1/chat completions"'
    )
    assert lines[1].endswith("WARNING semula.test: upstream said [REDACTED] echo=[REDACTED] n=3")
    assert (
        "ERROR   semula.test: failed exc_type=ValueError" in lines[2]
        and "test_redact_surfaces.py" in lines[3]
    )
    assert KEY not in "\n".join(lines) and "configured-secret-1234" not in "\n".join(lines)
    assert json.loads(lines[-1])["n"] == 4
