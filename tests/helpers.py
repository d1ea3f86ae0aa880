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


def expect_fixed_device(result: CheckResult, *phrases: str) -> None:
    """A device written into the code (``'cuda'`` whenever a GPU exists) is FAILED with ``phrases`` on a CPU-only
    machine, where the pretend GPU finds it; on a machine with a real GPU the first comparison already meets the
    tensor made there, and the checker's fallback names it."""
    import torch

    if torch.cuda.is_available():
        expect(result, "failed", "returned a tensor on the GPU", "torch.cuda.is_available()")
    else:
        expect(result, "failed", *phrases)
