"""spacy_fofe.WordDropoutHashEmbed.v1: word identity dropped at random in training and for unseen words at
inference, affixes and shape kept."""

import numpy
import pytest
import spacy
from spacy.util import registry

from spacy_fofe.features.word_dropout import UNKNOWN_ID, WordDropoutHashEmbed, word_dropout_layer

ATTRS = ["NORM", "PREFIX", "SUFFIX", "LOWER", "SHAPE"]


def features(n_tokens, n_columns=5):
    return numpy.arange(1, n_tokens * n_columns + 1, dtype="uint64").reshape(n_tokens, n_columns)


def test_training_drops_whole_tokens_in_the_word_columns_only():
    layer = word_dropout_layer([0, 3], rate=0.3)
    spacy.util.fix_random_seed(0)
    original = [features(2000), features(0)]
    dropped, backprop = layer.begin_update(original)
    doc = dropped[0]
    hit = doc[:, 0] == UNKNOWN_ID
    assert 0.25 < hit.mean() < 0.35
    numpy.testing.assert_array_equal(hit, doc[:, 3] == UNKNOWN_ID)  # a dropped token loses NORM and LOWER together
    numpy.testing.assert_array_equal(doc[:, [1, 2, 4]], original[0][:, [1, 2, 4]])
    numpy.testing.assert_array_equal(doc[~hit], original[0][~hit])
    assert dropped[1].shape == (0, 5)
    assert original[0].min() > 0  # the input was not changed in place
    assert backprop(["gradient"]) == ["gradient"]
    # every id of the word columns, dropped or not, is now known; the other columns' ids are not
    numpy.testing.assert_array_equal(layer.attrs["known"], numpy.sort(original[0][:, [0, 3]].ravel()))


def test_prediction_maps_words_unseen_in_training_to_the_unknown_id():
    layer = word_dropout_layer([0, 3], rate=0.5)
    layer.initialize()
    seen = features(4)
    layer.begin_update([seen])
    new = seen.copy()
    new[1, 0] = new[2, 3] = 999  # token 1's NORM and token 2's LOWER were never seen
    new[1, 1] = 998  # an unseen prefix stays
    predicted = layer.predict([new, features(0)])
    expected = new.copy()
    expected[1, 0] = expected[2, 3] = UNKNOWN_ID
    numpy.testing.assert_array_equal(predicted[0], expected)
    assert predicted[1].shape == (0, 5)
    layer.initialize()  # a new model forgets what it saw
    assert layer.attrs["known"].size == 0


def test_an_untrained_layer_keeps_every_word():
    original = [features(50)]
    assert word_dropout_layer([0], rate=0.9).predict(original)[0] is original[0]


def test_rate_zero_is_multihashembed_unchanged_in_training_and_prediction():
    layer = word_dropout_layer([0], rate=0.0)
    original = [features(50)]
    assert layer.begin_update(original)[0][0] is original[0]
    assert layer.predict([features(60)])[0][55, 0] == features(60)[55, 0]


def test_registered_embed_differs_from_prediction_only_in_training_and_round_trips():
    make = registry.architectures.get("spacy_fofe.WordDropoutHashEmbed.v1")
    nlp = spacy.blank("de")
    docs = [nlp("Die Stadt Marrowdale liegt am Fluss ."), nlp("")]
    embed = make(width=16, attrs=ATTRS, rows=[100, 50, 50, 100, 50], include_static_vectors=False, word_dropout=0.5)
    embed.initialize(X=docs)
    spacy.util.fix_random_seed(0)
    trained_view, _ = embed.begin_update(docs)
    predicted = embed.predict(docs)
    changed = numpy.abs(trained_view[0] - predicted[0]).sum(axis=1) > 0
    assert 0 < changed.sum() < len(docs[0])
    assert predicted[1].shape == (0, 16)
    numpy.testing.assert_array_equal(embed.predict(docs)[0], predicted[0])
    copy = make(width=16, attrs=ATTRS, rows=[100, 50, 50, 100, 50], include_static_vectors=False)
    copy.from_bytes(embed.to_bytes())
    numpy.testing.assert_array_equal(copy.predict(docs)[0], predicted[0])
    unseen = [nlp("Die Stadt Quillmere liegt am Fluss .")]
    numpy.testing.assert_array_equal(copy.predict(unseen)[0], embed.predict(unseen)[0])
    known = [node for node in copy.walk() if node.name == "word_dropout"][0].attrs["known"]
    numpy.testing.assert_array_equal(known, numpy.unique(docs[0].to_array(["NORM", "LOWER"])))


def test_static_vectors_variant_also_gets_the_dropout_layer():
    embed = WordDropoutHashEmbed(width=8, attrs=["NORM", "SHAPE"], rows=[50, 50], include_static_vectors=True)
    assert [node.name for node in embed.walk()].count("word_dropout") == 1


@pytest.mark.parametrize(
    "attrs, rate, message",
    [
        (["PREFIX", "SHAPE"], 0.2, "none of"),
        (["NORM"], 1.0, r"in \[0, 1\)"),
        (["NORM", "COLOUR"], 0.2, "unknown token"),
    ],
)
def test_bad_settings_are_clear_errors(attrs, rate, message):
    with pytest.raises(ValueError, match=message):
        WordDropoutHashEmbed(width=8, attrs=attrs, rows=[10] * len(attrs), include_static_vectors=False,
                             word_dropout=rate)


def test_known_ids_are_found_as_numpy_isin_finds_them():
    from spacy_fofe.features.word_dropout import _sorted_contains

    rng = numpy.random.default_rng(0)
    known = numpy.union1d(rng.integers(0, 2**64 - 1, size=1000, dtype=numpy.uint64),
                          numpy.asarray([0, 2**64 - 1], dtype=numpy.uint64))
    words = numpy.concatenate([rng.choice(known, size=(50, 3)), numpy.asarray([[0, 2**64 - 1, 5]], dtype=numpy.uint64),
                               rng.integers(0, 2**64 - 1, size=(50, 3), dtype=numpy.uint64)])
    found = _sorted_contains(known, words)
    numpy.testing.assert_array_equal(found, numpy.isin(words, known))
    assert found[:50].all() and found[50].tolist() == [True, True, False] and not found[51:].any()
    assert not _sorted_contains(known[:0], words).any()
