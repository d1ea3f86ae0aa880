"""Helpers shared by the checker tests: ``from helpers import expect``."""

from __future__ import annotations

from course_utils.checks import CheckResult, Status


def expect(result: CheckResult, status: Status | str, *phrases: str) -> None:
    """Assert a checker's status and that its messages contain every phrase (case-insensitive)."""
    status = Status(status)
    text = str(result)
    assert result.status is status, f"expected {status.value}, got:\n{text}"
    lowered = "\n".join(result.messages).lower()
    for phrase in phrases:
        assert phrase.lower() in lowered, f"expected the phrase {phrase!r} in:\n{text}"
