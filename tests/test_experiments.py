"""course_utils.experiments: the ablation runner of lesson 09, its table and figures, on a fake training function.

No model is trained here: ``train`` is a function of the variant and the seed,
so that what the runner decides (which runs it trains, which it finds saved,
which rows get more seeds, when the budget stops it) can be checked exactly.
"""

from __future__ import annotations

import json
import math

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course_utils import experiments  # noqa: E402
from course_utils.experiments import PAPER_TABLE3, Runner, Variant, markdown_table, summarize  # noqa: E402

PLAN = [
    Variant("base", "base", paper="base"),
    Variant("h = 1, d_k = 64", "A", {"num_heads": 1}, paper="A h=1"),
    Variant("h = 8, d_k = 8", "A", {"num_heads": 8}, paper="A h=16"),
    Variant("learned positions", "E", model="learned positions", paper="E learned"),
    Variant("pre-LN, no warm-up", "norm", model="pre-LN", warmup=False),
]
#: The perplexity each row would reach, before the seed's noise: h = 1 is far off, the others are close to the base.
TRUE_PPL = {"base": 2.0, "h = 1, d_k = 64": 3.0, "h = 8, d_k = 8": 2.01, "learned positions": 2.05,
            "pre-LN, no warm-up": 1.5}


class FakeTraining:
    """Counts its calls; perplexity = the row's true value + 0.02 per seed; one second per run."""

    def __init__(self, diverge: str = ""):
        self.calls: list[tuple[str, int]] = []
        self.diverge = diverge

    def __call__(self, variant: Variant, seed: int) -> dict:
        self.calls.append((variant.name, seed))
        ppl = None if variant.name == self.diverge else TRUE_PPL[variant.name] + 0.02 * seed
        return {"ppl": ppl, "bleu": 50.0 - 10 * (ppl or 5.0) + seed, "params": 1000 + len(variant.name),
                "ms_per_step": 10.0, "steps": [10, 20, 30], "losses": [3.0, 2.0, float("nan") if ppl is None else 1.0]}


def describe(variant: Variant, seed: int) -> dict:
    return {"d_model": 64, "steps": 500, "changes": dict(variant.changes), "model": variant.model, "seed": seed}


def runner(folder, train, budget_s=None, describe=describe) -> Runner:
    return Runner(folder, train, describe, budget_s=budget_s, report=None)


def test_each_run_is_trained_once_and_saved(tmp_path):
    train = FakeTraining()
    records = runner(tmp_path, train).run(PLAN, base_seeds=3, row_seeds=1)
    assert train.calls == [("base", 0), ("base", 1), ("base", 2), ("h = 1, d_k = 64", 0), ("h = 8, d_k = 8", 0),
                           ("learned positions", 0), ("pre-LN, no warm-up", 0)]
    assert len(list(tmp_path.glob("*.json"))) == 7 and not list(tmp_path.glob("*.tmp"))
    assert [r["variant"]["name"] for r in records] == [name for name, _ in train.calls]
    again = FakeTraining()
    found = runner(tmp_path, again).run(PLAN, base_seeds=3, row_seeds=1)
    assert again.calls == [], "a second run finds every run saved"
    assert [(r["variant"], r["seed"], r["ppl"]) for r in found] == [(r["variant"], r["seed"], r["ppl"]) for r in records]


def test_a_run_saved_with_another_configuration_is_trained_again(tmp_path):
    runner(tmp_path, FakeTraining()).run(PLAN[:2], base_seeds=1, row_seeds=1)
    train = FakeTraining()
    longer = lambda variant, seed: {**describe(variant, seed), "steps": 1000}  # noqa: E731
    runner(tmp_path, train, describe=longer).run(PLAN[:2], base_seeds=1, row_seeds=1)
    assert train.calls == [("base", 0), ("h = 1, d_k = 64", 0)]


def test_an_interrupted_plan_resumes_where_it_stopped(tmp_path):
    class Interrupted(FakeTraining):
        def __call__(self, variant, seed):
            if variant.name == "learned positions":
                raise KeyboardInterrupt
            return super().__call__(variant, seed)

    with pytest.raises(KeyboardInterrupt):
        runner(tmp_path, Interrupted()).run(PLAN, base_seeds=1, row_seeds=1)
    train = FakeTraining()
    runner(tmp_path, train).run(PLAN, base_seeds=1, row_seeds=1)
    assert train.calls == [("learned positions", 0), ("pre-LN, no warm-up", 0)]


def test_rows_within_the_seed_spread_get_more_seeds_closest_first(tmp_path):
    train = FakeTraining()
    records = runner(tmp_path, train).run(PLAN, base_seeds=3, row_seeds=3, within=2.0)
    extra = train.calls[7:]
    # the base's seeds span 0.04 around 2.02: h = 8 (0.01 away) and learned positions (0.03 away) are small effects
    assert extra == [("h = 8, d_k = 8", 1), ("h = 8, d_k = 8", 2), ("learned positions", 1), ("learned positions", 2)]
    seeds = {}
    for r in records:
        seeds.setdefault(r["variant"]["name"], []).append(r["seed"])
    assert seeds == {"base": [0, 1, 2], "h = 1, d_k = 64": [0], "h = 8, d_k = 8": [0, 1, 2],
                     "learned positions": [0, 1, 2], "pre-LN, no warm-up": [0]}


def test_extra_seeds_stop_when_the_budget_is_spent(tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 5))  # the runner reads the clock before and after each run: 5 s a run
    monkeypatch.setattr(experiments.time, "perf_counter", lambda: next(clock))
    train = FakeTraining()
    records = runner(tmp_path, train, budget_s=90.0).run(PLAN, base_seeds=3, row_seeds=3, within=2.0)
    # 7 first runs cost 35 s; each extra seed 5 s more: the budget of 90 s allows all four
    assert len(records) == 11
    train = FakeTraining()
    records = runner(tmp_path / "tight", train, budget_s=45.0).run(PLAN, base_seeds=3, row_seeds=3, within=2.0)
    assert len(records) == 9, "35 s of first runs, then two extra seeds of 5 s fit in 45 s"
    assert [c for c in train.calls[7:]] == [("h = 8, d_k = 8", 1), ("h = 8, d_k = 8", 2)]


def test_a_diverged_run_is_saved_and_shown_as_diverged(tmp_path):
    records = runner(tmp_path, FakeTraining(diverge="pre-LN, no warm-up")).run(PLAN, base_seeds=3, row_seeds=1)
    saved = json.loads(runner(tmp_path, FakeTraining()).path(PLAN[4], 0).read_text())
    assert saved["ppl"] is None and saved["losses"][-1] is None, "non-finite numbers are saved as null"
    table = summarize(records)
    row = table[table.variant == "pre-LN, no warm-up"].iloc[0]
    assert row["vs base"] == "diverged"
    assert row["PPL"] is None or math.isnan(row["PPL"])
    assert "| diverged |" in markdown_table(table)


def test_the_table_compares_with_the_base_and_the_paper(tmp_path):
    records = runner(tmp_path, FakeTraining()).run(PLAN, base_seeds=3, row_seeds=3)
    table = summarize(records).set_index("variant")
    assert list(table.index) == [v.name for v in PLAN], "the base first, then the plan's order"
    assert table.loc["base", "seeds"] == 3 and table.loc["base", "PPL"] == pytest.approx(2.02)
    assert table.loc["base", "± PPL"] == pytest.approx(0.02)
    assert table.loc["h = 1, d_k = 64", "vs base"] == "worse"
    assert table.loc["h = 8, d_k = 8", "vs base"] == "within the seed spread"
    assert table.loc["pre-LN, no warm-up", "vs base"] == "better"
    assert table.loc["h = 1, d_k = 64", "paper PPL"] == PAPER_TABLE3["A h=1"]["ppl"] == 5.29
    assert table.loc["pre-LN, no warm-up", "paper row"] == "(not in the paper)"
    one_seed = summarize([r for r in records if r["seed"] == 0]).set_index("variant")
    assert one_seed.loc["h = 1, d_k = 64", "vs base"] == "one seed: no spread"


def test_markdown_table():
    records = [{"variant": PLAN[0].as_dict(), "seed": 0, "ppl": 2.0, "bleu": 55.55, "params": 336885,
                "ms_per_step": 49.6, "steps": [1], "losses": [1.0], "order": 0}]
    text = markdown_table(summarize(records))
    lines = text.splitlines()
    assert lines[0].startswith("| group | variant | seeds | PPL |") and lines[1].startswith("|---|")
    assert "| 2.000 |" in lines[2] and "| 55.5 |" in lines[2] and "| 336,885 |" in lines[2] and "| 50 |" in lines[2]
    assert "| 4.92 |" in lines[2], "the paper's base perplexity"


def test_the_paper_numbers_are_the_published_ones():
    assert PAPER_TABLE3["base"]["ppl"] == 4.92 and PAPER_TABLE3["base"]["bleu"] == 25.8
    assert PAPER_TABLE3["C N=2"] == {"row": "(C) N=2", "ppl": 6.11, "bleu": 23.7, "params_m": 36}
    assert PAPER_TABLE3["E learned"]["ppl"] == 4.92 and PAPER_TABLE3["E learned"]["bleu"] == 25.7
    assert experiments.PAPER_CITATION == "Vaswani et al. 2017, Table 3"


def test_the_figures_have_fixed_sizes(tmp_path):
    records = runner(tmp_path, FakeTraining()).run(PLAN, base_seeds=3, row_seeds=1)
    groups = ["A", "E", "norm"]
    fig = experiments.plot_loss_curves(records, groups, {"A": "(A) heads"}, ncols=2, figsize=(8.0, 6.0))
    assert len(fig.axes) == 4 and tuple(fig.get_size_inches()) == (8.0, 6.0)
    assert not fig.axes[3].axison, "the panel left over is blank"
    plt.close(fig)
    fig = experiments.plot_spread(records, figsize=(9.0, 7.0))
    assert len(fig.axes) == 1 and tuple(fig.get_size_inches()) == (9.0, 7.0)
    plt.close(fig)


def test_variant_keys_are_file_names():
    assert PLAN[1].key == "a-h-1-d-k-64"
    assert len({v.key for v in PLAN}) == len(PLAN)


def test_the_command_line_prints_the_saved_table(tmp_path, capsys):
    runner(tmp_path, FakeTraining()).run(PLAN, base_seeds=3, row_seeds=1)
    assert experiments.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "7 runs of 5 variants" in out and "| variant | seeds | PPL |" in out and "Vaswani et al. 2017" in out
    assert experiments.main([]) == 2
    assert "No saved runs" in experiments.report(tmp_path / "empty")


def test_the_comparison_with_the_paper_says_where_we_agree(tmp_path):
    records = runner(tmp_path, FakeTraining()).run(PLAN, base_seeds=3, row_seeds=3)
    compared = experiments.compare_with_paper(summarize(records)).set_index("row")
    assert list(compared.index) == ["h = 1, d_k = 64", "h = 8, d_k = 8", "learned positions"], "rows the paper has"
    assert compared.loc["h = 1, d_k = 64", "paper"] == "worse" and compared.loc["h = 1, d_k = 64", "verdict"] == "agrees"
    assert compared.loc["h = 1, d_k = 64", "paper: PPL change"] == pytest.approx(0.37)
    assert compared.loc["h = 8, d_k = 8", "paper"] == "about the same"  # 4.91 against 4.92
    assert compared.loc["h = 8, d_k = 8", "verdict"] == "agrees"
    # 2.07 against the base's 2.02, beyond its spread of 0.04, where the paper's perplexity did not move
    assert compared.loc["learned positions", "ours"] == "worse"
    assert compared.loc["learned positions", "verdict"] == "disagrees"


def test_a_row_of_one_seed_counts_only_beyond_twice_the_base_spread():
    def record(name, group, seed, ppl):
        return {"variant": Variant(name, group).as_dict(), "seed": seed, "order": 0 if group == "base" else 1,
                "ppl": ppl, "bleu": 50.0, "params": 1, "ms_per_step": 1.0, "steps": [], "losses": []}

    base = [record("base", "base", s, p) for s, p in enumerate((2.00, 2.04, 2.02))]  # spread 0.04 around 2.02
    verdicts = summarize(base + [record("near", "A", 0, 2.09), record("far", "A", 0, 2.11)]).set_index("variant")
    assert verdicts.loc["near", "vs base"] == "within the seed spread", "0.07 away: within twice the base's 0.04"
    assert verdicts.loc["far", "vs base"] == "worse", "0.09 away: beyond twice the base's spread"


def test_the_code_fingerprint_follows_the_code_and_nothing_else():
    import subprocess
    import sys

    class Layer:
        def forward(self, x):
            return x + 1 if x in {"a", "b", "c"} else [y for y in x]

    class Fixed(Layer):
        def forward(self, x):
            return x + 2

    class Child(Layer):
        pass

    first = experiments.code_fingerprint(Layer, summarize)
    assert first == experiments.code_fingerprint(Layer, summarize), "the same code, the same hash"
    assert experiments.code_fingerprint(Fixed) != experiments.code_fingerprint(Layer), "a fix changes it"
    assert experiments.code_fingerprint(Child) != experiments.code_fingerprint(Layer.forward)
    assert experiments.code_fingerprint(Child) != experiments.code_fingerprint(Fixed), "inherited methods count"
    program = ("from course_utils import experiments; print(experiments.code_fingerprint("
               "experiments.summarize, experiments.Runner, experiments._verdict))")
    seeds = {subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                            env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")}
    assert len(seeds) == 1, "no memory address nor hash-seed order in the hash"
