"""The map of the model (course_utils.model_map) and the lessons table it reads (course_utils.lessons).

The map is a picture, so it is tested as data: which boxes there are, which part each belongs to, the state and
mark each gets, and that the figure draws each box (found by its gid) in its state's colour with its mark. No
pixels are compared.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from course_utils import lessons, model_map  # noqa: E402
from course_utils.model_map import BOXES, PARTS, draw_model_map, layout, lesson_map  # noqa: E402


@pytest.fixture(autouse=True)
def no_figures_left():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a test left a figure open"


def boxes_of(part: str, boxes=BOXES):
    return [b for b in boxes if b.part == part]


def test_every_part_has_a_box_and_every_box_a_known_part():
    assert len({b.name for b in BOXES}) == len(BOXES), "box names are unique"
    assert {b.part for b in BOXES} == set(PARTS)
    assert len(boxes_of("multi_head_attention")) == 3  # encoder self, decoder self, cross
    assert len(boxes_of("attention")) == 3  # one scaled dot-product attention inside each
    assert len(boxes_of("add_norm")) == 5  # 2 per encoder layer, 3 per decoder layer
    assert len(boxes_of("positional_encoding")) == 2 and len(boxes_of("embedding")) == 2
    assert len(boxes_of("feed_forward")) == len(boxes_of("feed_forward_activation")) == 2


def test_the_parts_that_differ_between_models_are_on_the_map():
    """Lesson 10 marks where MarianMT differs from the paper: each of those places is a part of its own."""
    for part in ("feed_forward_activation", "positional_encoding", "output_projection", "target_mask", "start_token"):
        assert part in PARTS and boxes_of(part), part


def _inside(inner, outer) -> bool:
    return (outer.x <= inner.x and inner.x + inner.width <= outer.x + outer.width
            and outer.y <= inner.y and inner.top <= outer.top)


def test_boxes_sit_where_the_model_has_them():
    by_name = {b.name: b for b in BOXES}
    for name in ("encoder_self_attention", "encoder_norm1", "encoder_feed_forward", "encoder_norm2"):
        assert _inside(by_name[name], by_name["encoder_layer"]), name
    for name in ("decoder_self_attention", "cross_attention", "decoder_feed_forward", "decoder_norm3"):
        assert _inside(by_name[name], by_name["decoder_layer"]), name
    for mha in boxes_of("multi_head_attention"):
        assert _inside(by_name[f"{mha.name}.attention"], mha)
    for ff in boxes_of("feed_forward"):
        assert _inside(by_name[f"{ff.name}.activation"], ff)
    # bottom to top, as data flows: tokens, embedding, positions, layers, output layer, loss, decoding
    chain = ["target_tokens", "target_embedding", "target_positions", "decoder_self_attention", "cross_attention",
             "decoder_feed_forward", "output_projection", "loss", "decoding"]
    assert [by_name[n].y for n in chain] == sorted(by_name[n].y for n in chain)
    # no two boxes that are not nested overlap
    solid = [b for b in BOXES if b.kind != "frame"]
    for i, a in enumerate(solid):
        for b in solid[i + 1:]:
            apart = (a.x + a.width <= b.x or b.x + b.width <= a.x or a.top <= b.y or b.top <= a.y)
            assert apart or _inside(a, b) or _inside(b, a), (a.name, b.name)


def test_states_built_focus_and_todo():
    boxes = layout(built=["attention", "padding_mask"], focus=["multi_head_attention"])
    states = {b.name: b.state for b in boxes}
    assert states["encoder_self_attention.attention"] == "built"
    assert states["padding_mask"] == "built"
    assert states["cross_attention"] == "focus"
    assert states["encoder_feed_forward"] == "todo" and states["decoding"] == "todo"
    assert {b.state for b in layout(built="all")} == {"built"}
    assert {b.state for b in layout()} == {"todo"}
    assert {b.state for b in layout(built="all", focus="attention") if b.part == "attention"} == {"focus"}


def test_marks_are_numbered_in_the_order_of_the_parts_and_put_on_every_box_of_their_part():
    marks = {"output_projection": "a bias of its own", "feed_forward_activation": "SiLU, not ReLU"}
    boxes = layout(built="all", marks=marks)
    numbered = {b.name: b.mark for b in boxes if b.mark is not None}
    assert numbered == {"encoder_feed_forward.activation": 1, "decoder_feed_forward.activation": 1,
                        "output_projection": 2}
    assert model_map.mark_list(marks) == [(1, "feed_forward_activation", "SiLU, not ReLU"),
                                          (2, "output_projection", "a bias of its own")]


def test_unknown_parts_and_boxes_are_named_in_the_error():
    with pytest.raises(ValueError, match="no part named 'feedforward'.*feed_forward"):
        layout(built=["feedforward"])
    with pytest.raises(ValueError, match="marks: no part named 'ffn'"):
        layout(marks={"ffn": "x"})
    with pytest.raises(ValueError, match="shapes: no box named 'encoder'"):
        layout(shapes={"encoder": "(2, 5, 16)"})


def _patches(fig):
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


def _texts(fig) -> list[str]:
    """Every text of the figure, a wrapped one on one line again."""
    return [" ".join(t.get_text().split()) for ax in fig.axes for t in ax.texts] + [fig._suptitle.get_text()]


def test_the_figure_draws_every_box_in_its_state_with_its_mark_and_shape():
    marks = {"positional_encoding": "a learned table"}
    fig = draw_model_map(built=["tokens", "embedding"], focus=["positional_encoding"], marks=marks,
                         shapes={"source_embedding": "(2, 7, 16)"}, title="A test map")
    try:
        patches = _patches(fig)
        assert set(patches) == {b.name for b in BOXES}
        for box in layout(built=["tokens", "embedding"], focus=["positional_encoding"]):
            if box.kind == "frame":
                continue
            assert patches[box.name].get_facecolor() == to_rgba(model_map._FILL[box.state]), box.name
        texts = _texts(fig)
        assert texts.count("1") == 3  # the mark on both positional encodings, and in the legend
        assert "a learned table" in texts and "(2, 7, 16)" in texts and "A test map" in texts
        assert "this lesson" in texts and "built so far" in texts and "a later lesson" in texts
    finally:
        plt.close(fig)


# -- the lessons table ---------------------------------------------------------------------------------------------


def test_a_label_relabels_every_box_of_its_part_and_nothing_else():
    labels = {"feed_forward_activation": "Linear · SiLU · Linear"}
    plain, relabelled = layout(built="all"), layout(built="all", labels=labels)
    changed = [(a.name, a.text, b.text) for a, b in zip(plain, relabelled) if a.text != b.text]
    assert changed == [(b.name, "Linear · ReLU · Linear", "Linear · SiLU · Linear") for b in plain
                       if b.part == "feed_forward_activation"] and len(changed) == 2
    with pytest.raises(ValueError, match="labels: no part named 'ffn'"):
        layout(labels={"ffn": "x"})


def test_lesson_10_draws_marians_feed_forward_as_it_is():
    """The lesson's callouts say SiLU, not ReLU, and the pad token, not <bos>: the boxes they point at say so too."""
    entry = lessons.lesson("10_real_translator")
    assert entry.labels == {"feed_forward_activation": "Linear · SiLU · Linear", "start_token": "<pad>\nstart"}
    fig = lesson_map(entry.stem, show=False)
    try:
        texts = _texts(fig)
        assert texts.count("Linear · SiLU · Linear") == 2 and "Linear · ReLU · Linear" not in texts
        assert "<pad> start" in texts and "<bos> start" not in texts
    finally:
        plt.close(fig)
    fig = lesson_map("05_transformer", show=False)
    try:
        assert _texts(fig).count("Linear · ReLU · Linear") == 2
    finally:
        plt.close(fig)


def test_every_part_a_lesson_names_is_on_the_map():
    for entry in lessons.LESSONS:
        named = set(entry.builds) | set(entry.highlighted) | set(entry.marks) | set(entry.labels)
        assert named <= set(PARTS), (entry.stem, sorted(named - set(PARTS)))


def test_each_part_is_built_once_and_every_part_is_built():
    built = [part for entry in lessons.LESSONS for part in entry.builds]
    assert len(built) == len(set(built)), "a part is built by two lessons"
    assert set(built) == set(PARTS), f"parts no lesson builds: {sorted(set(PARTS) - set(built))}"


def test_lesson_maps_fill_in_what_earlier_lessons_built():
    assert lessons.built_before("00_setup_and_data") == ()
    assert set(lessons.built_before("05_transformer")) == {"tokens", "start_token", "attention", "padding_mask",
                                                           "target_mask", "positional_encoding",
                                                           "multi_head_attention"}
    for entry in lessons.LESSONS:
        fig = lesson_map(entry.stem, show=False)
        try:
            boxes = layout(lessons.built_before(entry.stem), entry.highlighted, entry.marks)
            states = {b.part: b.state for b in boxes}
            assert all(states[p] == "focus" for p in entry.highlighted), entry.stem
            assert all(states[p] in ("built", "focus") for p in lessons.built_before(entry.stem)), entry.stem
            later = {p for e in lessons.LESSONS[lessons.LESSONS.index(entry) + 1:] for p in e.builds}
            assert all(states[p] == "todo" for p in later - set(entry.highlighted)), entry.stem
            assert f"Lesson {entry.number}" in fig._suptitle.get_text()
            assert [t for t in _texts(fig) if t in entry.marks.values()] == [n for _, _, n in model_map.mark_list(entry.marks)]
        finally:
            plt.close(fig)


def test_lesson_lookup_by_stem_number_or_file_name():
    assert lessons.lesson("05").stem == lessons.lesson("05_transformer.ipynb").stem == "05_transformer"
    with pytest.raises(KeyError, match="no lesson '42'.*00_setup_and_data"):
        lessons.lesson("42")


def test_the_needs_box_says_time_notebooks_checkpoint_and_data():
    for entry in lessons.LESSONS:
        text = lessons.needs_markdown(entry.stem)
        assert text.startswith("> **What this lesson needs**")
        for label in ("**Time:**", "**Earlier notebooks:**", "**Trained model:**", "**Data:**"):
            assert label in text, (entry.stem, label)
        for stem in entry.loads:
            assert f"`{stem}`" in text
    assert "06_transformer.pt" in lessons.needs_markdown("07_inference")
    assert "MULTI30K_DIR" in lessons.needs_markdown("08_real_data") and "offline" in lessons.needs_markdown("08_real_data").lower()


def test_lesson_map_shows_itself_and_leaves_no_figure_open():
    assert lesson_map("03_positional_encoding") is None and plt.get_fignums() == []
