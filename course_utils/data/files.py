"""Parallel corpora from local files, in the course's schema (``translation: {"en", "de"}``).

Two layouts are read, each split on its own:

* a pair of parallel text files, one sentence per line, plain or gzipped:
  ``train.en`` / ``train.de`` or ``train.en.gz`` / ``train.de.gz`` (the layout
  of the public Multi30k repository's ``data/task1/raw``, whose splits are
  ``train``, ``val``, ``test_2016_flickr``, ...);
* JSON lines, plain or gzipped: ``train.jsonl`` with fields ``en`` and ``de``
  on each line (the layout of the hub copy ``bentrevett/multi30k``), or with a
  ``translation`` object (the layout of the course's bundled corpus).

Both are read with ``datasets`` (its ``text`` and ``json`` loaders).
"""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path
from typing import Iterable, Iterator

#: Other names a split goes by, tried in order: "validation" is "val" in Multi30k,
#: and its standard test set is "test_2016_flickr".
SPLIT_NAMES = {
    "train": ("train",),
    "validation": ("validation", "val", "valid", "dev"),
    "test": ("test", "test_2016_flickr", "test2016"),
}
_ALIASES = {"valid": "validation", "dev": "validation", "val": "validation"}
LANGS = ("en", "de")


def split_names(split: str) -> tuple[str, ...]:
    """The file stems that may hold ``split`` (an unknown split is looked for under its own name)."""
    return SPLIT_NAMES.get(_ALIASES.get(split, split), (split,))


def _first_existing(folder: Path, stem: str, suffix: str) -> Path | None:
    for name in (f"{stem}{suffix}", f"{stem}{suffix}.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def find_split_files(folder: str | os.PathLike, split: str) -> tuple[str, dict[str, Path]]:
    """``("parallel", {"en": path, "de": path})`` or ``("jsonl", {"data": path})`` for ``split`` in ``folder``.

    Raises FileNotFoundError naming what was looked for and what is there.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: give the folder that holds the corpus files.")
    for stem in split_names(split):
        jsonl = _first_existing(folder, stem, ".jsonl")
        if jsonl is not None:
            return "jsonl", {"data": jsonl}
        pair = {lang: _first_existing(folder, stem, f".{lang}") for lang in LANGS}
        if all(pair.values()):
            return "parallel", pair  # type: ignore[return-value]
        if any(pair.values()):
            present = next(p for p in pair.values() if p is not None)
            raise FileNotFoundError(f"{present} has no parallel file for the other language in {folder} (expected {stem}.en and {stem}.de).")
    wanted = ", ".join(f"{s}.en + {s}.de, or {s}.jsonl" for s in split_names(split))
    there = ", ".join(sorted(p.name for p in folder.iterdir())[:20]) or "nothing"
    raise FileNotFoundError(f"No {split!r} split in {folder}: looked for {wanted} (each also .gz). The folder holds: {there}.")


@contextlib.contextmanager
def quiet(datasets) -> Iterator[None]:
    """Hide the progress bars of ``datasets`` for one call, then restore the learner's setting."""
    logging = datasets.utils.logging
    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def to_course_schema(dataset, where: str = "the corpus"):
    """A dataset with columns ``en`` and ``de`` (the hub's Multi30k) as one ``translation`` column; others unchanged."""
    import datasets

    if dataset.column_names == ["translation"]:
        return dataset
    if not set(LANGS) <= set(dataset.column_names):
        raise ValueError(f"{where} has columns {dataset.column_names}: expected 'en' and 'de', or 'translation'.")
    pairs = [{"en": en, "de": de} for en, de in zip(dataset["en"], dataset["de"])]
    return datasets.Dataset.from_dict({"translation": pairs})


def load_local(folder: str | os.PathLike, split: str = "train"):
    """The ``split`` of the corpus in ``folder`` (either layout) as a ``datasets.Dataset`` with a ``translation`` column."""
    import datasets

    layout, paths = find_split_files(folder, split)
    with quiet(datasets):
        if layout == "jsonl":
            loaded = datasets.load_dataset("json", data_files={"data": str(paths["data"])}, split="data")
            return to_course_schema(loaded, str(paths["data"]))
        sides = datasets.load_dataset("text", data_files={lang: str(paths[lang]) for lang in LANGS})
    en, de = sides["en"]["text"], sides["de"]["text"]
    if len(en) != len(de):
        raise ValueError(f"{paths['en'].name} has {len(en)} lines but {paths['de'].name} has {len(de)}: the files are not parallel.")
    pairs = [{"en": e.strip(), "de": d.strip()} for e, d in zip(en, de)]
    return datasets.Dataset.from_dict({"translation": pairs})


def write_parallel(pairs: Iterable[dict], folder: str | os.PathLike, split: str, gz: bool = False) -> dict[str, Path]:
    """Write ``{"en", "de"}`` pairs as ``<split>.en`` and ``<split>.de`` (gzipped with ``gz``), one sentence a line."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = list(pairs)
    paths = {}
    for lang in LANGS:
        path = folder / f"{split}.{lang}{'.gz' if gz else ''}"
        text = "".join(pair[lang].replace("\n", " ") + "\n" for pair in pairs)
        with (gzip.open(path, "wt", encoding="utf-8") if gz else open(path, "w", encoding="utf-8")) as f:
            f.write(text)
        paths[lang] = path
    return paths


__all__ = [
    "LANGS", "SPLIT_NAMES", "find_split_files", "load_local", "quiet", "split_names", "to_course_schema", "write_parallel",
]
