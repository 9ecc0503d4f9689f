"""Credentials are masked wherever phalanx writes text a person may read."""

from __future__ import annotations

import logging

from phalanx.storage.redact import RedactingFormatter, redact, remember


def test_known_shapes_are_masked() -> None:
    text = (
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=abc123/xyz==;"
        "BlobEndpoint=http://h/acct; url "
        "https://a.blob.core.windows.net/c/b?sv=2024&sig=SECRETSIG%3D "
        "SharedAccessSignature=sv=1&sig=zzz;"
    )
    out = redact(text)
    for secret in ("abc123/xyz==", "SECRETSIG%3D", "zzz"):
        assert secret not in out
    assert "AccountName=acct" in out and "sv=2024" in out


def test_a_urls_password_is_masked_and_its_user_and_host_kept() -> None:
    line = "Looking in indexes: https://build:t0k3n-S3cret@pypi.corp.example/simple, x://a@b"
    out = redact(line)
    assert "t0k3n-S3cret" not in out
    assert "https://build:***@pypi.corp.example/simple" in out and "x://a@b" in out


def test_remembered_values_are_masked_in_logs_and_tracebacks() -> None:
    remember("hunter2-very-secret")
    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "key %s", ("hunter2-very-secret",), None
    )
    try:
        raise RuntimeError("failed with hunter2-very-secret")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    out = RedactingFormatter("%(message)s").format(record)
    assert "hunter2-very-secret" not in out and out.count("***") >= 2
