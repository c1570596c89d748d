"""Second-pass augmentation: the decisions it reads, its gradients, and a pipeline that uses it."""

import numpy
import pytest
import spacy

from spacy_fofe.fragments import enumerate_fragments
from spacy_fofe.model import build_fofe_ner_model
from spacy_fofe.projection import columns
from spacy_fofe.second_pass import token_decisions

from helpers import NESTED, SMALL_MODEL, make_examples, predicted, train
from test_model import randomize_output, table_tok2vec


def test_token_decisions_are_the_best_probability_of_a_covering_fragment():
    rng = numpy.random.default_rng(0)
    lengths = [4, 1, 6]
    fragments = enumerate_fragments(lengths, 3)
    probs = rng.random((len(fragments), 4)).astype("float32")
    offsets = numpy.cumsum(lengths) - numpy.asarray(lengths)
    starts = offsets[fragments[:, 0]] + fragments[:, 1]
    got = token_decisions(probs, starts, fragments[:, 2] - fragments[:, 1], sum(lengths))
    for token in range(sum(lengths)):
        covering = [i for i, (s, size) in enumerate(zip(starts, fragments[:, 2] - fragments[:, 1]))
                    if s <= token < s + size]
        numpy.testing.assert_array_equal(got[token], probs[covering, 1:].max(axis=0))


def two_pass_model(docs, fragments):
    spacy.util.fix_random_seed(0)
    model = build_fofe_ner_model(table_tok2vec(6, 12), hidden_width=8, depth=2, dropout=0.0, word_alpha=0.6,
                                 char_alpha=0.7, char_width=4, n_char_buckets=64, nO=3, second_pass=True)
    model.initialize(X=(docs, fragments))
    randomize_output(model)
    output2 = model.get_ref("output2")
    output2.set_param("W", numpy.random.default_rng(4).normal(size=output2.get_param("W").shape).astype("float32"))
    return model


def check_gradient(param, grad, loss, size=1e-3):
    assert numpy.abs(grad).max() > 1e-3, "a zero gradient would make the check vacuous"
    errors = []
    for flat in range(min(param.size, 72)):
        index = numpy.unravel_index(flat, param.shape)
        saved, values = param[index], []
        for step in (size, -size):
            param[index] = saved + step
            values.append(loss())
        param[index] = saved
        numeric = (values[0] - values[1]) / (2 * size)
        if abs(numeric) > 1e-3:
            errors.append(abs(numeric - float(grad[index])) / abs(numeric))
    assert len(errors) >= min(5, param.size) and numpy.mean(numpy.asarray(errors) < 1e-2) >= 0.8, sorted(errors)


@pytest.mark.parametrize("which", ["first", "second"])
def test_each_pass_gets_the_gradient_of_its_own_loss(which):
    nlp = spacy.blank("en")
    docs = [nlp("Ann met Bob in Rome ."), nlp("Hi"), nlp("New York , USA")]
    fragments = enumerate_fragments([len(d) for d in docs], 3)
    model = two_pass_model(docs, fragments)
    targets = numpy.random.default_rng(1).integers(0, 3, size=len(fragments))
    rows = numpy.arange(len(fragments))
    scores, backprop = model.begin_update((docs, fragments))
    assert scores.shape == (2 * len(fragments), 3)
    numpy.testing.assert_allclose(scores[:len(fragments)], model.predict((docs, fragments)), atol=1e-6)
    d_scores = numpy.zeros_like(scores)
    part = slice(0, len(fragments)) if which == "second" else slice(len(fragments), None)
    d_scores[part] = scores[part]
    d_scores[part][rows, targets] -= 1.0
    backprop(d_scores)

    def first_pass_scores():
        codes = model.get_ref("codes").predict(docs)
        return model.layers[1].predict((codes, fragments))

    def loss():
        probs = model.predict((docs, fragments)) if which == "second" else first_pass_scores()
        return float(-numpy.log(probs[rows, targets]).astype("float64").sum())

    numpy.testing.assert_allclose(scores[len(fragments):], first_pass_scores(), atol=1e-6)
    if which == "second":  # its own layers (a change of the shared ones also moves the decisions)
        owners = [model.get_ref("projection2"), model.get_ref("output2")]
    else:
        owners = [model.get_ref("tok2vec"), model.get_ref("projection"), model.get_ref("char_codes")]
    for owner in owners:
        for name in owner.param_names:
            check_gradient(owner.get_param(name), owner.get_grad(name), loss)
    if which == "first":  # the second pass's layers get nothing from the first pass's loss
        assert not model.get_ref("projection2").get_grad("W").any()


def test_a_two_pass_pipeline_overfits_reads_the_decisions_saves_and_scores_in_windows(tmp_path, monkeypatch):
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    config = {"model": {**SMALL_MODEL, "second_pass": True}, "overlap_rate": 1.0, "disjoint_rate": 1.0}
    ner = nlp.add_pipe("fofe_ner", config=config)
    train(nlp, make_examples(nlp, NESTED), steps=150)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    docs = [nlp.make_doc(text) for text, _ in NESTED]
    _, scores = ner.predict(docs)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline").get_pipe("fofe_ner")
    numpy.testing.assert_allclose(loaded.predict(docs)[1], scores, atol=1e-6)
    # The second scorer reads the decisions: without their columns its scores change.
    projection2 = loaded.model.get_ref("projection2")
    for block in ("decision_left", "decision_right", "decision_tokens"):
        projection2.get_param("W")[:, columns(projection2)[block]] = 0.0
    assert numpy.abs(loaded.predict(docs)[1] - scores).max() > 1e-3
    # A long doc scored in windows gets the whole doc's scores: the margin covers both passes.
    from spacy_fofe import component

    doc = nlp.make_doc(" ".join(text for text, _ in NESTED * 60))
    _, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 400)
    assert len(doc) > 3 * 400 and ner._window_margin() < 400
    numpy.testing.assert_allclose(ner.predict([doc])[1], whole, atol=1e-5)
