"""embed_rows_once: an embeddings-only tok2vec run once per distinct feature row is the same function."""

import numpy
import pytest
import spacy
from spacy.ml.models.tok2vec import MultiHashEmbed
from thinc.api import Model

from spacy_fofe.rows_once import distinct_rows, embed_rows_once, is_row_embedding

ATTRS = ["NORM", "PREFIX", "SUFFIX", "SHAPE"]
TEXTS = ["Peter Blackburn met Peter in Brussels .", "the the the the", "", "Brussels , Peter ."]


def make_embed():
    return MultiHashEmbed(width=16, attrs=ATTRS, rows=[100, 50, 50, 20], include_static_vectors=False)


@pytest.fixture
def docs():
    nlp = spacy.blank("en")
    return [nlp.make_doc(text) for text in TEXTS]


def gradients(model):
    out = {}
    for node in model.walk():
        for name in node.param_names:
            if node.has_grad(name):
                out[(node.id, name)] = node.get_grad(name).copy()
                node.set_grad(name, node.ops.alloc(node.get_grad(name).shape))
    return out


def test_distinct_rows_rebuild_the_input():
    ids = numpy.array([[1, 2], [3, 4], [1, 2], [1, 5], [3, 4]], dtype="uint64")
    rows, inverse = distinct_rows(ids)
    assert len(rows) == 3
    numpy.testing.assert_array_equal(rows[inverse], ids)
    empty_rows, empty_inverse = distinct_rows(ids[:0])
    assert empty_rows.shape == (0, 2) and empty_inverse.shape == (0,)


def test_outputs_and_gradients_equal_the_plain_embedding(docs):
    plain = make_embed()
    plain.initialize(X=docs)
    once = embed_rows_once(plain)  # the same layers, so the same weights
    numpy.random.seed(0)
    expected, backprop_plain = plain(docs, is_train=True)
    d_vectors = [numpy.random.uniform(-1, 1, vectors.shape).astype("float32") for vectors in expected]
    backprop_plain(d_vectors)
    expected_grads = gradients(plain)
    got, backprop_once = once(docs, is_train=True)
    assert [vectors.shape for vectors in got] == [(len(doc), 16) for doc in docs]
    for a, b in zip(got, expected):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    backprop_once(d_vectors)
    got_grads = gradients(once)
    assert expected_grads.keys() == got_grads.keys() and expected_grads
    for key in expected_grads:
        numpy.testing.assert_allclose(got_grads[key], expected_grads[key], rtol=1e-4, atol=1e-6)


def test_the_row_layers_see_each_distinct_row_once(docs):
    once = embed_rows_once(make_embed())
    once.initialize(X=docs)
    seen = []
    maxout = once.layers[3]
    forward = maxout._func
    maxout._func = lambda model, X, is_train: (seen.append(len(X)), forward(model, X, is_train))[1]
    once.predict(docs[1:2])  # "the the the the"
    assert seen == [1]


def test_a_pipeline_saved_with_the_plain_layout_loads(docs):
    plain = make_embed()
    plain.initialize(X=docs)
    once = embed_rows_once(make_embed())
    once.from_bytes(plain.to_bytes())
    for a, b in zip(once.predict(docs), plain.predict(docs)):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_other_layouts_are_refused():
    other = Model("other", lambda model, X, is_train: (X, lambda dY: dY))
    assert not is_row_embedding(other)
    assert not is_row_embedding(MultiHashEmbed(width=8, attrs=["NORM"], rows=[10], include_static_vectors=True))
    with pytest.raises(ValueError, match="is not chain"):
        embed_rows_once(other)


def test_rows_whose_hashes_collide_are_still_told_apart(monkeypatch):
    import spacy_fofe.rows_once as rows_once

    monkeypatch.setattr(rows_once, "ROW_HASH_MULTIPLIER", numpy.uint64(0))  # every row hashes to its last id
    ids = numpy.array([[1, 7], [2, 7], [1, 7], [3, 8]], dtype="uint64")
    rows, inverse = distinct_rows(ids)
    assert len(rows) == 3
    numpy.testing.assert_array_equal(rows[inverse], ids)
