"""What each lesson needs and what it adds to the model: the one table.

``python -m course_utils.generate`` writes each lesson's "What this lesson
needs" box and its map cell from this table, at the top of the solution
notebook and of the exercise notebook, and ``--check`` says when a notebook
is out of step with it. ``course_utils.model_map.lesson_map`` reads the same
table to draw the map: the parts built before the lesson filled in, the
lesson's own parts highlighted, its marks numbered.

Adding a lesson is one ``Lesson(...)`` entry below (its stem is the
notebook's file name without ``.ipynb``); the generator then stamps its
header. ``tests/test_lessons.py`` checks that every solution notebook has an
entry, that the notebooks an entry says it loads are the ones its code
loads, and that every part it names is on the map.

The times for a person are estimates (the words to read at about 200 a
minute, and the exercises), not measurements of learners; the machine's
times are the course's measurements, named where they come from.

Plain data, no torch and no matplotlib: the authoring tools read it too.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One lesson: what it needs (shown at its top) and where it sits on the map."""

    stem: str  # the notebook's name without .ipynb, e.g. "05_transformer"
    title: str  # a few words, for the map's title
    person: str  # about how long it takes a person, reading and exercises
    machine: str = ""  # what the computer spends on top, when it is more than a minute or two
    loads: tuple[str, ...] = ()  # earlier notebooks whose code it runs (they must be in the same folder)
    checkpoint: str = ""  # the trained model it wants, and what happens without it ("" = none)
    data: str = "The bundled corpus, which ships with the course: no network needed."
    builds: tuple[str, ...] = ()  # map parts the lesson adds to the model
    focus: tuple[str, ...] | None = None  # map parts highlighted as the lesson's own (default: builds)
    marks: Mapping[str, str] = dataclasses.field(default_factory=dict)  # map part -> a numbered note on the map
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)  # map part -> its boxes' text, not the paper's

    @property
    def number(self) -> str:
        return self.stem[:2]

    @property
    def highlighted(self) -> tuple[str, ...]:
        return self.builds if self.focus is None else self.focus


_BUNDLED = "The bundled corpus, which ships with the course: no network needed."
_BEFORE_05 = ("01_attention", "02_masks", "03_positional_encoding", "04_multi_head_attention")

LESSONS: tuple[Lesson, ...] = (
    Lesson("00_setup_and_data", "setup and data", person="about 45 minutes",
           data="The bundled corpus, which ships with the course: no network needed. `USE_OPUS100 = True` loads "
                "the real opus100 corpus from the Hugging Face hub instead, which needs a network.",
           builds=("tokens", "start_token")),
    Lesson("01_attention", "attention", person="about 45 minutes", data="Nothing: random tensors and toy sentences.",
           builds=("attention",)),
    Lesson("02_masks", "masks", person="about 45 minutes", loads=("01_attention",),
           data="Nothing: random tensors and toy sentences.", builds=("padding_mask", "target_mask")),
    Lesson("03_positional_encoding", "positional encoding", person="about 45 minutes", loads=("01_attention",),
           data="Nothing: random tensors and toy sentences.", builds=("positional_encoding",)),
    Lesson("04_multi_head_attention", "multi-head attention", person="about an hour", loads=("01_attention",),
           data="Nothing: random tensors and toy sentences.", builds=("multi_head_attention",)),
    Lesson("05_transformer", "the whole model", person="about 1 hour 30 minutes (five exercises, twelve methods to write)", loads=_BEFORE_05,
           data="Nothing: random tensors and toy sentences.",
           builds=("embedding", "encoder_layer", "decoder_layer", "add_norm", "feed_forward", "feed_forward_activation",
                   "output_projection")),
    Lesson("06_training", "training", person="about 1 hour 15 minutes",
           machine="two to three minutes of training on a laptop CPU with the default configuration (148 s "
                   "measured on 2 CPU cores by benchmarks/bench.py); `COURSE_FAST=1` trains a tiny model for about "
                   "half a minute, which translates badly",
           loads=(*_BEFORE_05, "05_transformer"), data=_BUNDLED,
           checkpoint="It writes one: `checkpoints/06_transformer.pt`, which lesson 07 starts from. Run the lesson "
                      "without `COURSE_FAST=1` for a model worth keeping.",
           builds=("loss", "decoding")),
    Lesson("07_inference", "inference", person="about 2 hours 45 minutes (the longest exercise: beam search)",
           loads=(*_BEFORE_05, "05_transformer", "06_training"), data=_BUNDLED,
           checkpoint="Yes: lesson 06's `checkpoints/06_transformer.pt`. Without it, the lesson trains lesson 06's "
                      "configuration again itself (two to three minutes) and says so. A checkpoint from a `COURSE_FAST=1` run "
                      "of lesson 06 is a tiny model that repeats words: run lesson 06 in full first for translations "
                      "worth reading.",
           builds=("kv_cache",), focus=("decoding", "kv_cache"),
           marks={"decoding": "beam search with the GNMT length penalty; sampling with a temperature and top-k",
                  "kv_cache": "one token per step",
                  "multi_head_attention": "your weights in nn.Transformer: the same logits"}),
    Lesson("08_real_data", "real data", person="about 2 hours",
           machine="15 minutes of training on a laptop CPU (about 5 on a GPU); with `COURSE_FAST=1` or without "
                   "Multi30k, a tiny model for a minute or two",
           loads=(*_BEFORE_05, "05_transformer", "06_training", "07_inference"),
           data="Multi30k: from a local clone of the multi30k/dataset repository (set `MULTI30K_DIR`), or from the "
                "Hugging Face hub with a network. Offline and without the files it says so at once and trains a tiny "
                "model on the bundled corpus, so that every cell runs; its numbers are then not about real text.",
           focus=("tokens", "embedding", "output_projection"),
           marks={"tokens": "byte-pair encoding: 4,000 shared subword pieces",
                  "embedding": "one table shared by both sides and the output layer",
                  "output_projection": "shares its weights with the target embedding"}),
    Lesson("09_ablations", "ablations", person="about 1 hour 30 minutes",
           machine="up to 20 minutes of training on a laptop CPU with 2 cores (17.2 minutes measured); "
                   "`COURSE_FAST=1` trains tiny models in under a minute",
           loads=(*_BEFORE_05, "05_transformer", "06_training"), data=_BUNDLED,
           checkpoint="No: every row of the table trains its own model (lesson 06's checkpoint is not used).",
           focus=("multi_head_attention", "attention", "encoder_layer", "decoder_layer", "feed_forward",
                  "positional_encoding", "add_norm", "loss"),
           marks={"multi_head_attention": "(A) the number of heads; (B) d_k",
                  "encoder_layer": "(C) depth N and width d_model",
                  "feed_forward": "(C) d_ff; (D) dropout",
                  "loss": "(D) label smoothing",
                  "positional_encoding": "(E) learned positions; none at all",
                  "attention": "no 1/sqrt(d_k)",
                  "add_norm": "pre-LN against post-LN, with and without warm-up"}),
    Lesson("10_real_translator", "a real translator", person="about 1 hour 30 minutes",
           machine="with the real model on a CPU, mostly the last section's beam search over the test sentences",
           loads=(*_BEFORE_05, "05_transformer", "06_training", "07_inference"),
           data="Helsinki-NLP's opus-mt-en-de weights (about 300 MB) and tokenizer, from the Hugging Face hub the "
                "first time, then from its cache. Without a network (and with `COURSE_FAST=1`) it builds a tiny "
                "random Marian with the same quirks instead and says so: every cell runs and every comparison "
                "still proves the port, but the translations are noise.",
           focus=("feed_forward_activation", "positional_encoding", "output_projection", "start_token",
                  "target_mask"),
           labels={"feed_forward_activation": "Linear · SiLU · Linear", "start_token": "<pad>\nstart"},
           marks={"feed_forward_activation": "SiLU, not ReLU",
                  "positional_encoding": "all the sines first, then all the cosines (not interleaved)",
                  "output_projection": "a bias of its own on the logits (final_logits_bias)",
                  "start_token": "the decoder starts with the pad token, not <bos>",
                  "target_mask": "hides no padding: the first target token is the pad token"}),
)

BY_STEM: dict[str, Lesson] = {lesson.stem: lesson for lesson in LESSONS}


def lesson(stem_or_number: str) -> Lesson:
    """The entry for ``"05_transformer"``, ``"05"`` or ``"05_transformer.ipynb"``; a KeyError that lists them otherwise."""
    key = str(stem_or_number).removesuffix(".ipynb")
    if key in BY_STEM:
        return BY_STEM[key]
    for entry in LESSONS:
        if entry.number == key.zfill(2):
            return entry
    raise KeyError(f"no lesson {stem_or_number!r} in course_utils/lessons.py; the lessons are: "
                   + ", ".join(entry.stem for entry in LESSONS))


def built_before(stem: str) -> tuple[str, ...]:
    """The map parts that the lessons before ``stem`` built, in the order they were built."""
    parts: list[str] = []
    for entry in LESSONS:
        if entry.stem == stem:
            break
        parts.extend(p for p in entry.builds if p not in parts)
    return tuple(parts)


def _listed(stems: tuple[str, ...]) -> str:
    names = [f"`{s}`" for s in stems]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def needs_markdown(stem: str) -> str:
    """The "What this lesson needs" box at the top of lesson ``stem`` (Markdown)."""
    entry = lesson(stem)
    rows = [f"- **Time:** {entry.person}" + (f"; the computer: {entry.machine}." if entry.machine else ".")]
    if entry.loads:
        loads = _listed(entry.loads)
        rows.append(f"- **Earlier notebooks:** it runs your code from {loads}, so keep them in this folder "
                    "(a missing one is replaced by the course's solution, and the lesson says so).")
    else:
        rows.append("- **Earlier notebooks:** none.")
    rows.append(f"- **Trained model:** {entry.checkpoint}" if entry.checkpoint else "- **Trained model:** none.")
    rows.append(f"- **Data:** {entry.data}")
    return "\n".join(["> **What this lesson needs**", ">", *[f"> {row}" for row in rows]])


def map_source(stem: str) -> str:
    """The code of the map cell at the top of lesson ``stem``."""
    return "\n".join([
        "# Where this lesson sits in the model: filled parts are built, the highlighted ones are this lesson's.",
        "from course_utils.model_map import lesson_map",
        "",
        f'lesson_map("{stem}");',
    ])
