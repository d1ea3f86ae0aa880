"""One row of lesson 08's table of levers: a timed training run of the lesson's own code, scored on every test set.

Lesson 08 (``solutions/08_real_data.ipynb``) improves its laptop-CPU run one lever at a time: shared
embeddings, batches by tokens, checkpoint averaging, bfloat16 products, dropout only where the paper
puts it, a length penalty chosen on the validation set; and it tries lesson 07's fused attention and
``torch.compile``.
Each row of its table is one run of the lesson's ``measure_row``: train the row's configuration for
the budget, translate the four Multi30k test sets (beam 4) with the mean of its last checkpoints
when it averages, and measure its steps, tokens per second and fraction of the machine's
matrix-product peak. This script loads that code from the notebooks (lessons 01 to 08, with
``course_utils.notebook.load_exercises``, as ``bench.py`` does), so it measures exactly what a
learner runs.

    python benchmarks/levers.py --list
    python benchmarks/levers.py --row tied --budget-min 15 --threads 2 --multi30k ../dataset/data/task1/raw
    python benchmarks/levers.py --row paper-dropout --budget-min 15 --set num_layers=3  # a variant of a row
    python benchmarks/levers.py --row paper-dropout --bpe-vocab 2000 ...               # another BPE vocabulary
    python benchmarks/levers.py --row length-penalty --decode-only RUN_FOLDER ...      # a trained run, decoded again
    python benchmarks/levers.py --row gpu --device cuda --length-penalties 0.6,1.0,1.4 ...  # section 8.7's choice too
    python benchmarks/levers.py --table benchmarks/levers-15min.jsonl                 # the rows as Markdown
    python benchmarks/levers.py --quick                                               # a smoke run, seconds

Progress goes to stderr; stdout carries one JSON object for the row (append it to a ``.jsonl`` file).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
MEASURED = ROOT / "benchmarks" / "levers-15min.jsonl"

# What lesson 08 loads from the earlier lessons, then what the script needs from lesson 08 itself.
EARLIER = [
    ("01_attention.ipynb", ["scaled_dot_product_attention"]),
    ("02_masks.ipynb", ["make_padding_mask", "make_causal_mask", "make_target_mask"]),
    ("03_positional_encoding.ipynb", ["sinusoidal_positional_encoding", "PositionalEncoding"]),
    ("04_multi_head_attention.ipynb", ["MultiHeadAttention"]),
    ("05_transformer.ipynb", ["FeedForward", "EncoderLayer", "DecoderLayer", "Transformer"]),
    ("06_training.ipynb", ["noam_lr", "make_noam_scheduler", "label_smoothing_loss", "greedy_decode"]),
    ("07_inference.ipynb", ["gnmt_length_penalty", "beam_search", "FusedAttention", "with_fused_attention"]),
]
# Loading a name runs the assignments of its cell too: TEST_SETS loads the data (from MULTI30K_DIR, or the
# fast slices of the bundled corpus with COURSE_FAST=1), bpe trains the BPE vocabulary, train_src encodes.
LESSON08 = ["TEST_SETS", "load_splits", "bpe", "train_src", "RunConfig", "LAPTOP_CPU", "GPU",
            "attention_survives_float16", "autocast_dtype", "build_model",
            "new_optimizer", "batches_forever", "loss_on", "train_step", "validation_loss", "checkpoint_paths",
            "checkpoint_path", "train", "translate", "averaged", "bleu_scores", "step_flops", "run_work",
            "with_levers", "LEVER_ROWS", "measure_row"]

#: What each row of the table adds to the row above it (the README's wording).
ADDS = {
    "base": "none: batches of 128 sentence pairs, separate embeddings, the last checkpoint, float32",
    "tied": "shared embeddings (section 3.4)",
    "tokens": "batches of 2,500 tokens (section 5.1)",
    "averaged": "the mean of the last 5 checkpoints (section 6.1)",
    "bfloat16": "mixed precision: bfloat16 products, on a CPU that has them",
    "paper-dropout": "dropout only where section 5.4 puts it",
    "no-dropout": "`bfloat16` without any dropout (not kept)",
    "wider": "`bfloat16` with d_model 256, d_ff 1024 (not kept)",
    "deeper": "`paper-dropout` with 3 + 3 layers (not kept)",
    "paper-dropout (seed 1)": "`paper-dropout` again, with `--set seed=1`",
    "smaller-batches": "`paper-dropout` with batches of 2,000 tokens, `--set batch_tokens=2000` (not kept)",
    "more-dropout": "`paper-dropout` with dropout 0.2 in its two places, `--set dropout=0.2` (not kept)",
    "length-penalty (trained again)": "`LAPTOP_CPU` trained afresh, end to end, on a slower day",
    "smaller-vocabulary": "`paper-dropout` with 2,000 BPE pieces, `--bpe-vocab 2000` (not kept)",
    "length-penalty": "length penalty 1.4, chosen on the validation set (section 6.1): `LAPTOP_CPU`, "
                      "`paper-dropout`'s run translated again (`--decode-only`)",
    "fused": "`paper-dropout` + lesson 07's fused attention",
    "compiled": "`paper-dropout` + `torch.compile`",
}
TABLE_COLUMNS = ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr", "steps",
                 "tokens_per_second", "fraction_of_peak"]

# --quick: every stage of a row in seconds, on slices of the bundled corpus; it learns nothing.
QUICK = dict(d_model=32, num_heads=2, num_layers=1, d_ff=64, batch_size=16, num_steps=6, train_minutes=None,
             warmup_steps=2, eval_every=2, beam_size=2, extra_len=5, test_sentences=8)


def log(message: str) -> None:
    print(f"[levers] {message}", file=sys.stderr, flush=True)


def load_lesson(multi30k: str | None, quick: bool, folder: Path = SOLUTIONS) -> dict[str, Any]:
    """Lessons 01 to 07's code and lesson 08's data, configurations and functions, in one namespace."""
    from course_utils.notebook import load_exercises

    if quick:
        os.environ["COURSE_FAST"] = "1"  # the lesson's fast data: slices of the bundled corpus, in Multi30k's files
    else:
        os.environ.pop("COURSE_FAST", None)
        if not multi30k:
            raise SystemExit("give the folder of the Multi30k files: --multi30k path/to/dataset/data/task1/raw "
                             "(or set MULTI30K_DIR)")
        os.environ["MULTI30K_DIR"] = str(multi30k)
    module = types.ModuleType("lesson08_code")  # a real module: the lesson's dataclasses look it up
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for notebook, names in EARLIER:
            load_exercises(Path(folder) / notebook, names, namespace=namespace)
        load_exercises(Path(folder) / "08_real_data.ipynb", LESSON08, namespace=namespace)
    return namespace


def use_vocabulary(ns: dict[str, Any], vocab_size: int) -> None:
    """Retrain the lesson's shared BPE with vocab_size pieces and re-encode its training and validation pairs.

    The lesson's functions read ``bpe``, ``train_src``... from the namespace when they run, so they use the new ones.
    """
    ns["bpe"] = ns["train_bpe"](ns["train_split"], vocab_size=vocab_size)
    ns["train_src"], ns["train_tgt"] = ns["prepare_subwords"](ns["train_split"], ns["bpe"])
    ns["valid_src"], ns["valid_tgt"] = ns["prepare_subwords"](ns["valid_split"], ns["bpe"])


#: fields that change only how a trained model translates: a run trained with other values can be decoded again
DECODING = {"name", "beam_size", "length_penalty", "extra_len", "test_sentences"}


def decode_only(ns: dict[str, Any], config, folder: Path) -> Path:
    """Make the lesson's ``train`` return the run saved in folder (no training): a row that differs from that run
    in DECODING fields only is then measured on the run's own checkpoints. Returns the newest checkpoint."""
    import torch

    paths = sorted(Path(folder).glob("*-step*.pt"))
    if not paths:
        raise SystemExit(f"--decode-only: no checkpoints (*-step*.pt) in {folder}")
    saved = torch.load(paths[-1], map_location="cpu", weights_only=False)
    wanted = dataclasses.asdict(config)
    differ = sorted(k for k in set(saved["config"]) | set(wanted) - DECODING
                    if k not in DECODING and saved["config"].get(k) != wanted.get(k))
    if differ:
        raise SystemExit(f"--decode-only: the run in {folder} was trained with other {', '.join(differ)}")
    if saved["vocab"] != ns["bpe"].tokenizer.to_str():
        raise SystemExit(f"--decode-only: the run in {folder} has another BPE vocabulary (--bpe-vocab?)")
    linked = Path(tempfile.mkdtemp(prefix="levers-decode-"))  # the run's checkpoints under this row's name
    for path in paths:
        (linked / f"08_real_data-{config.name}-step{path.stem.rsplit('step', 1)[1]}.pt").symlink_to(path.resolve())
    ns["CHECKPOINTS"] = linked

    def train(row, resume=True):
        model = ns["build_model"](row, ns["bpe"].vocab_size).to(ns["device"])
        model.load_state_dict(saved["model"])
        return model, saved["state"]["history"]

    ns["train"] = train
    return paths[-1]


def choose_length_penalty(ns: dict[str, Any], config, alphas: Sequence[float]) -> dict:
    """Section 8.7 on a trained row: validation BLEU with each alpha, then the test sets with the best of them.

    The run's checkpoints are in place (``measure`` trained it, or ``decode_only`` links them): ``train`` only loads.
    """
    with contextlib.redirect_stdout(sys.stderr):
        model, _ = ns["train"](config)
        final = ns["averaged"](model, config)
        validation = {"validation": ns["valid_split"]}
        sweep = {str(alpha): ns["bleu_scores"](final, dataclasses.replace(config, length_penalty=alpha),
                                               validation)["validation"] for alpha in alphas}
        best = max(alphas, key=lambda alpha: sweep[str(alpha)])  # the first of equals
        log(f"validation BLEU by length penalty: {sweep}; the test sets with {best}")
        tests = ns["bleu_scores"](final, dataclasses.replace(config, length_penalty=best))
    return {"valid_bleu_by_length_penalty": sweep, "chosen_length_penalty": best,
            "test_at_chosen_length_penalty": tests}


def parse_value(text: str) -> Any:
    """A --set value: None, a bool, an int, a float, else the text."""
    lowered = text.strip().lower()
    if lowered == "none":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def row_config(ns: dict[str, Any], name: str, budget_min: float | None, overrides: Sequence[str], quick: bool):
    """The configuration of a row (or of LAPTOP_CPU / GPU), with the budget and the --set overrides applied."""
    rows = dict(ns["LEVER_ROWS"], **{"laptop-cpu": ns["LAPTOP_CPU"], "gpu": ns["GPU"]})
    if name not in rows:
        raise SystemExit(f"unknown row {name!r}: choose one of {', '.join(rows)}")
    config = rows[name]
    if budget_min is not None:
        config = dataclasses.replace(config, train_minutes=budget_min)
    if quick:
        config = dataclasses.replace(config, **QUICK, batch_tokens=300 if config.batch_tokens else None)
    fields = {f.name for f in dataclasses.fields(config)}
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in fields or not _:
            raise SystemExit(f"--set {item!r}: expected field=value, field one of {', '.join(sorted(fields))}")
        config = dataclasses.replace(config, **{key: parse_value(value)})
    return config


def measure(ns: dict[str, Any], config, device: torch.device, checkpoints: Path, peak_seconds: float,
            peak_gflops: float | None = None) -> dict:
    """The lesson's measure_row for config, on device; the lesson's own prints go to stderr.

    ``peak_gflops``: the machine's peak as measured when the run trained (for --decode-only), instead of now."""
    from course_utils.training import matmul_peak_flops

    ns["device"] = device
    ns["CHECKPOINTS"] = checkpoints
    with contextlib.redirect_stdout(sys.stderr):
        ns["amp_dtype"] = None  # the lesson's choice: the 16-bit type that pays on this device, if the row asks
        if config.mixed_precision:
            ns["amp_dtype"] = ns["autocast_dtype"](device, ns["attention_survives_float16"]())
        peak = peak_gflops * 1e9 if peak_gflops else matmul_peak_flops(seconds=peak_seconds, device=device)
        log(f"peak {peak / 1e9:.0f} GFLOP/s with {torch.get_num_threads()} threads; training {config}")
        started = time.perf_counter()
        result = ns["measure_row"](config, peak)
    result.update(budget_min=config.train_minutes, device=str(device), torch=torch.__version__,
                  wall_seconds=round(time.perf_counter() - started, 1), config=dataclasses.asdict(config))
    return result


def markdown_table(rows: Sequence[dict]) -> str:
    """The rows as the README's Markdown table, in the order given (the last measurement of a row wins)."""
    latest = {row["row"]: row for row in rows}
    head = ["row", "adds", *TABLE_COLUMNS]
    lines = ["| " + " | ".join(h.replace("_", " ") for h in head) + " |", "|" + "---|" * len(head)]
    for name, row in latest.items():
        cells = [f"`{name}`", ADDS.get(name, "")]
        for column in TABLE_COLUMNS:
            value = row.get(column)
            if value is None:
                cells.append("")
            elif column == "fraction_of_peak":
                cells.append(f"{value:.0%}")
            elif column in ("steps", "tokens_per_second"):
                cells.append(f"{value:,}")
            else:
                cells.append(f"{value:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", default="paper-dropout", help="a row of the lesson's LEVER_ROWS, or laptop-cpu, or gpu")
    parser.add_argument("--budget-min", type=float, default=None, help="minutes of training (default: the row's, 15)")
    parser.add_argument("--multi30k", default=os.environ.get("MULTI30K_DIR"),
                        help="the folder of the Multi30k files (data/task1/raw of multi30k/dataset); default MULTI30K_DIR")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change one field of the row's RunConfig (repeatable), e.g. --set average_last=3")
    parser.add_argument("--bpe-vocab", type=int, default=None,
                        help="pieces in the shared BPE vocabulary (default: the lesson's, 4,000 on Multi30k)")
    parser.add_argument("--decode-only", type=Path, default=None, metavar="RUN_FOLDER",
                        help="no training: translate with the checkpoints of a run in RUN_FOLDER that differs from "
                             "the row in decoding fields only (beam_size, length_penalty, ...)")
    parser.add_argument("--peak-gflops", type=float, default=None,
                        help="with --decode-only: the peak measured when the run trained (its row's peak_gflops)")
    parser.add_argument("--length-penalties", type=lambda text: [float(a) for a in text.split(",")], default=None,
                        metavar="A,B,...", help="after the row, translate the validation set with each length "
                        "penalty, and the test sets again with the best (section 8.7)")
    parser.add_argument("--checkpoints", type=Path, default=None,
                        help="where the run keeps its checkpoints (default: a fresh temporary folder)")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="folder of the notebooks to load")
    parser.add_argument("--list", action="store_true", help="list the rows and their configurations")
    parser.add_argument("--table", nargs="+", type=Path, metavar="JSONL", help="print measured rows as Markdown")
    parser.add_argument("--quick", action="store_true", help="a smoke run on the bundled corpus (learns nothing)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> dict | None:
    """Run one row and emit its JSON line (or list the rows, or print a table); returns the row."""
    args = parse_args(argv)
    if args.table:
        rows = [json.loads(line) for path in args.table for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
        emit(markdown_table(rows))
        return None
    if args.threads:
        torch.set_num_threads(args.threads)
    ns = load_lesson(args.multi30k, args.quick or args.list, args.solutions)
    if args.list:
        for name, config in dict(ns["LEVER_ROWS"], **{"laptop-cpu": ns["LAPTOP_CPU"], "gpu": ns["GPU"]}).items():
            emit(f"{name}: {config}")
        return None
    config = row_config(ns, args.row, args.budget_min, args.set, args.quick)
    if args.bpe_vocab:
        use_vocabulary(ns, args.bpe_vocab)
    checkpoints = args.checkpoints or Path(tempfile.mkdtemp(prefix="levers-"))
    if args.decode_only:
        ns["device"] = torch.device(args.device)
        newest = decode_only(ns, config, args.decode_only)
        checkpoints = ns["CHECKPOINTS"]
        log(f"decoding the run saved in {args.decode_only} (newest checkpoint {newest.name}), no training")
    result = measure(ns, config, torch.device(args.device), checkpoints, 0.3 if args.quick else 3.0,
                     args.peak_gflops if args.decode_only else None)
    if args.decode_only:
        result["decoded_from"] = str(args.decode_only)
    if args.length_penalties:
        result.update(choose_length_penalty(ns, config, args.length_penalties))
    result["bpe_vocab"] = ns["bpe"].vocab_size
    emit(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
