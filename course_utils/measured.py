"""Two kinds of figures, told apart on the screen: the course's measurements and your own run's.

    from course_utils.measured import CourseMeasurement, YourRun
    CourseMeasurement("What each lever bought", table, machine=COURSE_CPU, date="26-27 November 2026")
    YourRun("Training", ["step 100: training loss 5.656"], run="fast-test on cpu")

A ``CourseMeasurement`` is a Markdown quote headed "The course's measurement", with the machine and the date the
figures come from: the very form a lesson's Markdown cells give their course figures (a quote that starts with
:func:`course_header`), so that the course's figures look alike wherever they are, and render alike in
JupyterLab, Colab and GitHub's notebook viewer (a quote and a table need no HTML or styles). A ``YourRun`` is
a green box titled "Your run", with the run's name. Both show themselves in a notebook (``_repr_markdown_``,
``_repr_html_``) and as plain text in a terminal or a test.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any, Sequence

__all__ = ["COURSE_CPU", "COURSE_HEADER", "CourseMeasurement", "YourRun", "course_header", "fast_run_notice"]

#: the machine of the course's CPU measurements (lessons 08 and 09, benchmarks/README.md)
COURSE_CPU = "a 2-core AMD EPYC CPU with AVX-512 BF16, no GPU, 2 torch threads, torch 2.13.0+cpu"
#: how a Markdown cell of a lesson starts a quote of the course's own figures
COURSE_HEADER = "**The course's measurement**"

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


def course_header(date: str, machine: str = COURSE_CPU) -> str:
    """The first line of a quote of the course's figures, in a Markdown cell and in ``CourseMeasurement``."""
    return f"{COURSE_HEADER} · {machine}, {date}: not your run's figures."


def _decimals(values: Sequence[Any]) -> int | None:
    """The decimals that a column of floats shows, the same in every row (at most 4), as pandas prints them."""
    floats = [v for v in values if isinstance(v, float) and v == v]
    if not floats or len(floats) != len([v for v in values if v is not None and v == v]):
        return None
    return min(4, max(len(repr(v).split(".")[1]) if "." in repr(v) and "e" not in repr(v) else 0 for v in floats))


def _markdown_table(table: Any) -> list[str]:
    """A DataFrame as the lines of a Markdown table, its index first (no `tabulate` needed)."""
    def cell(value: Any, decimals: int | None = None) -> str:
        if value is None or value != value:  # NaN: empty
            return ""
        text = f"{value:.{decimals}f}" if decimals is not None else str(value)
        return text.replace("|", "\\|")
    columns = [table[name].tolist() for name in table.columns]
    decimals = [_decimals(values) for values in columns]
    head = [cell(table.index.name), *map(cell, table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, index in enumerate(table.index):
        lines.append("| " + " | ".join([cell(index), *(cell(values[i], d) for values, d in zip(columns, decimals))])
                     + " |")
    return lines


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

    def _repr_markdown_(self) -> str:
        if hasattr(self.body, "to_string"):  # a pandas DataFrame
            body = _markdown_table(self.body)
        else:
            lines = [self.body] if isinstance(self.body, str) else [str(line) for line in self.body]
            body = ["```", *"\n".join(lines).splitlines(), "```"]
        title = self.title[:1].upper() + self.title[1:] + (f" ({self.note})" if self.note else "") + ":"
        return "\n".join(f"> {line}".rstrip() for line in
                         [course_header(self.date or "date not recorded", self.machine), "", title, "", *body])

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
                   "something are the course's: in the quotes headed \"The course's measurement\", and in the text "
                   "wherever it says what we measured.")
