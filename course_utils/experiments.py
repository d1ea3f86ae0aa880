"""Ablation studies: train many variants of one model, keep every finished run, and tabulate them.

Lesson 09 re-runs the paper's Table 3 on the learner's own Transformer. The
model code and the training step are the learner's (lessons 01 to 06, loaded in
the notebook); what lives here is the machinery around them, which is not an
exercise:

* :class:`Variant`: one row of the table, a name, its group (the paper's A to E,
  or one of ours), the changes to the base configuration and the name of a
  change inside the model, which the lesson's own code applies;
* :class:`Runner`: trains each (variant, seed) with a function the lesson gives,
  saves each finished run as a JSON file in a folder, and on a second call finds
  it there instead of training it again (a run saved with another configuration
  is trained again). Rows whose effect is within a few seed spreads of the base
  get more seeds, while a time budget lasts;
* :func:`code_fingerprint`: a hash of the code that made a run, so that a run made before a bug was
  fixed is not used again;
* :func:`summarize`, :func:`markdown_table`, :func:`plot_loss_curves` and
  :func:`plot_spread`: the table (with the paper's published numbers,
  :data:`PAPER_TABLE3`), the loss curves per group and the seed spread;
* ``python -m course_utils.experiments FOLDER`` prints the Markdown table of the
  runs saved in FOLDER, with the machine and the time they took.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

#: The paper's Table 3 (Vaswani et al. 2017, "Attention Is All You Need", Table 3: variations on the Transformer
#: architecture, English-to-German newstest2013, the development set; perplexities per wordpiece). Keyed by the
#: short names lesson 09's variants use. Published numbers, copied as they are.
PAPER_TABLE3: dict[str, dict[str, Any]] = {
    "base": {"row": "base: N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, eps_ls=0.1, 100K steps",
             "ppl": 4.92, "bleu": 25.8, "params_m": 65},
    "A h=1": {"row": "(A) h=1, d_k=d_v=512", "ppl": 5.29, "bleu": 24.9},
    "A h=4": {"row": "(A) h=4, d_k=d_v=128", "ppl": 5.00, "bleu": 25.5},
    "A h=16": {"row": "(A) h=16, d_k=d_v=32", "ppl": 4.91, "bleu": 25.8},
    "A h=32": {"row": "(A) h=32, d_k=d_v=16", "ppl": 5.01, "bleu": 25.4},
    "B d_k=16": {"row": "(B) d_k=16", "ppl": 5.16, "bleu": 25.1, "params_m": 58},
    "B d_k=32": {"row": "(B) d_k=32", "ppl": 5.01, "bleu": 25.4, "params_m": 60},
    "C N=2": {"row": "(C) N=2", "ppl": 6.11, "bleu": 23.7, "params_m": 36},
    "C N=4": {"row": "(C) N=4", "ppl": 5.19, "bleu": 25.3, "params_m": 50},
    "C N=8": {"row": "(C) N=8", "ppl": 4.88, "bleu": 25.5, "params_m": 80},
    "C d_model=256": {"row": "(C) d_model=256, d_k=d_v=32", "ppl": 5.75, "bleu": 24.5, "params_m": 28},
    "C d_model=1024": {"row": "(C) d_model=1024, d_k=d_v=128", "ppl": 4.66, "bleu": 26.0, "params_m": 168},
    "C d_ff=1024": {"row": "(C) d_ff=1024", "ppl": 5.12, "bleu": 25.4, "params_m": 53},
    "C d_ff=4096": {"row": "(C) d_ff=4096", "ppl": 4.75, "bleu": 26.2, "params_m": 90},
    "D P_drop=0.0": {"row": "(D) P_drop=0.0", "ppl": 5.77, "bleu": 24.6},
    "D P_drop=0.2": {"row": "(D) P_drop=0.2", "ppl": 4.95, "bleu": 25.5},
    "D eps_ls=0.0": {"row": "(D) eps_ls=0.0", "ppl": 4.67, "bleu": 25.3},
    "D eps_ls=0.2": {"row": "(D) eps_ls=0.2", "ppl": 5.47, "bleu": 25.7},
    "E learned": {"row": "(E) positional embedding instead of sinusoids", "ppl": 4.92, "bleu": 25.7},
    "big": {"row": "big: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps", "ppl": 4.33, "bleu": 26.4,
            "params_m": 213},
}
PAPER_CITATION = "Vaswani et al. 2017, Table 3"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of an ablation table."""

    name: str  # how the row reads in the table: "h = 1, d_k = 64"
    group: str  # "base", the paper's "A" to "E", or one of ours ("scale", "norm")
    changes: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fields of the base configuration
    model: str = ""  # a change inside the model, applied by the lesson's own code ("" for none)
    warmup: bool = True  # False: the learning rate starts at the schedule's peak
    paper: str = ""  # the key of the paper's row it echoes in PAPER_TABLE3 ("" when the paper has none)

    @property
    def key(self) -> str:
        """A name for files: the group and the name, lower case, other characters as '-'."""
        return re.sub(r"[^a-z0-9]+", "-", f"{self.group} {self.name}".lower()).strip("-")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "group": self.group, "changes": dict(self.changes), "model": self.model,
                "warmup": self.warmup, "paper": self.paper}


def _json_ready(value: Any) -> Any:
    """Plain JSON data: dataclasses and mappings as dicts, tuples as lists, non-finite floats as None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def code_fingerprint(*objects: Any) -> str:
    """A short hash of the code of functions and classes (all their methods, inherited ones included).

    The same code gives the same hash in every session (no addresses, no hash-seed order), so a saved run can
    count only while the code that made it is unchanged: fix a bug, and the runs made with it are made again.
    Objects without code of their own (a built-in, a partial) count by their type's name.
    """
    digest = hashlib.sha256()

    def constant(value: Any) -> None:
        if hasattr(value, "co_code"):
            code(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                constant(item)
        elif isinstance(value, (set, frozenset)):
            for text in sorted(repr(item) for item in value):
                digest.update(text.encode())
        else:
            digest.update(repr(value).encode())

    def code(c: Any) -> None:
        digest.update(c.co_code)
        digest.update(repr(c.co_names).encode())
        constant(c.co_consts)

    for obj in objects:
        if isinstance(obj, type):
            classes = [k for k in obj.__mro__ if k.__module__.split(".")[0] not in ("torch", "builtins")]
            members = [m for k in classes for m in vars(k).values()]
        else:
            members = [obj]
        digest.update(getattr(obj, "__qualname__", type(obj).__name__).encode())
        for member in members:
            function = getattr(member, "__func__", getattr(member, "fget", member))  # methods, properties
            if hasattr(function, "__code__"):
                code(function.__code__)
    return digest.hexdigest()[:16]


def machine() -> dict[str, Any]:
    """Where the runs ran: the processor, its cores, torch's threads and the GPU if one is used."""
    info: dict[str, Any] = {"platform": platform.platform(terse=True), "python": platform.python_version(),
                            "cpu": _cpu_name(), "cores": os.cpu_count()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Runner:
    """Trains (variant, seed) runs with ``train``, saving each finished run in ``folder``; never one twice.

    ``train(variant, seed)`` trains one run and returns its measurements (a dict of plain data: ``ppl``,
    ``bleu``, ``params``, ``ms_per_step``, ``steps``, ``losses``...). ``describe(variant, seed)`` returns
    everything that defines the run (its full configuration): a saved run counts only when it was made with
    the same description. ``budget_s`` bounds the time spent on extra seeds (see :meth:`run`).
    """

    def __init__(self, folder: str | os.PathLike, train: Callable[[Variant, int], Mapping[str, Any]],
                 describe: Callable[[Variant, int], Any], budget_s: float | None = None,
                 report: Callable[[str], None] | None = print):
        self.folder = Path(folder)
        self.train, self.describe, self.budget_s = train, describe, budget_s
        self.report = report or (lambda text: None)

    def path(self, variant: Variant, seed: int) -> Path:
        return self.folder / f"{variant.key}-seed{seed}.json"

    def saved(self, variant: Variant, seed: int) -> dict[str, Any] | None:
        """The saved run of (variant, seed), if there is one made with the same description."""
        path = self.path(variant, seed)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        same = record.get("description") == _json_ready(self.describe(variant, seed))
        return record if same and record.get("variant") == _json_ready(variant.as_dict()) else None

    def one(self, variant: Variant, seed: int, order: int = 0) -> dict[str, Any]:
        """The run of (variant, seed): found in the folder, or trained now and saved."""
        record = self.saved(variant, seed)
        if record is not None:
            self.report(f"found   {_label(variant)}, seed {seed}: {_brief(record)} (saved run)")
            return record
        if self.path(variant, seed).exists():
            self.report(f"retrain {_label(variant)}, seed {seed}: its saved run was made with another configuration")
        start = time.perf_counter()
        measured = dict(self.train(variant, seed))
        record = {**measured, "variant": variant.as_dict(), "seed": seed, "order": order,
                  "description": self.describe(variant, seed), "seconds": time.perf_counter() - start,
                  "machine": machine()}
        record = _json_ready(record)
        self._write(self.path(variant, seed), record)
        self.report(f"trained {_label(variant)}, seed {seed}: {_brief(record)} ({record['seconds']:.0f} s)")
        return record

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        """Write atomically: a run interrupted while saving leaves no half-written file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=1)
        os.replace(temporary, path)

    def run(self, variants: Sequence[Variant], base_seeds: int = 3, row_seeds: int = 3,
            within: float = 2.0) -> list[dict[str, Any]]:
        """Every variant once (the base ``base_seeds`` times), then more seeds where the effect is small.

        A row whose mean perplexity lies within ``within`` times the base's seed spread (the range of its
        seeds) of the base's mean gets seeds up to ``row_seeds``, closest rows first, as long as the time
        spent on all the runs stays within ``budget_s`` (estimated from the row's first run). Returns every
        run, in the order of ``variants``.
        """
        records = []
        for order, variant in enumerate(variants):
            for seed in range(base_seeds if variant.group == "base" else 1):
                records.append(self.one(variant, seed, order))
        base = [r for r in records if r["variant"]["group"] == "base"]
        spread = _range([r["ppl"] for r in base])
        if row_seeds > 1 and spread is not None:
            centre = _mean([r["ppl"] for r in base])
            small = []
            for order, variant in enumerate(variants):
                first = next(r for r in records if r["variant"] == _json_ready(variant.as_dict()))
                if variant.group != "base" and first["ppl"] is not None and abs(first["ppl"] - centre) <= within * spread:
                    small.append((abs(first["ppl"] - centre), order, variant, first))
            for _, order, variant, first in sorted(small, key=lambda item: item[:2]):
                for seed in range(1, row_seeds):
                    if self.saved(variant, seed) is None and not self._affordable(records, first["seconds"]):
                        self.report(f"skipped {_label(variant)}, seed {seed}: the time budget is spent")
                        continue
                    records.append(self.one(variant, seed, order))
        return sorted(records, key=lambda r: (r["order"], r["seed"]))

    def _affordable(self, records: list[dict[str, Any]], seconds: float) -> bool:
        if self.budget_s is None:
            return True
        return sum(r["seconds"] for r in records) + seconds <= self.budget_s


def _label(variant: Variant) -> str:
    return f"({variant.group}) {variant.name}" if variant.group != "base" else "base"


def _brief(record: Mapping[str, Any]) -> str:
    if record.get("ppl") is None:
        return "diverged"
    return f"PPL {record['ppl']:.3f}, BLEU {record['bleu']:.1f}, {record['ms_per_step']:.0f} ms/step"


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _range(values: Iterable[float | None]) -> float | None:
    """max - min of two or more values; None for fewer (one seed has no spread) or a diverged run."""
    values = list(values)
    if len(values) < 2 or any(v is None for v in values):
        return None
    return max(values) - min(values)


def load_runs(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every run saved in ``folder``, in the order of the plan that made them."""
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            runs.append(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            continue
    return sorted(runs, key=lambda r: (r.get("order", 0), r.get("seed", 0)))


# --------------------------------------------------------------------------
# The table


def _rows(records: Sequence[Mapping[str, Any]]) -> list[tuple[dict[str, Any], list[Mapping[str, Any]]]]:
    """(variant, its runs) per row, in the order of the records."""
    rows: dict[str, tuple[dict[str, Any], list]] = {}
    for record in records:
        variant = record["variant"]
        rows.setdefault(json.dumps(variant, sort_keys=True), (variant, []))[1].append(record)
    return list(rows.values())


def _verdict(mean: float | None, spread: float | None, base_mean: float | None, base_spread: float | None,
             lower_is_better: bool = True) -> str:
    """Better or worse than the base, or within the seed spread (no finding)."""
    if mean is None:
        return "diverged"
    if base_mean is None:
        return ""
    if base_spread is None:
        return "one seed: no spread"
    # a row of one seed has no spread of its own: its difference counts only beyond twice the base's spread
    allowed = max(spread, base_spread) if spread is not None else 2 * base_spread
    delta = mean - base_mean
    if abs(delta) <= allowed:
        return "within the seed spread"
    better = delta < 0 if lower_is_better else delta > 0
    return "better" if better else "worse"


def summarize(records: Sequence[Mapping[str, Any]], paper: Mapping[str, Mapping[str, Any]] = PAPER_TABLE3):
    """The ablation table as a pandas DataFrame: one row per variant, the base first, the paper alongside.

    PPL and BLEU are means over the row's seeds; "± PPL" is half the range of its seeds (blank for one
    seed). "vs base" compares with the base's mean: a difference no larger than the larger seed spread
    (of the row or of the base; twice the base's for a row of one seed) is not a finding.
    """
    import pandas as pd

    rows = _rows(records)
    base_runs = next((runs for variant, runs in rows if variant["group"] == "base"), [])
    base_ppl, base_spread = _mean(r["ppl"] for r in base_runs), _range(r["ppl"] for r in base_runs)
    table = []
    for variant, runs in rows:
        ppls = [r["ppl"] for r in runs]
        spread = _range(ppls)
        row = paper.get(variant.get("paper") or "", {})
        table.append({
            "group": variant["group"], "variant": variant["name"], "seeds": len(runs),
            "PPL": _mean(ppls) if all(p is not None for p in ppls) else None,
            "± PPL": None if spread is None else spread / 2,
            "BLEU": _mean(r["bleu"] for r in runs),
            "params": int(_mean(r["params"] for r in runs) or 0),
            "ms/step": _mean(r["ms_per_step"] for r in runs),
            "vs base": "" if variant["group"] == "base" else _verdict(
                _mean(ppls) if all(p is not None for p in ppls) else None, spread, base_ppl, base_spread),
            "paper row": row.get("row", "(not in the paper)"),
            "paper PPL": row.get("ppl"), "paper BLEU": row.get("bleu"),
        })
    return pd.DataFrame(table)


def compare_with_paper(table, paper: Mapping[str, Mapping[str, Any]] = PAPER_TABLE3, tolerance: float = 0.05):
    """Each row that the paper has too: which way its perplexity moved from its base, and which way ours did.

    ``table`` is :func:`summarize`'s. The paper gives no seed spread: a change of at most ``tolerance`` in its
    perplexity counts as "about the same". Ours is the table's verdict (beyond our seed spread, or within it).
    """
    import pandas as pd

    base = table[table["group"] == "base"]
    ours_base = float(base["PPL"].iloc[0]) if len(base) and _number(base["PPL"].iloc[0]) else None
    rows = []
    for _, row in table.iterrows():
        if row["group"] == "base" or not _number(row["paper PPL"]):
            continue
        delta = float(row["paper PPL"]) - float(paper["base"]["ppl"])
        theirs = "better" if delta < -tolerance else "worse" if delta > tolerance else "about the same"
        ours = row["vs base"]
        if ours in ("better", "worse"):
            verdict = "agrees" if ours == theirs else "disagrees"
        elif ours == "within the seed spread":
            verdict = "agrees" if theirs == "about the same" else "no evidence here (within our seed spread)"
        else:
            verdict = f"cannot tell ({ours})"
        rows.append({"row": row["variant"], "paper's row": row["paper row"], "paper: PPL change": round(delta, 2),
                     "paper": theirs,
                     "ours: PPL change": round(float(row["PPL"]) - ours_base, 3) if _number(row["PPL"]) and ours_base else None,
                     "ours": ours, "verdict": verdict})
    return pd.DataFrame(rows)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def markdown_table(frame, digits: Mapping[str, int] | None = None) -> str:
    """A DataFrame as a Markdown table (numbers rounded; empty cells for missing values)."""
    digits = {"PPL": 3, "± PPL": 3, "BLEU": 1, "ms/step": 0, "paper PPL": 2, "paper BLEU": 1, **(digits or {})}

    def cell(column: str, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        if column == "params":
            return f"{int(value):,}"
        if isinstance(value, float):
            return f"{value:.{digits.get(column, 2)}f}"
        return str(value).replace("|", "\\|")

    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(cell(c, row[c]) for c in columns) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The figures


def _mean_curve(runs: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[float]]:
    """The mean loss curve over a row's seeds (the steps of its first run)."""
    steps = list(runs[0].get("steps") or [])
    curves = [r.get("losses") or [] for r in runs]
    n = min([len(steps)] + [len(c) for c in curves])
    means = []
    for i in range(n):
        values = [c[i] for c in curves if c[i] is not None]
        means.append(sum(values) / len(values) if values else float("nan"))
    return steps[:n], means


def plot_loss_curves(records: Sequence[Mapping[str, Any]], groups: Sequence[str], titles: Mapping[str, str],
                     ncols: int = 4, figsize: tuple[float, float] = (15.0, 6.5), ylim: tuple[float, float] | None = None):
    """One panel per group: the base's mean training-loss curve (grey) and each row of the group (mean over seeds).

    The panels share their y axis; by default it starts a little below the lowest loss and ends at the base's
    loss a tenth of the way into training (or higher, to show where every run ends), so that the first steps,
    where every loss is high, do not flatten the rest.
    """
    import matplotlib.pyplot as plt

    rows = _rows(records)
    nrows = max(1, math.ceil(len(groups) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, sharey=True, squeeze=False)
    base = next((runs for variant, runs in rows if variant["group"] == "base"), None)
    base_curve = _mean_curve(base) if base else ([], [])
    for ax, group in zip(axes.flat, groups):
        if base:
            ax.plot(*base_curve, color="grey", linewidth=2.5, alpha=0.6, label="base")
        for variant, runs in rows:
            if variant["group"] == group:
                ax.plot(*_mean_curve(runs), linewidth=1.5, label=variant["name"])
        ax.set_title(titles.get(group, group), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    curves = [[v for v in _mean_curve(runs)[1] if math.isfinite(v)] for _, runs in rows]
    finite = [v for curve in curves for v in curve]
    if ylim is None and finite and base_curve[1]:
        early = base_curve[1][min(len(base_curve[1]) - 1, len(base_curve[1]) // 10)]
        top = max([early] + [curve[-1] * 1.05 for curve in curves if curve])  # every run's end stays in view
        low = min(finite)
        ylim = (low - 0.05 * (top - low), top) if top > low else None
    if ylim is not None:
        axes.flat[0].set_ylim(*ylim)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss")
    for ax in axes[-1, :]:
        ax.set_xlabel("step")
    fig.tight_layout()
    return fig


def plot_spread(records: Sequence[Mapping[str, Any]], metric: str = "ppl", figsize: tuple[float, float] = (9.0, 7.0),
                label: str = "validation perplexity"):
    """Each row's difference from the base's mean (a bar: the mean over its seeds; dots: each seed).

    The grey band spans the base's own seeds around their mean: a bar inside it is no evidence of anything.
    Differences far beyond the others are drawn to the edge of the plot and written out; diverged runs are named.
    """
    import matplotlib.pyplot as plt

    rows = _rows(records)
    fig, ax = plt.subplots(figsize=figsize)
    base = next((runs for variant, runs in rows if variant["group"] == "base"), [])
    base_values = [r[metric] for r in base if r.get(metric) is not None]
    centre = sum(base_values) / len(base_values) if base_values else 0.0
    if base_values:
        ax.axvspan(min(base_values) - centre, max(base_values) - centre, color="grey", alpha=0.3,
                   label=f"the base's {len(base_values)} seed(s)")
    ax.axvline(0.0, color="grey", linewidth=1)
    deltas = [[r[metric] - centre for r in runs if r.get(metric) is not None] for _, runs in rows]
    sizes = sorted(abs(sum(d) / len(d)) for d in deltas if d)
    spread = (max(base_values) - min(base_values)) if len(base_values) > 1 else 0.0
    edge = max([3 * spread] + ([1.25 * sizes[int(0.8 * (len(sizes) - 1))]] if sizes else []) + [1e-3])
    labels = []
    for y, ((variant, runs), delta) in enumerate(zip(rows, deltas)):
        labels.append(_label(Variant(variant["name"], variant["group"])))
        if len(delta) < len(runs):
            ax.text(0.0, y, " diverged", va="center", fontsize=8, color="firebrick")
        if not delta:
            continue
        mean = sum(delta) / len(delta)
        shown = max(-edge, min(edge, mean))
        ax.barh(y, shown, color="#4c72b0", alpha=0.55, height=0.6)
        ax.plot([max(-edge, min(edge, d)) for d in delta], [y] * len(delta), "o", color="black", markersize=3)
        if shown != mean:
            ax.text(shown, y, f" {mean:+.2f} ", va="center", ha="right" if mean > 0 else "left", fontsize=8)
    ax.set_xlim(-1.08 * edge, 1.08 * edge)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{label}: difference from the base's mean (bar: mean over seeds; dots: each seed)")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------
# python -m course_utils.experiments FOLDER


def report(folder: str | os.PathLike) -> str:
    """The Markdown table of the runs saved in ``folder``, with the machine and the training time."""
    runs = load_runs(folder)
    if not runs:
        return f"No saved runs in {folder}."
    table = summarize(runs).drop(columns=["group"])
    where = runs[0].get("machine", {})
    seconds = sum(r.get("seconds", 0.0) for r in runs)
    head = (f"{len(runs)} runs of {len(_rows(runs))} variants; {seconds / 60:.1f} minutes of training and evaluation "
            f"on {where.get('cpu', '?')} ({where.get('cores', '?')} cores, {where.get('threads', '?')} torch threads"
            + (f", {where['gpu']}" if where.get("gpu") else "") + f"), torch {where.get('torch', '?')}.")
    return head + "\n\n" + markdown_table(table) + f"\n\nThe paper's numbers: {PAPER_CITATION} (newstest2013)."


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m course_utils.experiments FOLDER\n\nPrints the Markdown table of the ablation runs "
              "saved in FOLDER (lesson 09 saves them in checkpoints/09_ablations/<configuration>).")
        return 0 if args and args[0] in ("-h", "--help") else 2
    print(report(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
