"""The character CNN of a fragment: against the naive per-fragment computation, and in a pipeline."""

import numpy
import pytest
import spacy
from spacy.tokens import Doc

from spacy_fofe.char_cnn import CHAR_CNN, CharCNNCodes, fragment_max, segment_max
from spacy_fofe.fragments import enumerate_fragments

from helpers import NESTED, SMALL_MODEL, make_examples, predicted, train


def naive_fragment_features(model, doc: Doc, start: int, end: int) -> numpy.ndarray:
    """The max over the fragment's characters of ReLU(W . [window of embeddings] + b), the window
    stopping at each token's edges: computed character by character."""
    E, W, b = (model.get_param(name) for name in ("E", "W", "b"))
    window, nV = model.attrs["window"], model.get_dim("nV")
    best = None
    for token in doc[start:end]:
        rows = [E[ord(c) % nV] for c in token.text]
        for i in range(len(rows)):
            parts = [rows[i + k] if 0 <= i + k < len(rows) else numpy.zeros_like(rows[0])
                     for k in range(-window, window + 1)]
            h = numpy.maximum(W @ numpy.concatenate(parts) + b, 0.0)
            best = h if best is None else numpy.maximum(best, h)
    return best


@pytest.mark.parametrize("window", [0, 1, 2])
def test_fragment_features_match_the_naive_computation(window):
    nlp = spacy.blank("de")
    docs = [nlp("Die Universität Köln-Deutz hat 1.000 Studenten ."), nlp("x"), nlp("Ein Überlängenwort🙂 !")]
    model = CharCNNCodes(nO=5, nE=3, nV=97, window=window)
    model.initialize()
    codes = model.predict(docs)
    fragments = enumerate_fragments([len(d) for d in docs], 4)
    starts, sizes = codes.flat_starts(fragments), fragments[:, 2] - fragments[:, 1]
    features, _ = fragment_max(codes.arrays[CHAR_CNN], starts, sizes)
    for (d, start, end), row in zip(fragments, features):
        numpy.testing.assert_allclose(row, naive_fragment_features(model, docs[d], start, end), atol=1e-6)


def test_segment_max_and_its_rows():
    rng = numpy.random.default_rng(0)
    lengths = numpy.asarray([1, 7, 2, 33, 1, 5])
    x = rng.normal(size=(lengths.sum(), 4)).astype("float32")
    maxes, rows = segment_max(x, lengths)
    offset = 0
    for i, length in enumerate(lengths):
        part = x[offset:offset + length]
        numpy.testing.assert_array_equal(maxes[i], part.max(axis=0))
        numpy.testing.assert_array_equal(rows[i], offset + part.argmax(axis=0))
        offset += length


def test_a_pipeline_with_the_character_cnn_overfits_saves_and_loads(tmp_path, monkeypatch):
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    model = {**SMALL_MODEL, "char_cnn": True, "char_cnn_width": 16}
    nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=150)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    ner = nlp.get_pipe("fofe_ner")
    assert ner.model.get_ref("projection").get_dim("nF") == 16
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    docs = [nlp.make_doc(text) for text, _ in NESTED]
    numpy.testing.assert_allclose(loaded.get_pipe("fofe_ner").predict(docs)[1], ner.predict(docs)[1], atol=1e-6)
    # A long doc scored in windows gets the scores of the whole doc: the CNN reads no context.
    from spacy_fofe import component

    doc = nlp.make_doc(" ".join(text for text, _ in NESTED * 40))
    _, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    numpy.testing.assert_allclose(ner.predict([doc])[1], whole, atol=1e-5)


def test_the_character_cnn_alone_overfits():
    """No feature group but the CNN: no code is read at a fragment boundary, the CNN's max is all."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    off = dict.fromkeys(("left_context", "right_context", "bag_of_words", "char_fofe"), False)
    model = {**SMALL_MODEL, **off, "char_cnn": True, "char_cnn_width": 32, "char_cnn_window": 2, "length_bias": True}
    nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=400)
    assert nlp.get_pipe("fofe_ner").model.get_ref("projection").attrs["blocks"] == [CHAR_CNN]
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text


def test_invalid_character_cnn_settings_name_them():
    with pytest.raises(ValueError, match="window"):
        CharCNNCodes(window=-1)
    with pytest.raises(ValueError, match="nO"):
        CharCNNCodes(nO=0)
