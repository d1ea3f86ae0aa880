"""benchmarks/levers.py, lesson 08's table of levers: its plumbing in seconds, its table, and the FLOP formula it uses."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def levers():
    spec = importlib.util.spec_from_file_location("course_levers", ROOT / "benchmarks" / "levers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lesson(levers) -> dict:
    """Lesson 08's namespace as levers.py loads it, on the fast data (slices of the bundled corpus)."""
    return levers.load_lesson(None, quick=True)


def test_a_quick_row_prints_one_json_line_with_every_figure(levers, tmp_path):
    lines = []
    row = levers.main(["--quick", "--threads", "1", "--row", "averaged", "--checkpoints", str(tmp_path),
                       "--bpe-vocab", "500"], emit=lines.append)
    assert len(lines) == 1 and json.loads(lines[0]) == row
    for name in levers.TABLE_COLUMNS + ["valid_bleu", "valid_bleu_last", "peak_gflops", "train_seconds"]:
        assert isinstance(row[name], (int, float)) and math.isfinite(row[name]), name
    assert row["row"] == "averaged" and row["steps"] == levers.QUICK["num_steps"]
    assert row["bpe_vocab"] == 500, "--bpe-vocab retrains the shared vocabulary (the lesson's fast one has 1,000)"
    assert 0 < row["fraction_of_peak"] < 1 and row["tokens_per_second"] > 0
    assert row["config"]["tie_embeddings"] and row["config"]["average_last"] == 5 and not row["config"]["compile"]
    kept = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert kept == [f"08_real_data-averaged-step{s:06d}.pt" for s in (2, 4, 6)], "every checkpoint, as it averages 5"

    # the same run decoded again with another length penalty: no training, the run's own figures
    again = levers.main(["--quick", "--threads", "1", "--row", "averaged", "--set", "length_penalty=1.4",
                         "--bpe-vocab", "500", "--decode-only", str(tmp_path)], emit=lines.append)
    assert again["decoded_from"] == str(tmp_path) and again["config"]["length_penalty"] == 1.4
    assert (again["steps"], again["train_seconds"], again["valid_loss"]) == (row["steps"], row["train_seconds"],
                                                                             row["valid_loss"])
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == kept, "the run's files are left as they were"
    assert "chosen_length_penalty" not in again

    # section 8.7's choice on the same run: one validation score per alpha, the test sets with the best
    chosen = levers.main(["--quick", "--threads", "1", "--row", "averaged", "--bpe-vocab", "500",
                          "--decode-only", str(tmp_path), "--length-penalties", "0.6,1.4"], emit=lines.append)
    sweep = chosen["valid_bleu_by_length_penalty"]
    assert list(sweep) == ["0.6", "1.4"] and sweep["0.6"] == row["valid_bleu"], "alpha 0.6 is the row's own"
    assert chosen["chosen_length_penalty"] == max((0.6, 1.4), key=lambda alpha: sweep[str(alpha)])
    at_chosen = chosen["test_at_chosen_length_penalty"]
    assert set(at_chosen) == {c for c in levers.TABLE_COLUMNS if c.startswith("test_")}
    if chosen["chosen_length_penalty"] == 1.4:
        assert all(at_chosen[name] == again[name] for name in at_chosen), "the same translations as --set"
    with pytest.raises(SystemExit, match="trained with other batch_tokens"):
        levers.main(["--quick", "--row", "averaged", "--set", "batch_tokens=123", "--bpe-vocab", "500",
                     "--decode-only", str(tmp_path)], emit=lines.append)


def test_the_rows_add_one_lever_each_up_to_the_laptop_configuration(lesson):
    ns = lesson
    rows, laptop = ns["LEVER_ROWS"], ns["LAPTOP_CPU"]
    assert list(rows) == ["base", "tied", "tokens", "averaged", "bfloat16", "paper-dropout", "length-penalty",
                          "no-dropout", "wider", "deeper", "fused", "compiled"]
    assert all(name == config.name for name, config in rows.items()), "a row's JSON line carries its name"
    differ = lambda a, b: {k for k in vars(a) if k != "name" and getattr(a, k) != getattr(b, k)}  # noqa: E731
    chain = [rows[name] for name in ("base", "tied", "tokens", "averaged", "bfloat16", "paper-dropout",
                                     "length-penalty")]
    assert [differ(a, b) for a, b in zip(chain, chain[1:])] == [
        {"tie_embeddings"}, {"batch_tokens"}, {"average_last"}, {"mixed_precision"}, {"inner_dropout"},
        {"length_penalty"}]
    assert differ(rows["length-penalty"], laptop) == set() and differ(rows["base"], ns["BASE_CPU"]) == set()
    assert laptop.length_penalty != rows["paper-dropout"].length_penalty == 0.6, "the paper's alpha until 8.7"
    paper = rows["paper-dropout"]  # the rows tried on top of it were measured with the paper's alpha
    assert differ(rows["no-dropout"], rows["bfloat16"]) == {"dropout"}
    assert differ(rows["wider"], rows["bfloat16"]) == {"d_model", "d_ff"}
    assert differ(rows["deeper"], paper) == {"num_layers"}
    assert differ(rows["fused"], paper) == {"fused_attention"} and differ(rows["compiled"], paper) == {"compile"}
    assert ns["GPU"].fused_attention and ns["GPU"].tie_embeddings and ns["GPU"].average_last > 1


def test_set_changes_a_field_and_refuses_unknown_ones(levers, lesson):
    ns = lesson
    config = levers.row_config(ns, "tokens", 2.0, ["batch_tokens=3000", "average_last=3"], quick=False)
    assert (config.batch_tokens, config.average_last, config.train_minutes) == (3000, 3, 2.0)
    with pytest.raises(SystemExit, match="batch_token"):
        levers.row_config(ns, "tokens", None, ["batch_token=3000"], quick=False)
    with pytest.raises(SystemExit, match="unknown row"):
        levers.row_config(ns, "faster", None, [], quick=False)
    assert levers.parse_value("none") is None and levers.parse_value("true") is True
    assert levers.parse_value("2500") == 2500 and levers.parse_value("0.5") == 0.5


def test_the_table_is_the_readmes_markdown(levers, tmp_path):
    measured = tmp_path / "rows.jsonl"
    rows = [{"row": "base", "test_2016_flickr": 33.51, "test_2017_flickr": 24.1, "test_2017_mscoco": 21.2,
             "test_2018_flickr": 21.5, "steps": 2667, "tokens_per_second": 6480, "fraction_of_peak": 0.312},
            {"row": "tied", "test_2016_flickr": 35.0, "steps": 2700}]
    measured.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    lines = []
    levers.main(["--table", str(measured)], emit=lines.append)
    table = lines[0].splitlines()
    assert table[0].startswith("| row | adds | test 2016 flickr |") and len(table) == 4
    assert table[2] == ("| `base` | " + levers.ADDS["base"] + " | 33.5 | 24.1 | 21.2 | 21.5 | 2,667 | 6,480 | 31% |")
    assert table[3].startswith("| `tied` | shared embeddings") and table[3].endswith("| 35.0 |  |  |  | 2,700 |  |  |")


def test_the_lessons_flop_formula_is_what_pytorch_counts(lesson):
    """step_flops (lesson 08) against torch.utils.flop_counter, padding included; real tokens need fewer."""
    from torch.utils.flop_counter import FlopCounterMode

    ns = lesson
    for d_model, num_layers, vocab in [(32, 1, 50), (48, 2, 97)]:
        config = ns["RunConfig"]("count", d_model=d_model, num_heads=4, num_layers=num_layers, d_ff=3 * d_model,
                                 dropout=0.0, tie_embeddings=True)  # fused_attention off: the model as you wrote it
        model = ns["build_model"](config, vocab)
        generator = torch.Generator().manual_seed(d_model)
        src = torch.randint(4, vocab, (5, 9), generator=generator)
        tgt = torch.randint(4, vocab, (5, 13), generator=generator)
        src[1, 6:], tgt[2, 4:] = 0, 0  # padding
        with FlopCounterMode(display=False) as counter:
            model(src, tgt[:, :-1]).sum().backward()
        assert ns["step_flops"](src, tgt, config, vocab, padded=True) == counter.get_total_flops()
        assert ns["step_flops"](src, tgt, config, vocab) < counter.get_total_flops()
        unpadded = (src[:1], tgt[:1])  # no padding: both counts agree
        assert ns["step_flops"](*unpadded, config, vocab) == ns["step_flops"](*unpadded, config, vocab, padded=True)
