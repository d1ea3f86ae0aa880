"""Shared helpers for the checker tests (imported by the test modules as ``conftest``-level fixtures)."""

from __future__ import annotations

import pytest

from course_utils.checks import CheckResult, Status


def expect(result: CheckResult, status: Status | str, *phrases: str) -> None:
    """Assert a checker's status and that its messages contain every phrase (case-insensitive)."""
    status = Status(status)
    text = str(result)
    assert result.status is status, f"expected {status.value}, got:\n{text}"
    lowered = "\n".join(result.messages).lower()
    for phrase in phrases:
        assert phrase.lower() in lowered, f"expected the phrase {phrase!r} in:\n{text}"


@pytest.fixture
def expect_result():
    return expect
