"""Two kinds of figures, told apart on the screen: the course's measurements and your own run's.

    from course_utils.measured import CourseMeasurement, YourRun
    CourseMeasurement("What each lever bought", table, machine=COURSE_CPU, date="26-27 November 2026")
    YourRun("Training", ["step 100: training loss 5.656"], run="fast-test on cpu")

A ``CourseMeasurement`` is a grey-blue box titled "The course's measurement", with the machine and the date the
figures come from; a ``YourRun`` is a green box titled "Your run", with the run's name. Both show themselves in a
notebook (``_repr_html_``) and as plain text in a terminal or a test. Lessons write their course figures in
Markdown the same way: a quote that starts with ``COURSE_HEADER``.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any, Sequence

__all__ = ["COURSE_CPU", "COURSE_HEADER", "CourseMeasurement", "YourRun", "fast_run_notice"]

#: the machine of the course's CPU measurements (lessons 08 and 09, benchmarks/README.md)
COURSE_CPU = "a 2-core AMD EPYC CPU with AVX-512 BF16, no GPU, 2 torch threads, torch 2.13.0+cpu"
#: how a Markdown cell of a lesson starts a quote of the course's own figures
COURSE_HEADER = "**The course's measurement**"

_COURSE = ("#4a6785", "#eef2f7")  # border, background
_YOURS = ("#2e7d32", "#eef7ee")
_FAST = ("#b26a00", "#fff4e0")


def _body_html(body: Any) -> str:
    if hasattr(body, "to_html"):  # a pandas DataFrame
        return body.to_html(border=0)
    lines = [body] if isinstance(body, str) else list(body)
    return "".join(f'<div style="white-space:pre-wrap;font-family:monospace">{html.escape(str(line))}</div>'
                   for line in lines)


def _body_text(body: Any) -> str:
    if hasattr(body, "to_string"):
        return body.to_string()
    return body if isinstance(body, str) else "\n".join(str(line) for line in body)


def _box(colours: tuple[str, str], heading: str, subtitle: str, body: Any) -> str:
    border, background = colours
    return (f'<div style="border-left:6px solid {border};background:{background};padding:8px 12px;margin:6px 0;'
            f'font-family:sans-serif;color:#212121">'
            f'<div style="color:{border};font-weight:bold">{html.escape(heading)}</div>'
            f'<div style="color:#555;font-size:90%;margin-bottom:6px">{html.escape(subtitle)}</div>'
            f'{_body_html(body)}</div>')


@dataclasses.dataclass(frozen=True)
class CourseMeasurement:
    """Figures the course measured once, on a named machine and date: not your run's."""

    title: str
    body: Any  # a DataFrame, a string or lines
    machine: str = COURSE_CPU
    date: str = ""
    note: str = ""  # how it was run, one line

    @property
    def subtitle(self) -> str:
        parts = [f"measured on {self.machine}"] + ([self.date] if self.date else []) + ([self.note] if self.note else [])
        return "; ".join(parts)

    def _repr_html_(self) -> str:
        return _box(_COURSE, f"The course's measurement: {self.title}", self.subtitle, self.body)

    def __str__(self) -> str:
        return f"== The course's measurement: {self.title} ==\n({self.subtitle})\n{_body_text(self.body)}"

    __repr__ = __str__


@dataclasses.dataclass(frozen=True)
class YourRun:
    """Figures of the run in this notebook, on this machine, now."""

    title: str
    body: Any
    run: str = ""  # the configuration and the device, e.g. "laptop-cpu on cpu"

    def _repr_html_(self) -> str:
        return _box(_YOURS, f"Your run: {self.title}", self.run, self.body)

    def __str__(self) -> str:
        return f"== Your run: {self.title} ==" + (f" ({self.run})" if self.run else "") + f"\n{_body_text(self.body)}"

    __repr__ = __str__


@dataclasses.dataclass(frozen=True)
class _Notice:
    heading: str
    text: str

    def _repr_html_(self) -> str:
        return _box(_FAST, self.heading, "", self.text)

    def __str__(self) -> str:
        return f"== {self.heading} ==\n{self.text}"

    __repr__ = __str__


def fast_run_notice(reason: str) -> _Notice:
    """The one notice a lesson shows when its run is a quick stand-in (``reason``: why): its figures mean nothing."""
    return _Notice("Your figures below mean nothing",
                   f"{reason}. From here on, every box titled \"Your run\" shows what that tiny run measured: it "
                   "proves that the code runs, not how well a Transformer translates. The figures that do mean "
                   "something are the course's, in the boxes titled \"The course's measurement\".")
