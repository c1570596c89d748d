"""spacy_fofe.DocumentMemory.v1: each token's vector followed by a projection of the mean context
of its word's other occurrences in the doc."""

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from spacy.util import registry

from spacy_fofe.features.document_memory import DocumentMemory

from helpers import NESTED, WORD_DROPOUT_EMBED, make_examples, overfit_with_tok2vec, predicted
from test_model import table_tok2vec

WORDS = ["Lebed", "met", "Yeltsin", ".", "General", "Lebed", "said", "lebed", "won", ".", "Yeltsin"]
SENT_STARTS = [True, False, False, False, True, False, False, False, False, False, True]


def story(vocab):
    return Doc(vocab, words=WORDS, spaces=[True] * len(WORDS), sent_starts=SENT_STARTS)


def naive_memory_features(X, words, sent_starts, window):
    """The memory's input by its definition: per token, the mean over the doc's other tokens of the
    same lower-cased word of [mean of the `window` vectors before, mean of those after] in the
    sentence, then log(occurrences)."""
    sentence = numpy.cumsum(sent_starts)
    n, width = X.shape
    contexts = numpy.zeros((n, 2 * width))
    for i in range(n):
        for k in range(1, window + 1):
            if i - k >= 0 and sentence[i - k] == sentence[i]:
                contexts[i, :width] += X[i - k] / window
            if i + k < n and sentence[i + k] == sentence[i]:
                contexts[i, width:] += X[i + k] / window
    features = numpy.zeros((n, 2 * width + 1))
    for i in range(n):
        others = [j for j in range(n) if j != i and words[j].lower() == words[i].lower()]
        if others:
            features[i, :-1] = contexts[others].mean(axis=0)
        features[i, -1] = numpy.log(len(others) + 1)
    return features


@pytest.mark.parametrize("window", [1, 2, 5])
def test_memory_is_the_mean_context_of_the_other_occurrences(window):
    vocab = spacy.blank("en").vocab
    docs = [story(vocab), Doc(vocab, words=["Lebed"]), Doc(vocab, words=[])]
    layer = DocumentMemory(table_tok2vec(6, 20), width=5, window=window)
    layer.initialize(X=docs)
    W = numpy.random.default_rng(2).normal(size=layer.get_param("W").shape).astype("float32")
    layer.set_param("W", W)
    layer.set_param("b", numpy.arange(5, dtype="float32"))
    outputs = layer.predict(docs)
    table = layer.layers[0].get_param("T")
    assert [output.shape for output in outputs] == [(11, 11), (1, 11), (0, 11)]
    X = table[:11]
    expected = naive_memory_features(X, WORDS, SENT_STARTS, window) @ W + numpy.arange(5)
    numpy.testing.assert_allclose(outputs[0][:, :6], X)
    numpy.testing.assert_allclose(outputs[0][:, 6:], expected, rtol=1e-4, atol=1e-5)
    # "Lebed" in the second doc is alone there: the first doc's occurrences do not reach it
    numpy.testing.assert_allclose(outputs[1][0], numpy.concatenate([table[11], numpy.arange(5)]))
    # "met" occurs once: its memory is the bias alone
    numpy.testing.assert_allclose(outputs[0][1, 6:], numpy.arange(5))


def test_a_doc_s_memory_does_not_depend_on_its_batch():
    vocab = spacy.blank("en").vocab
    hash_embed = registry.resolve({"embed": {**WORD_DROPOUT_EMBED, "word_dropout": 0.0}})["embed"]
    layer = DocumentMemory(hash_embed, width=4)
    layer.initialize(X=[story(vocab)])
    alone = layer.predict([story(vocab)])[0]
    batched = layer.predict([Doc(vocab, words=["Yeltsin", "said", "Lebed"]), story(vocab)])[1]
    numpy.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-6)


def test_gradients_match_finite_differences():
    vocab = spacy.blank("en").vocab
    docs = [story(vocab), Doc(vocab, words=["Lebed", "Lebed"])]
    spacy.util.fix_random_seed(0)
    layer = DocumentMemory(table_tok2vec(3, 16), width=2, window=2)
    layer.initialize(X=docs)
    tok2vec = layer.layers[0]
    weights = [numpy.random.default_rng(i).normal(size=(len(doc), 5)) for i, doc in enumerate(docs)]

    def loss():
        return sum(float((output.astype("float64") * w).sum()) for output, w in zip(layer.predict(docs), weights))

    _, backprop = layer.begin_update(docs)
    backprop([w.astype("float32") for w in weights])
    for owner, name in ((tok2vec, "T"), (layer, "W"), (layer, "b")):
        param, grad = owner.get_param(name), owner.get_grad(name)
        assert numpy.abs(grad).max() > 1e-2, name
        for flat in range(min(param.size, 48)):
            index = numpy.unravel_index(flat, param.shape)
            saved = param[index]
            values = []
            for step in (1e-2, -1e-2):
                param[index] = saved + step
                values.append(loss())
            param[index] = saved
            numeric = (values[0] - values[1]) / 2e-2
            assert abs(numeric - float(grad[index])) <= 2e-3 + 1e-2 * abs(numeric), (name, index)


def test_a_pipeline_with_document_memory_overfits_round_trips_and_reads_long_docs_in_windows(tmp_path, monkeypatch):
    from spacy_fofe.pipeline import component

    nlp = spacy.blank("en")
    tok2vec = {"@layers": "spacy_fofe.DocumentMemory.v1", "width": 16, "tok2vec": WORD_DROPOUT_EMBED}
    overfit_with_tok2vec(nlp, tok2vec)
    nlp.to_disk(tmp_path / "pipeline")
    copy = spacy.load(tmp_path / "pipeline")
    for example in make_examples(nlp, NESTED):
        assert predicted(copy(example.text)) == predicted(nlp(example.text))
    # A doc longer than a window: each window's memory is that of its own tokens and margins,
    # as if that stretch were a doc of its own.
    ner = nlp.get_pipe("fofe_ner")
    doc = nlp.make_doc(" ".join(text for text, _ in NESTED * 30))
    fragments, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    _, windowed = ner.predict([doc])
    assert numpy.abs(windowed - whole).max() > 1e-4
    rows = fragments[:, 1] < 300
    _, alone = ner.predict([doc[:ner._window_margin() + 300].as_doc()])
    numpy.testing.assert_allclose(windowed[rows], alone[:rows.sum()], atol=1e-5)


@pytest.mark.parametrize("settings", [{"width": 0}, {"window": 0}, {"attr": "COLOUR"}])
def test_bad_settings_are_clear_errors(settings):
    with pytest.raises(ValueError, match="DocumentMemory"):
        DocumentMemory(table_tok2vec(3, 4), **settings)


def test_word_groups_are_the_same_word_in_the_same_doc():
    from spacy.attrs import LOWER

    from spacy_fofe.features.document_memory import _word_groups

    vocab = spacy.blank("en").vocab
    texts = [["Lebed", "said", "LEBED", "said"], [], ["said", "Lebed"], ["x"], ["x", "X"]]
    groups, counts = _word_groups([Doc(vocab, words=words) for words in texts], LOWER)
    flat = [(i, word.lower()) for i, words in enumerate(texts) for word in words]
    assert [[groups[a] == groups[b] for b in range(len(flat))] for a in range(len(flat))] == \
        [[flat[a] == flat[b] for b in range(len(flat))] for a in range(len(flat))]
    assert [counts[g] for g in groups] == [flat.count(pair) for pair in flat]
    assert sorted(set(groups.tolist())) == list(range(len(counts))) and groups[4] > groups[3]  # by doc first
