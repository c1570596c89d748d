"""spacy_fofe.WordVectors.v1 (frozen by default) and TunedVectors.v1 (its fine-tuned form): rows from
the vocab's vectors by the lower-case form, one learned row for unknown words, word dropout."""

import numpy
import pytest
import spacy
from spacy.vectors import Vectors
from thinc.api import Adam

from spacy_fofe.features.vectors import TunedVectors, WordVectors


@pytest.fixture
def nlp():
    nlp = spacy.blank("en")
    for word, value in [("paris", 1.0), ("ann", 2.0)]:
        nlp.vocab.set_vector(word, numpy.full(3, value, dtype="float32"))
    return nlp


@pytest.mark.parametrize("make", [WordVectors, TunedVectors])
def test_rows_come_from_the_vectors_by_lower_form_and_unknown_words_share_a_row(nlp, make):
    layer = make("LOWER")
    docs = [nlp("Ann saw PARIS"), nlp("")]
    layer.initialize(X=docs)
    out = layer.predict(docs)
    assert out[0].shape == (3, 3) and out[1].shape == (0, 3)
    numpy.testing.assert_array_equal(out[0][:, 0], [2.0, 0.0, 1.0])


def test_tuned_gradients_reach_the_rows_that_were_used(nlp):
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


def test_frozen_vectors_stay_and_only_the_unknown_row_learns(nlp):
    layer = WordVectors("LOWER")
    docs = [nlp("Ann saw Paris paris , then")]
    layer.initialize(X=docs)
    assert layer.param_names == ("U",)  # no copy of the table in the model
    before = nlp.vocab.vectors.data.copy()
    optimizer = Adam(0.1)
    for _ in range(3):
        out, backprop = layer.begin_update(docs)
        backprop([numpy.ones_like(out[0])])
        assert layer.get_grad("U")[0, 0] == 3.0  # "saw", ",", "then"
        layer.finish_update(optimizer)
    numpy.testing.assert_array_equal(nlp.vocab.vectors.data, before)
    out = layer.predict(docs)[0]
    numpy.testing.assert_array_equal(out[[0, 2, 3], 0], [2.0, 1.0, 1.0])
    assert (out[[1, 4, 5], 0] < 0).all() and len(set(out[[1, 4, 5], 0])) == 1  # the unknown row moved


def test_frozen_vectors_round_trip_and_refuse_vectors_of_another_width(nlp):
    layer = WordVectors("LOWER")
    docs = [nlp("Ann saw Paris")]
    layer.initialize(X=docs)
    layer.set_param("U", numpy.full((1, 3), 7.0, dtype="float32"))
    loaded = WordVectors("LOWER").from_bytes(layer.to_bytes())
    numpy.testing.assert_array_equal(loaded.predict(docs)[0], layer.predict(docs)[0])
    other = spacy.blank("en")
    other.vocab.set_vector("paris", numpy.ones(5, dtype="float32"))
    with pytest.raises(ValueError, match="3-wide"):
        loaded.predict([other("Paris")])


@pytest.mark.parametrize("make", [WordVectors, TunedVectors])
def test_a_pipeline_without_vectors_is_a_clear_error(make):
    with pytest.raises(ValueError, match="no vectors"):
        make().initialize(X=[spacy.blank("en")("a b")])


@pytest.mark.parametrize("make", [WordVectors, TunedVectors])
def test_rows_are_those_vectors_find_gives_and_follow_the_table_as_it_changes(make):
    """The layers find rows in an index of the table's keys (no lookup per token): the same rows as spaCy's
    Vectors.find, for a table that grows and for another table whose keys point to other rows."""
    nlp = spacy.blank("en")
    rng = numpy.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    for word in words[::2]:
        nlp.vocab.set_vector(word, rng.normal(size=4).astype("float32"))
    layer = make("LOWER")
    doc = nlp(" ".join(rng.permutation(words * 3)))  # each word three times, half of them with a vector
    layer.initialize(X=[doc])

    def expected_rows():  # the table's row of each token (the unknown row: zeros at first)
        rows = nlp.vocab.vectors.find(keys=doc.to_array("LOWER"))
        return numpy.where((rows >= 0)[:, None], nlp.vocab.vectors.data[rows], 0.0)

    numpy.testing.assert_array_equal(layer.predict([doc])[0], expected_rows())
    if make is WordVectors:  # the frozen layer reads the vocab's table as it is now
        nlp.vocab.set_vector("w1", numpy.full(4, 5.0, dtype="float32"))  # a word gains a vector
        numpy.testing.assert_array_equal(layer.predict([doc])[0], expected_rows())
        keys = list(nlp.vocab.vectors.key2row)  # another table: each key its vector, in another row
        table = numpy.stack([nlp.vocab.vectors[key] for key in keys])
        nlp.vocab.vectors = Vectors(strings=nlp.vocab.strings, data=table[::-1].copy(), keys=keys[::-1])
        numpy.testing.assert_array_equal(layer.predict([doc])[0], expected_rows())


@pytest.mark.parametrize("make,param", [(WordVectors, "U"), (TunedVectors, "E")])
def test_word_dropout_sends_a_share_of_the_tokens_to_the_unknown_row_in_training_only(nlp, make, param):
    layer = make("LOWER", word_dropout=0.5)
    docs = [nlp(" ".join(["Paris"] * 2000))]
    layer.initialize(X=docs)
    assert (layer.predict(docs)[0][:, 0] == 1.0).all()  # inference: every token its own row
    numpy.random.seed(0)
    out, backprop = layer.begin_update(docs)
    dropped = out[0][:, 0] == 0.0  # the unknown row starts at zeros
    assert 0.45 < dropped.mean() < 0.55
    backprop([numpy.ones_like(out[0])])
    assert layer.get_grad(param)[-1, 0] == dropped.sum()  # the dropped tokens train the unknown row
    with pytest.raises(ValueError, match="word_dropout"):
        make(word_dropout=1.0)


def test_floret_vectors_are_read_frozen_and_refused_for_fine_tuning():
    nlp = spacy.blank("en")
    table = numpy.random.default_rng(0).normal(size=(20, 3)).astype("float32")
    nlp.vocab.vectors = Vectors(strings=nlp.vocab.strings, mode="floret", data=table, hash_count=1, minn=2, maxn=3)
    docs = [nlp("Ann saw Paris"), nlp("")]
    layer = WordVectors("LOWER")
    layer.initialize(X=docs)
    out = layer.predict(docs)
    keys = docs[0].to_array("LOWER")
    numpy.testing.assert_allclose(out[0], nlp.vocab.vectors.get_batch(keys), rtol=1e-6)
    assert out[1].shape == (0, 3)
    with pytest.raises(ValueError, match="floret"):
        TunedVectors().initialize(X=docs)
