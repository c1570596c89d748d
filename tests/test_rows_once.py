"""embed_rows_once: an embeddings-only tok2vec run once per distinct feature row is the same function."""

import numpy
import pytest
import spacy
from spacy.ml.models.tok2vec import MultiHashEmbed
from thinc.api import Adam

from spacy_fofe.features.rows_once import distinct_rows
from spacy_fofe.features.word_dropout import WordDropoutHashEmbed

ATTRS = ["NORM", "PREFIX", "SUFFIX", "SHAPE"]
TEXTS = ["Peter Blackburn met Peter in Brussels .", "the the the the", "", "Brussels , Peter ."]


def make_embed():
    return MultiHashEmbed(width=16, attrs=ATTRS, rows=[100, 50, 50, 20], include_static_vectors=False)


def make_once():
    """spaCy's MultiHashEmbed, built with each distinct row embedded once (no word dropout)."""
    return WordDropoutHashEmbed(width=16, attrs=ATTRS, rows=[100, 50, 50, 20], include_static_vectors=False,
                                word_dropout=0.0)


@pytest.fixture
def docs():
    nlp = spacy.blank("en")
    return [nlp.make_doc(text) for text in TEXTS]


def gradients(model):
    out = {}
    for i, node in enumerate(model.walk()):  # the two layouts have the same nodes in the same order
        for name in node.param_names:
            if node.has_grad(name):
                out[(i, name)] = node.get_grad(name).copy()
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
    once = make_once().from_bytes(plain.to_bytes())  # MultiHashEmbed's node tree: its weights load
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
    once = make_once()
    once.initialize(X=docs)
    seen = []
    maxout = once.layers[3]
    forward = maxout._func
    maxout._func = lambda model, X, is_train: (seen.append(len(X)), forward(model, X, is_train))[1]
    once.predict(docs[1:2])  # "the the the the"
    assert seen == [1]


def test_a_fresh_model_initializes_like_multihashembed(docs):
    once, plain = make_once(), make_embed()
    once.initialize(X=docs)
    plain.initialize(X=docs)
    assert once.get_dim("nO") == 16
    assert [node.name for node in once.walk()][1:] == [node.name for node in plain.walk()][1:]


def test_rows_whose_hashes_collide_are_still_told_apart(monkeypatch):
    import spacy_fofe.features.rows_once as rows_once

    monkeypatch.setattr(rows_once, "ROW_HASH_MULTIPLIER", numpy.uint64(0))  # every row hashes to its last id
    ids = numpy.array([[1, 7], [2, 7], [1, 7], [3, 8]], dtype="uint64")
    rows, inverse = distinct_rows(ids)
    assert len(rows) == 3
    numpy.testing.assert_array_equal(rows[inverse], ids)


MORE = ["Peter lives in Brussels .", "Anna Blackburn , the the ."]


def fresh_copy(model):
    """The same weights in a new model, which has kept no rows."""
    copy = make_once()
    copy.initialize(X=[spacy.blank("en").make_doc("x")])
    return copy.from_bytes(model.to_bytes())


def assert_same_vectors(got, expected):
    """The same vectors, up to the rounding of rows embedded in other batches."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def count_rows(model):
    """The rows each call of the model's maxout is given."""
    seen, maxout = [], model.layers[3]
    forward = maxout._func
    maxout._func = lambda node, X, is_train: (seen.append(len(X)), forward(node, X, is_train))[1]
    return seen


def test_predictions_embed_only_rows_no_earlier_batch_had_and_give_the_same_vectors(docs):
    once = make_once()
    once.initialize(X=docs)
    nlp = spacy.blank("en")
    more = [nlp.make_doc(text) for text in MORE]
    expected = fresh_copy(once).predict(more)
    seen = count_rows(once)
    once.predict(docs)
    n_first = seen[-1]
    assert_same_vectors(once.predict(more), expected)
    # "Peter", "in", "Brussels", ".", "Blackburn", ",", "the" were in the first batch: "lives" and "Anna" are new
    assert seen[-1] == 2 and n_first > 2
    n_calls = len(seen)
    assert_same_vectors(once.predict(docs + more), fresh_copy(once).predict(docs + more))
    assert len(seen) == n_calls  # every row kept: the layers did not run


def test_kept_rows_follow_the_weights_training_and_averages(docs):
    once = make_once()
    once.initialize(X=docs)
    once.predict(docs)
    optimizer = Adam(0.01, use_averages=True)
    for _ in range(3):
        vectors, backprop = once(docs, is_train=True)
        backprop([numpy.ones_like(v) for v in vectors])
        once.finish_update(optimizer)
    assert_same_vectors(once.predict(docs), fresh_copy(once).predict(docs))  # not the vectors of before training
    with once.use_params(optimizer.averages):
        averaged = once.predict(docs)
        assert_same_vectors(averaged, fresh_copy(once).predict(docs))
    assert_same_vectors(once.predict(docs), fresh_copy(once).predict(docs))
    assert any(not numpy.array_equal(a, b) for a, b in zip(averaged, once.predict(docs)))


def test_kept_rows_with_shared_hashes_or_past_their_limit_give_each_rows_own_vector(docs, monkeypatch):
    import spacy_fofe.features.rows_once as rows_once

    once = make_once()
    once.initialize(X=docs)
    nlp = spacy.blank("en")
    batches = [docs, [nlp.make_doc(text) for text in MORE], docs]
    expected = [fresh_copy(once).predict(batch) for batch in batches]
    monkeypatch.setattr(rows_once, "ROW_HASH_MULTIPLIER", numpy.uint64(0))  # a row's hash is its last id
    monkeypatch.setattr(rows_once, "MAX_KEPT_ROWS", 4)
    for batch, vectors in zip(batches, expected):
        assert_same_vectors(once.predict(batch), vectors)
        assert once.attrs["kept_rows"].n_rows <= 4


def train_steps(model, batches):
    optimizer = Adam(0.01)
    for batch in batches:
        vectors, backprop = model(batch, is_train=True)
        backprop([numpy.ones_like(v) for v in vectors])
        model.finish_update(optimizer)


def test_training_counts_its_rows_and_a_saved_model_embeds_the_most_frequent_at_its_first_prediction(docs):
    import pickle

    once = make_once()
    once.initialize(X=docs)
    train_steps(once, [docs, docs[1:2]])
    counted = once.attrs["kept_rows"].counted
    ids, counts = counted.most_frequent(3)
    assert counts.tolist() == [8, 3, 2]  # "the": 4 tokens in each of two batches; "Peter" 3 times; 2 each
    loaded = fresh_copy(once)
    nlp = spacy.blank("en")
    more = [nlp.make_doc(text) for text in MORE]
    expected = make_once_with_weights(once).predict(more)  # the same weights, nothing counted or kept
    seen = count_rows(loaded)
    assert_same_vectors(loaded.predict(more), expected)
    n_shipped = counted.n_rows  # every training row is shipped (fewer than MAX_SHIPPED_ROWS)
    assert seen == [n_shipped, 2]  # the shipped rows at once, then "lives" and "Anna" alone
    assert_same_vectors(loaded.predict(docs), make_once_with_weights(once).predict(docs))
    assert seen == [n_shipped, 2]  # the training docs' rows were all shipped
    kept = loaded.attrs["kept_rows"]
    copy = pickle.loads(pickle.dumps(kept))
    assert kept.n_rows > 0 and copy.n_rows == 0  # a copy keeps the counts, not the vectors
    numpy.testing.assert_array_equal(copy.counted.most_frequent(n_shipped)[0], ids_of(kept))


def test_a_pipeline_ships_at_most_max_shipped_rows_the_most_frequent(docs, monkeypatch):
    import spacy_fofe.features.rows_once as rows_once

    monkeypatch.setattr(rows_once, "MAX_SHIPPED_ROWS", 1)
    once = make_once()
    once.initialize(X=docs)
    train_steps(once, [docs])
    loaded = fresh_copy(once)
    ids = loaded.attrs["kept_rows"].counted.ids
    assert len(ids) == 1 and loaded.attrs["kept_rows"].counted.counts.tolist() == [4]  # "the"
    seen = count_rows(loaded)
    assert_same_vectors(loaded.predict(docs[1:2]), make_once_with_weights(once).predict(docs[1:2]))
    assert seen == [1]  # the shipped row, then nothing new


def test_row_counts_stop_at_their_limit_and_keep_one_row_a_hash(monkeypatch):
    import spacy_fofe.features.rows_once as rows_once

    monkeypatch.setattr(rows_once, "MAX_COUNTED_ROWS", 3)
    counts = rows_once.RowCounts()
    counts.add(numpy.array([[1, 2], [3, 4]], dtype="uint64"), numpy.array([5, 1]))
    counts.add(numpy.array([[3, 4], [5, 6], [7, 8]], dtype="uint64"), numpy.array([1, 2, 9]))
    ids, n = counts.most_frequent(10)
    assert ids.tolist() == [[1, 2], [5, 6], [3, 4]] and n.tolist() == [5, 2, 2]  # [7, 8] came past the limit
    monkeypatch.setattr(rows_once, "ROW_HASH_MULTIPLIER", numpy.uint64(0))  # a row's hash is its last id
    shared = rows_once.RowCounts()
    shared.add(numpy.array([[1, 7], [2, 7], [3, 8]], dtype="uint64"), numpy.array([1, 2, 3]))
    ids, n = shared.most_frequent(10)
    assert ids.tolist() == [[3, 8], [1, 7]] and n.tolist() == [3, 1]


def make_once_with_weights(model):
    """A model with `model`'s weights and neither counts nor kept rows."""
    copy = fresh_copy(model)
    copy.attrs["kept_rows"] = type(model.attrs["kept_rows"])()
    return copy


def ids_of(kept):
    return kept.counted.most_frequent(kept.counted.n_rows)[0]
