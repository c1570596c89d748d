"""spacy_fofe.TunedVectors.v1: starts from the vocab's vectors, learns, and shares one row for unknown words."""

import numpy
import pytest
import spacy

from spacy_fofe.vectors import TunedVectors


@pytest.fixture
def nlp():
    nlp = spacy.blank("en")
    for word, value in [("paris", 1.0), ("ann", 2.0)]:
        nlp.vocab.set_vector(word, numpy.full(3, value, dtype="float32"))
    return nlp


def test_rows_start_from_the_vectors_by_lower_form_and_unknown_words_share_a_row(nlp):
    layer = TunedVectors("LOWER")
    docs = [nlp("Ann saw PARIS"), nlp("")]
    layer.initialize(X=docs)
    out = layer.predict(docs)
    assert out[0].shape == (3, 3) and out[1].shape == (0, 3)
    numpy.testing.assert_array_equal(out[0][:, 0], [2.0, 0.0, 1.0])


def test_gradients_reach_the_rows_that_were_used(nlp):
    layer = TunedVectors("LOWER")
    docs = [nlp("Ann saw Paris paris")]
    layer.initialize(X=docs)
    out, backprop = layer.begin_update(docs)
    backprop([numpy.ones_like(out[0])])
    grad = layer.get_grad("E")
    row = nlp.vocab.vectors.find(key=nlp.vocab.strings["paris"])
    assert grad[row, 0] == 2.0  # "Paris" and "paris" share the row
    assert grad[-1, 0] == 1.0  # "saw" has no vector: the unknown row
    assert numpy.count_nonzero(grad[:, 0]) == 3


def test_a_pipeline_without_vectors_is_a_clear_error():
    with pytest.raises(ValueError, match="no vectors"):
        TunedVectors().initialize(X=[spacy.blank("en")("a b")])


def test_word_dropout_sends_a_share_of_the_tokens_to_the_unknown_row_in_training_only(nlp):
    layer = TunedVectors("LOWER", word_dropout=0.5)
    docs = [nlp(" ".join(["Paris"] * 2000))]
    layer.initialize(X=docs)
    assert (layer.predict(docs)[0][:, 0] == 1.0).all()  # inference: every token its own row
    numpy.random.seed(0)
    out, backprop = layer.begin_update(docs)
    dropped = out[0][:, 0] == 0.0  # the unknown row starts at zeros
    assert 0.45 < dropped.mean() < 0.55
    backprop([numpy.ones_like(out[0])])
    assert layer.get_grad("E")[-1, 0] == dropped.sum()  # the dropped tokens train the unknown row
    with pytest.raises(ValueError, match="word_dropout"):
        TunedVectors(word_dropout=1.0)
