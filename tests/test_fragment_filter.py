"""The fragment filter (spacy_fofe.BoundaryScorer.v1): boundary targets, the filter rule, the
threshold tune picks, training beside the scorer, and its place in predict."""

import numpy
import pytest
import spacy
from spacy.tokens import DocBin
from thinc.api import NumpyOps

from spacy_fofe.ml.boundaries import (
    MARGIN,
    BoundaryScorer,
    logistic_gradient,
    plausible,
    sigmoid,
    span_plausibility,
    targets,
    threshold_for_recall,
)
from spacy_fofe.ml.model import boundary_probabilities, has_fragment_filter
from spacy_fofe.ml.ops import NumpyBlasOps
from spacy_fofe.ml.position_codes import Codes
from spacy_fofe.training.tune import tune_pipeline

from helpers import NESTED, SMALL_MODEL, fragment_scores, make_examples, predicted, train

FILTER = {"@layers": "spacy_fofe.BoundaryScorer.v1", "threshold": 0.3}


def filtered_pipeline(threshold=0.3):
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    model = {**SMALL_MODEL, "fragment_filter": {**FILTER, "threshold": threshold}}
    nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    return nlp


@pytest.fixture(scope="module")
def trained_filtered():
    nlp = filtered_pipeline()
    return train(nlp, make_examples(nlp, NESTED), steps=200)


def test_targets_mark_the_first_and_last_token_of_each_entity_fragment():
    lengths = numpy.asarray([4, 3])
    fragments = numpy.asarray([[0, 0, 2], [0, 1, 4], [1, 1, 2], [1, 0, 3]])
    truth = targets(lengths, fragments, numpy.asarray([True, False, True, True]))
    assert truth[:, 0].tolist() == [1, 0, 0, 0, 1, 1, 0]  # starts: doc 0 token 0; doc 1 tokens 0 and 1
    assert truth[:, 1].tolist() == [0, 1, 0, 0, 0, 1, 1]  # ends: doc 0 token 1; doc 1 tokens 1 and 2


def test_a_fragment_is_kept_when_both_its_ends_reach_the_threshold():
    probs = numpy.asarray([[0.9, 0.1], [0.2, 0.8], [0.6, 0.6], [0.9, 0.9]], dtype="float32")
    fragments = numpy.asarray([[0, 0, 2], [0, 0, 1], [0, 2, 3], [0, 1, 3], [1, 0, 1]])
    lengths = numpy.asarray([3, 1])
    assert plausible(probs, fragments, lengths, 0.5).tolist() == [True, False, True, False, True]
    assert plausible(probs, fragments, lengths, 0.0).all()
    assert span_plausibility(probs, fragments.tolist(), lengths).tolist() == pytest.approx([0.8, 0.1, 0.6, 0.2, 0.9])


@pytest.mark.parametrize("n", [1, 7, 200, 1000, 1001])
def test_the_tuned_threshold_is_the_highest_that_keeps_the_recall(n):
    values = numpy.random.default_rng(n).random(n)
    threshold = threshold_for_recall(values, 0.995)
    assert (values >= threshold).mean() >= 0.995 and (values >= threshold / (1 - MARGIN)).mean() >= 0.995
    above = values[values > threshold / (1 - MARGIN)]
    if len(above):  # the next higher threshold would lose too many
        assert (values >= above.min()).mean() < 0.995
    assert threshold_for_recall(numpy.zeros(0)) == 0.0


def test_the_logistic_gradient_matches_the_loss_numerically():
    scorer = BoundaryScorer()
    scorer.ops = NumpyBlasOps()  # numpy's gemm takes the float64 arrays of a numerical check
    scorer.set_dim("nI", 3)
    scorer.initialize()
    rng = numpy.random.default_rng(0)
    lengths = numpy.asarray([3, 2])
    arrays = {name: rng.normal(size=(5, 3)).astype("float64") for name in ("left_excl", "tokens", "right_excl")}
    scorer.set_param("W", scorer.get_param("W").astype("float64"))
    scorer.set_param("b", scorer.get_param("b").astype("float64"))
    truth = (rng.random((5, 2)) > 0.5).astype("float64")

    def loss(tokens):
        logits, _ = scorer(Codes(lengths, {**arrays, "tokens": tokens}), False)
        p = 1 / (1 + numpy.exp(-logits))
        return -(truth * numpy.log(p) + (1 - truth) * numpy.log(1 - p)).sum() / len(truth)

    logits, backprop = scorer(Codes(lengths, arrays), True)
    d_tokens = backprop(logistic_gradient(scorer, logits, truth))["tokens"]
    eps, numeric = 1e-6, numpy.zeros_like(arrays["tokens"])
    for index in numpy.ndindex(*numeric.shape):
        plus, minus = arrays["tokens"].copy(), arrays["tokens"].copy()
        plus[index] += eps
        minus[index] -= eps
        numeric[index] = (loss(plus) - loss(minus)) / (2 * eps)
    numpy.testing.assert_allclose(d_tokens, numeric, rtol=1e-4, atol=1e-7)


def test_invalid_filter_settings_are_rejected():
    with pytest.raises(ValueError, match="threshold"):
        BoundaryScorer(threshold=1.0)
    with pytest.raises(ValueError, match="threshold"):
        BoundaryScorer(threshold=-0.1)


def test_trained_with_the_scorer_it_finds_the_boundaries_and_the_spans(trained_filtered):
    nlp = trained_filtered
    ner = nlp.get_pipe("fofe_ner")
    assert has_fragment_filter(ner.model)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    docs = [nlp.make_doc(text) for text, _ in NESTED]
    probs = boundary_probabilities(ner.model, docs)
    truth = targets(numpy.asarray([len(d) for d in docs]),
                    numpy.asarray([(i, s, e) for i, (_, spans) in enumerate(NESTED) for s, e, _ in spans]),
                    numpy.ones(sum(len(spans) for _, spans in NESTED), dtype=bool))
    assert (probs[truth == 1] > 0.5).all() and (probs[truth == 0] < 0.5).all()


def test_dropped_fragments_get_none_and_the_kept_ones_their_scores(trained_filtered):
    ner = trained_filtered.get_pipe("fofe_ner")
    scorer = ner.model.get_ref("fragment_filter")
    scorer.attrs["threshold"] = 0.0
    fragments, unfiltered = ner.predict([trained_filtered.make_doc(text) for text, _ in NESTED])
    scorer.attrs["threshold"] = 0.5
    try:
        _, filtered = ner.predict([trained_filtered.make_doc(text) for text, _ in NESTED])
    finally:
        scorer.attrs["threshold"] = 0.3
    dropped = filtered[:, 0] == 1.0
    assert 0 < dropped.sum() < len(fragments)
    assert (filtered[dropped, 1:] == 0).all()
    numpy.testing.assert_allclose(filtered[~dropped], unfiltered[~dropped], rtol=1e-5)


def test_the_filter_and_its_threshold_round_trip(trained_filtered, tmp_path):
    trained_filtered.to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp")
    assert loaded.get_pipe("fofe_ner").model.get_ref("fragment_filter").attrs["threshold"] == 0.3
    # rtol 1e-5: the trained pipeline's kept rows were embedded in other batches (float rounding)
    numpy.testing.assert_allclose(fragment_scores(loaded), fragment_scores(trained_filtered), rtol=1e-5)


def test_tune_sets_the_threshold_that_keeps_the_dev_spans(trained_filtered, tmp_path):
    trained_filtered.to_disk(tmp_path / "model")
    dev = DocBin(docs=[eg.reference for eg in make_examples(trained_filtered, NESTED)])
    dev.to_disk(tmp_path / "dev.spacy")
    figures = tune_pipeline(tmp_path / "model", tmp_path / "dev.spacy", tmp_path / "tuned", log=lambda line: None)
    assert figures["filter_recall_0"] >= 0.995 and figures["filter_fragments_0"] < 0.5
    tuned = spacy.load(tmp_path / "tuned")
    threshold = tuned.get_pipe("fofe_ner").model.get_ref("fragment_filter").attrs["threshold"]
    assert threshold == pytest.approx(figures["filter_threshold_0"]) and threshold > 0.3
    for text, spans in NESTED:
        assert predicted(tuned(text)) == sorted(spans), text


def test_numpy_ops_run_the_filter_too(trained_filtered):
    ner = trained_filtered.get_pipe("fofe_ner")
    docs = [trained_filtered.make_doc(text) for text, _ in NESTED]
    before = ner.predict(docs)[1]
    for node in ner.model.walk():
        node.ops = NumpyOps()
    numpy.testing.assert_allclose(ner.predict(docs)[1], before, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("share", [0.1, 0.5, 1.0])
def test_cells_read_one_by_one_equal_the_grid(trained_filtered, monkeypatch, share):
    """Inference on a few fragments reads their cells without the grid: the same probabilities."""
    from spacy_fofe.ml import projection

    ner = trained_filtered.get_pipe("fofe_ner")
    scorer = ner.model.get_ref("fragment_filter")
    docs = [trained_filtered.make_doc(text) for text, _ in NESTED]
    fragments = ner._fragments(docs)
    some = fragments[numpy.random.default_rng(0).random(len(fragments)) < share]
    results = []
    for sparse_share in (10**9, 0):  # the grid, then one by one
        monkeypatch.setattr(projection, "SPARSE_SHARE", sparse_share)
        monkeypatch.setitem(scorer.attrs, "threshold", 0.0)
        results.append(ner.model.predict((docs, some)))
    numpy.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_probabilities_of_extreme_logits_are_exact_and_warn_nothing():
    import warnings

    logits = numpy.asarray([[-500.0, 500.0], [0.0, -90.0]], dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        probs = sigmoid(NumpyOps(), logits)
    numpy.testing.assert_allclose(probs, [[0.0, 1.0], [0.5, 0.0]], atol=1e-7)


def test_the_filter_needs_word_codes_and_reads_those_there_are():
    from spacy_fofe.ml.model import build_fofe_ner_model_v2

    tok2vec = spacy.blank("en").add_pipe("tok2vec").model
    with pytest.raises(ValueError, match="fragment filter reads the word codes"):
        build_fofe_ner_model_v2(tok2vec, left_context=False, right_context=False, bag_of_words=False,
                                fragment_filter=BoundaryScorer())
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    embed = {"@architectures": "spacy.MultiHashEmbed.v2", "width": 32, "rows": [500, 200, 200, 200],
             "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"], "include_static_vectors": False}
    model = {"@architectures": "spacy_fofe.FOFENER.v2", "hidden_width": 64, "dropout": 0.0, "tok2vec": embed,
             "left_context": False, "fragment_filter": FILTER}
    nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=200)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
