"""Secrets read from files (a token, a password): the first line, without its newline."""

from __future__ import annotations

from pathlib import Path


class SecretFileError(ValueError):
    """The file cannot be read or holds nothing; the message names it (never a secret)."""


def read_secret(path: str | Path, what: str) -> str:
    """The secret in the file at ``path`` (its first line, stripped); ``what`` names the
    option it was given with, for the error."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SecretFileError(f"{what} {path}: {e.strerror}") from None
    secret = text.splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise SecretFileError(f"{what} {path}: the file is empty")
    return secret
