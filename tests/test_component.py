"""The fofe_ner component through spaCy's public entry points."""

import pickle
import subprocess
import sys
import warnings

import numpy
import pytest
import spacy
from spacy.tokens import Doc, Span
from spacy.training import Example

from spacy_fofe.cli.error_analysis import gold_fates

from helpers import (
    LISTENER_PIPELINE,
    NESTED,
    SMALL_MODEL,
    WORD_DROPOUT_EMBED,
    make_examples,
    outer_level,
    overfit_with_consistency,
    overfit_with_tok2vec,
    predicted,
    train,
)


def test_add_pipe_works_without_importing_the_package():
    code = "import spacy; nlp = spacy.blank('en'); print(type(nlp.add_pipe('fofe_ner')).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "FOFENER"


def test_overfits_a_small_nested_corpus(trained):
    assert trained.get_pipe("fofe_ner").cfg["nested"] is True
    for text, spans in NESTED:
        doc = trained(text)
        assert predicted(doc) == sorted(spans), text
        assert sorted((e.start, e.end, e.label_) for e in doc.ents) == sorted(outer_level(spans))
        assert len(doc.spans["sc"].attrs["scores"]) == len(spans)


def test_factory_defaults_find_every_outer_and_inner_span():
    # Inner spans (Toronto, Paris) are learnt with more confidence than the ORGs around them;
    # the default decoding must keep both levels without any setting or tuning.
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner")
    train(nlp, make_examples(nlp, NESTED), steps=150)
    assert ner.cfg["nested"] is True and ner.cfg["decoding"] == "nesting-aware"
    for text, spans in NESTED:
        doc = nlp(text)
        assert predicted(doc) == sorted(spans), text
        depths = {(s.start, s.end): d for s, d in zip(doc.spans["sc"], doc.spans["sc"].attrs["depths"])}
        assert depths == {(s, e): int((s, e, label) not in outer_level(spans)) for s, e, label in spans}


def test_evaluate_reports_span_scores_under_the_key(trained):
    scores = trained.evaluate(make_examples(trained, NESTED))
    assert scores["spans_sc_f"] == 1.0
    assert set(scores["spans_sc_per_type"]) == {"ORG", "LOC", "PER"}


def test_serialization_round_trips_give_the_same_predictions(trained, tmp_path):
    texts = [text for text, _ in NESTED]
    ner = trained.get_pipe("fofe_ner")
    before = [ner.predict([trained.make_doc(t)])[1] for t in texts]
    trained.to_disk(tmp_path / "pipeline")
    for nlp2 in (spacy.load(tmp_path / "pipeline"), spacy.blank("en").from_config(trained.config)):
        if nlp2.get_pipe("fofe_ner").labels == ():
            nlp2.from_bytes(trained.to_bytes())
        ner2 = nlp2.get_pipe("fofe_ner")
        assert ner2.cfg == ner.cfg
        for text, scores in zip(texts, before):
            # the same up to the rounding of rows `trained` kept from other batches (embed_rows_once)
            numpy.testing.assert_allclose(ner2.predict([nlp2.make_doc(text)])[1], scores, rtol=1e-5, atol=1e-7)
            assert predicted(nlp2(text)) == predicted(trained(text))


UNUSUAL = ["", "   ", "\n\n\n", "a", "Toronto", "Ann Lee .", "🙂\u200d👍 e\u0301 שלום 北京大学 \x07"]


@pytest.mark.parametrize("text", UNUSUAL)
def test_unusual_docs_get_an_empty_or_valid_span_group(trained, text):
    doc = trained(text)
    assert "sc" in doc.spans
    assert all(0 <= s.start < s.end <= len(doc) for s in doc.spans["sc"])


def test_very_long_doc_and_long_token(trained):
    doc = trained(" ".join(["Ann Lee lives in Toronto ."] * 3334))  # 20,004 tokens
    assert len(doc) == 20004
    assert sum(1 for s in doc.spans["sc"] if s.label_ == "PER") >= 3000
    doc = trained("x" * 10000 + " Toronto")
    assert len(doc) == 2 and "sc" in doc.spans


def test_no_span_starts_or_ends_on_a_whitespace_token(trained):
    ner = trained.get_pipe("fofe_ner")
    doc = trained.make_doc("Ann   Lee \n\n lives in  Toronto .")
    assert [t.i for t in doc if t.is_space] == [1, 3, 6]
    ner.cfg["threshold"] = 0.0  # every fragment is a candidate unless its edges rule it out
    try:
        spans = [(c.start, c.end) for c in ner.candidates([doc], *ner.predict([doc]), ner.levels())[0]]
    finally:
        ner.cfg["threshold"] = 0.5
    n = ner.cfg["max_length"]
    allowed = [(s, e) for s in range(len(doc)) for e in range(s + 1, min(s + n, len(doc)) + 1)
               if not doc[s].is_space and not doc[e - 1].is_space]
    assert sorted(spans) == allowed  # inner whitespace is fine ("Ann   Lee")
    assert all(not s[0].is_space and not s[-1].is_space for s in trained(doc).spans["sc"])


def test_a_pickled_pipeline_predicts_the_same(trained):
    texts = [text for text, _ in NESTED]
    copy = pickle.loads(pickle.dumps(trained))  # what nlp.pipe(n_process=...) does with spawned processes
    for text in texts:
        assert predicted(copy(text)) == predicted(trained(text))
        numpy.testing.assert_allclose(copy(text).spans["sc"].attrs["scores"], trained(text).spans["sc"].attrs["scores"])


def test_long_docs_are_scored_in_windows_with_the_scores_of_the_whole_doc(trained, monkeypatch):
    from spacy_fofe.pipeline import component

    ner = trained.get_pipe("fofe_ner")
    doc = trained.make_doc(" ".join(text for text, _ in NESTED * 40))
    short = trained.make_doc(NESTED[0][0])
    _, whole = ner.predict([short, doc])
    spans_whole = predicted(trained(doc.copy()))
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    assert len(doc) > 4 * 300 and ner._window_margin() < 300
    fragments, windowed = ner.predict([short, doc, trained.make_doc("")])
    numpy.testing.assert_allclose(windowed, whole, atol=1e-5)
    assert len(fragments) == len(whole)
    assert predicted(trained(doc.copy())) == spans_whole


def test_a_cpu_scores_a_batch_in_runs_of_docs_with_the_scores_of_one_pass(trained, monkeypatch):
    from thinc.api import NumpyOps

    from spacy_fofe.pipeline import component

    ner = trained.get_pipe("fofe_ner")
    docs = [trained.make_doc(text) for text, _ in NESTED * 5] + [trained.make_doc(""), trained.make_doc("Ann")]
    assert ner._runs(docs) == [0, len(docs)]  # under CPU_RUN_TOKENS: one pass
    fragments, whole = ner.predict(docs)
    monkeypatch.setattr(component, "CPU_RUN_TOKENS", 10)
    runs = ner._runs(docs)
    lengths = [len(doc) for doc in docs]
    assert runs[0] == 0 and runs[-1] == len(docs) and len(runs) > 5
    # Each run starts where the tokens before it pass a multiple of CPU_RUN_TOKENS.
    assert all(sum(lengths[:a]) // 10 < sum(lengths[:b]) // 10 for a, b in zip(runs[:-2], runs[1:-1]))
    assert all(sum(lengths[a:b]) < 10 + max(lengths[a:b]) for a, b in zip(runs, runs[1:]))
    in_runs, scores = ner.predict(docs)
    numpy.testing.assert_array_equal(in_runs, fragments)
    numpy.testing.assert_allclose(scores, whole, atol=1e-5)
    # On a GPU, where each array call is a kernel launch, the batch is one pass.
    monkeypatch.setattr(ner.model, "ops", NumpyOps(device_type="gpu"))
    assert ner._runs(docs) == [0, len(docs)]


def test_pipe_with_two_processes_and_mixed_batches(trained):
    texts = ["", "Ann Lee lives in Toronto .", " ", "Bob visited Paris and Toronto ."] * 3
    single = [predicted(d) for d in trained.pipe(texts, batch_size=1)]
    assert [predicted(d) for d in trained.pipe(texts, batch_size=1000)] == single
    assert [predicted(d) for d in trained.pipe(texts, batch_size=2, n_process=2)] == single


def test_settings_changed_after_training_take_effect(trained):
    ner = trained.get_pipe("fofe_ner")
    text = NESTED[0][0]
    try:
        ner.cfg["nested"] = False
        # Flat nesting-aware decoding is highest-first: the surer inner LOC wins the outer slot ...
        assert predicted(trained(text)) == [(3, 4, "LOC"), (5, 7, "PER")]
        ner.cfg["decoding"] = "longest-first"  # ... and longest-first keeps the ORG.
        assert predicted(trained(text)) == [(1, 4, "ORG"), (5, 7, "PER")]
        per_score = trained(text).spans["sc"].attrs["scores"][-1]
        assert per_score < 1.0
        ner.cfg["label_thresholds"] = {"PER": (per_score + 1.0) / 2}
        assert predicted(trained(text)) == [(1, 4, "ORG")]
        ner.cfg["spans_key"] = "entities"
        assert predicted(trained(text), "entities") == [(1, 4, "ORG")]
    finally:
        ner.cfg.update({"nested": True, "decoding": "nesting-aware", "label_thresholds": {}, "spans_key": "sc"})


def test_existing_entities_are_kept_or_overwritten_as_configured(trained):
    ner = trained.get_pipe("fofe_ner")
    doc = trained.make_doc("Ann Lee lives in Toronto .")
    doc.ents = [Span(doc, 1, 3, label="OTHER")]  # overlaps our PER (0, 2)
    try:
        ner.cfg["ents"] = "keep"
        kept = ner(doc)
        assert [(e.start, e.end, e.label_) for e in kept.ents] == [(1, 3, "OTHER"), (4, 5, "LOC")]
        ner.cfg["ents"] = "overwrite"
        assert [(e.start, e.end, e.label_) for e in ner(doc).ents] == [(0, 2, "PER"), (4, 5, "LOC")]
    finally:
        ner.cfg["ents"] = "overwrite"


def test_use_before_initialize_says_how_to_fix_it():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner")
    with pytest.raises(ValueError, match="not initialized.*nlp.initialize"):
        nlp("Ann lives in Toronto .")


def test_no_labels_in_the_data_is_a_clear_error():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    with pytest.raises(ValueError, match="no labels"):
        nlp.initialize(lambda: make_examples(nlp, [("Nothing here .", [])]))


@pytest.mark.parametrize("setting,value", [("max_length", 0), ("threshold", 1.5), ("overlap_rate", -0.1),
                                           ("disjoint_rate", 2), ("decoding", "best"), ("ents", "maybe"),
                                           ("max_depth", 0), ("nested_threshold", -1),
                                           ("learn_rate_scale", 0), ("learn_rate_scale", float("inf")),
                                           ("consistency", -0.5), ("consistency", True)])
def test_invalid_settings_are_rejected_with_their_name(setting, value):
    with pytest.raises(ValueError, match=setting):
        spacy.blank("en").add_pipe("fofe_ner", config={setting: value})


def sgd_step_after_one(**cfg):
    """Each weight's change in a plain SGD step on NESTED, taken after one step (the output layer
    starts at zero, so only then has every layer a gradient) and after setting `cfg`."""
    from thinc.api import SGD

    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    examples = make_examples(nlp, NESTED)
    nlp.initialize(lambda: examples)
    sgd = SGD(0.01, L2=0.0, grad_clip=0.0)
    nlp.update(examples, sgd=sgd)
    ner = nlp.get_pipe("fofe_ner")
    ner.cfg.update(cfg)
    params = [(i, node, name) for i, node in enumerate(ner.model.walk()) for name in node.param_names]
    before = {(i, name): node.get_param(name).copy() for i, node, name in params}
    spacy.util.fix_random_seed(1)  # the same NONE fragments sampled for every cfg
    nlp.update(examples, sgd=sgd)
    return {(i, name): node.get_param(name) - before[(i, name)] for i, node, name in params}


def assert_steps_scaled(base, changed, factor):
    moved = [key for key, change in base.items() if numpy.abs(change).max() > 0]
    assert len(moved) >= 6  # the embeddings, the character table, the projection, hidden and output layers
    for key in moved:
        numpy.testing.assert_allclose(changed[key], factor * base[key], rtol=1e-3, atol=1e-6)  # float32 rounding


@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_learn_rate_scale_multiplies_every_weight_step(scale):
    """A plain SGD update moves every weight by learn_rate_scale times its step at scale 1."""
    assert_steps_scaled(sgd_step_after_one(), sgd_step_after_one(learn_rate_scale=scale), scale)


def test_consistency_adds_the_other_pass_as_a_target_to_each_pass():
    """R-Drop on a hand-made table: pass 1 gets (p1 - truth) + w (p1 - p2), pass 2 (p2 - truth) + w (p2 - p1)."""
    from thinc.api import Model

    from spacy_fofe.pipeline.component import FOFENER

    p1, p2 = numpy.array([[0.7, 0.3]], dtype="f"), numpy.array([[0.4, 0.6]], dtype="f")
    truth = numpy.array([[1.0, 0.0]], dtype="f")
    got = {}

    def forward(model, inputs, is_train):
        return p2, lambda d: got.setdefault("d2", d)

    ner = FOFENER(spacy.blank("en").vocab, Model("rerun_stub", forward), consistency=1.0)
    loss = ner._update_consistent([], numpy.zeros((1, 3), dtype="i"), p1, lambda d: got.setdefault("d1", d), truth)
    numpy.testing.assert_allclose(got["d1"], [[0.0, 0.0]], atol=1e-6)
    numpy.testing.assert_allclose(got["d2"], [[-0.9, 0.9]], atol=1e-6)
    kl = (0.3 * numpy.log(0.7 / 0.4) - 0.3 * numpy.log(0.3 / 0.6))
    assert loss == pytest.approx((-numpy.log(0.7) - numpy.log(0.4)) / 2 + kl / 2, rel=1e-5)


def test_consistency_without_dropout_doubles_the_plain_step():
    """Two passes without dropout are the same, so the consistency term is zero and each pass adds
    the plain gradient: one SGD step moves every weight twice as far."""
    assert_steps_scaled(sgd_step_after_one(), sgd_step_after_one(consistency=1.0), 2.0)


def test_overfits_with_consistency_and_dropout():
    overfit_with_consistency()


def test_editing_cfg_checks_the_new_value_and_keeps_the_old_one(trained):
    import pickle

    ner = trained.get_pipe("fofe_ner")
    with pytest.raises(ValueError, match="invalid setting threshold=1.5"):
        ner.cfg["threshold"] = 1.5
    with pytest.raises(ValueError, match="invalid setting decoding='best'"):
        ner.cfg.update({"threshold": 0.4, "decoding": "best"})
    with pytest.raises(ValueError, match="unknown settings \\['treshold'\\]"):
        ner.cfg["treshold"] = 0.4
    with pytest.raises(ValueError, match="label_thresholds"):
        ner.cfg["label_thresholds"] = {"PER": -1}
    assert ner.cfg["threshold"] == 0.5 and ner.cfg["decoding"] == "nesting-aware" and "treshold" not in ner.cfg
    copy = pickle.loads(pickle.dumps(ner.cfg))
    assert copy == ner.cfg
    with pytest.raises(ValueError, match="max_depth"):
        copy["max_depth"] = 0


def test_initialize_warns_about_gold_it_cannot_learn():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL, "max_length": 2})
    data = [("a b c d e", [(0, 3, "X"), (2, 4, "Y"), (2, 4, "Y")]), ("f g", [(0, 1, "X")]), ("h  i", [(0, 2, "X")])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp.initialize(lambda: make_examples(nlp, data))
    messages = " ".join(str(w.message) for w in caught)
    assert "1 gold spans are longer than max_length=2" in messages and "X: 1" in messages
    assert "cross each other" in messages and "duplicates" in messages
    assert "1 gold spans start or end on a whitespace token" in messages


def test_unknown_label_at_update_is_warned_and_left_out():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    optimizer = nlp.initialize(lambda: make_examples(nlp, NESTED[:2]))
    with pytest.warns(UserWarning, match="'MISC' is not among"):
        nlp.update(make_examples(nlp, [("Ann saw Mars .", [(2, 3, "MISC")])]), sgd=optimizer)


def test_gold_from_doc_ents_when_the_key_is_absent():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL, "spans_key": "mine"})
    examples = []
    for text, spans in NESTED[1:2] + NESTED[3:]:
        reference = nlp.make_doc(text)
        reference.ents = [Span(reference, s, e, label=label) for s, e, label in spans]
        examples.append(Example(nlp.make_doc(text), reference))
    with pytest.warns(UserWarning, match="set spans_mine_f = 1.0"):
        nlp.initialize(lambda: examples)
    assert nlp.get_pipe("fofe_ner").labels == ("LOC", "PER")


def test_score_weights_for_another_spans_key_are_set_in_the_config():
    config = spacy.util.load_config_from_str("""
[nlp]
lang = "en"
pipeline = ["fofe_ner"]

[components]

[components.fofe_ner]
factory = "fofe_ner"
spans_key = "mine"

[training]

[training.score_weights]
spans_mine_f = 1.0
spans_sc_f = null
""")
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nlp.initialize(lambda: make_examples(nlp, NESTED, key="mine"))
    weights = nlp.config["training"]["score_weights"]
    assert weights["spans_mine_f"] == 1.0 and not weights.get("spans_sc_f")


def test_diverged_training_is_reported():
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    examples = make_examples(nlp, NESTED)
    optimizer = nlp.initialize(lambda: examples)
    ner.model.get_ref("output").get_param("W")[:] = numpy.nan
    with pytest.raises(ValueError, match="not finite"):
        nlp.update(examples, sgd=optimizer)


def test_trains_through_a_shared_cnn_tok2vec_listener(tmp_path):
    spacy.util.fix_random_seed(0)
    nlp = spacy.util.load_model_from_config(spacy.util.load_config_from_str(LISTENER_PIPELINE), auto_fill=True)
    train(nlp, make_examples(nlp, NESTED), steps=200)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    nlp.to_disk(tmp_path / "listener")
    reloaded = spacy.load(tmp_path / "listener")
    assert [predicted(reloaded(t)) for t, _ in NESTED] == [sorted(s) for _, s in NESTED]
    # fofe evaluate's second look at the scores reads the listener's output kept on the docs
    gold = NESTED[:2] + [("Bob visited Paris and Toronto .", [(0, 1, "PER"), (2, 3, "LOC"), (1, 2, "LOC")])]
    examples = [Example(reloaded(eg.reference.text), eg.reference) for eg in make_examples(reloaded, gold)]
    assert dict(gold_fates(reloaded.get_pipe("fofe_ner"), examples)) == {
        ("outer", "found"): 6, ("inner", "found"): 1, ("outer", "no entity"): 1}  # "visited" is no LOC


def test_consistency_with_a_listener_is_a_clear_error():
    spacy.util.fix_random_seed(0)
    nlp = spacy.util.load_model_from_config(spacy.util.load_config_from_str(LISTENER_PIPELINE), auto_fill=True)
    examples = make_examples(nlp, NESTED)
    optimizer = nlp.initialize(lambda: examples)
    nlp.get_pipe("fofe_ner").cfg["consistency"] = 1.0
    with pytest.raises(ValueError, match="consistency needs fofe_ner's own tok2vec"):
        nlp.update(examples, sgd=optimizer)


def test_initialize_counts_nesting_with_a_shared_start_as_nested_not_crossing():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    data = [("Marrowdale Gazette opened", [(0, 1, "LOC"), (0, 2, "ORG")])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp.initialize(lambda: make_examples(nlp, data))
    assert not any("cross" in str(w.message) for w in caught)
    assert nlp.get_pipe("fofe_ner").cfg["nested"] is True


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_model_file_is_a_clear_error(trained, tmp_path, damage):
    trained.to_disk(tmp_path / "pipeline")
    model_file = tmp_path / "pipeline" / "fofe_ner" / "model"
    data = model_file.read_bytes()
    model_file.write_bytes(data[: len(data) // 2] if damage == "truncate" else bytes(range(256)) * 20)
    with pytest.raises(ValueError, match="cannot read the component saved in .*truncated, corrupted"):
        spacy.load(tmp_path / "pipeline")
    with pytest.raises(ValueError, match="cannot read the component from bytes"):
        spacy.blank("en").add_pipe("fofe_ner").from_bytes(b"\x93\x01")


@pytest.mark.parametrize("cfg", [b"{not json", b"[1, 2]", bytes(range(256))])
def test_a_damaged_cfg_file_is_a_clear_error(trained, tmp_path, cfg):
    trained.to_disk(tmp_path / "pipeline")
    (tmp_path / "pipeline" / "fofe_ner" / "cfg").write_bytes(cfg)
    with pytest.raises(ValueError, match="cannot read the component saved in .*truncated, corrupted"):
        spacy.load(tmp_path / "pipeline")


def test_reference_with_other_tokenization_trains_and_counts_spans_that_do_not_align():
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    words = ["Ann", "Lee", "visited", "New", "Yo", "rk", "-", "based", "Acme", "."]
    spaces = [True, True, True, True, False, False, False, True, False, False]
    reference = Doc(nlp.vocab, words=words, spaces=spaces)
    # PER aligns; "New Yo" ends inside the predicted token "York" and cannot align.
    reference.spans["sc"] = [Span(reference, 0, 2, "PER"), Span(reference, 3, 5, "LOC")]
    predicted_doc = nlp.make_doc(reference.text)
    assert len(predicted_doc) != len(reference)
    example = Example(predicted_doc, reference)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer = nlp.initialize(lambda: [example])
    assert any("1 gold spans do not align" in str(w.message) for w in caught)
    losses = {}
    for _ in range(5):
        nlp.update([example], sgd=optimizer, losses=losses)
    assert numpy.isfinite(losses["fofe_ner"])


def test_evaluating_a_label_seen_only_in_dev_scores_it_as_missed(trained):
    scores = trained.evaluate(make_examples(trained, [("Ann Lee saw Mars .", [(0, 2, "PER"), (3, 4, "PLANET")])]))
    assert scores["spans_sc_per_type"]["PLANET"]["r"] == 0.0
    assert scores["spans_sc_r"] == 0.5


def test_training_is_repeatable_with_a_fixed_seed():
    def run():
        spacy.util.fix_random_seed(7)
        nlp = spacy.blank("en")
        nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
        examples = make_examples(nlp, NESTED)
        optimizer = nlp.initialize(lambda: examples)
        losses = {}
        for _ in range(3):
            nlp.update(examples, sgd=optimizer, losses=losses)
        return losses["fofe_ner"]

    assert run() == run()


def test_trains_with_word_dropout_and_saves_the_words_it_knows(tmp_path):
    nlp = overfit_with_tok2vec(spacy.blank("en"), WORD_DROPOUT_EMBED)
    nlp.to_disk(tmp_path / "word_dropout")
    reloaded = spacy.load(tmp_path / "word_dropout")
    # Words never seen in training ("Quillmere", "Zed") are read as the unknown word by both copies.
    texts = [t for t, _ in NESTED] + ["Zed lives in Quillmere ."]
    assert [predicted(reloaded(t)) for t in texts] == [predicted(nlp(t)) for t in texts]
    layer = next(node for node in reloaded.get_pipe("fofe_ner").model.walk() if node.name == "word_dropout")
    assert nlp.vocab.strings["toronto"] in layer.attrs["known"] and nlp.vocab.strings["zed"] not in layer.attrs["known"]


def test_learned_forgetting_factors_train_save_and_bound_the_windows(tmp_path, monkeypatch):
    from spacy_fofe.ml.position_codes import forgetting_factor
    from spacy_fofe.pipeline import component

    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    model = SMALL_MODEL  # FOFENER.v3 trains both forgetting factors
    ner = nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=150)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    layers = [ner.model.get_ref("word_codes"), ner.model.get_ref("char_codes")]
    alphas = [forgetting_factor(layer) for layer in layers]
    assert abs(alphas[0] - 0.5) > 1e-3 and abs(alphas[1] - 0.8) > 1e-3  # both were trained
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline").get_pipe("fofe_ner")
    assert [forgetting_factor(loaded.model.get_ref(n)) for n in ("word_codes", "char_codes")] == alphas
    # A larger factor reads further: the windows of a long doc widen with it and still give
    # the scores of the whole doc.
    layers[0].get_param("alpha_logit")[0] = 2.5  # alpha 0.92
    doc = nlp.make_doc(" ".join(text for text, _ in NESTED * 40))
    _, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    assert ner._window_margin() > 200
    numpy.testing.assert_allclose(ner.predict([doc])[1], whole, atol=1e-5)


def test_windows_of_a_long_doc_keep_its_sentence_starts(monkeypatch):
    from spacy_fofe.pipeline import component

    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": {**SMALL_MODEL, "stop_at_sentences": True}})
    train(nlp, make_examples(nlp, NESTED), steps=20)
    words = [t.text for text, _ in NESTED * 40 for t in nlp.make_doc(text)]
    doc = Doc(nlp.vocab, words=words, sent_starts=[i == 0 or words[i - 1] == "." for i in range(len(words))])
    fragments, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    numpy.testing.assert_allclose(ner.predict([doc])[1], whole, atol=1e-5)
    # The same words without sentence starts score differently: the starts did reach the windows.
    plain_fragments, plain = ner.predict([Doc(nlp.vocab, words=words)])
    rows = {tuple(f): i for i, f in enumerate(plain_fragments.tolist())}
    shared = plain[[rows[tuple(f)] for f in fragments.tolist()]]
    assert len(plain_fragments) > len(fragments) and numpy.abs(shared - whole).max() > 1e-4


def test_stop_at_sentences_annotates_a_document_as_its_sentences_alone():
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    config = {"model": {**SMALL_MODEL, "stop_at_sentences": True}, "overlap_rate": 1.0, "disjoint_rate": 1.0}
    nlp.add_pipe("fofe_ner", config=config)
    train(nlp, make_examples(nlp, NESTED), steps=150)
    sentences = [nlp.make_doc(text) for text, _ in NESTED]
    words = [t.text for doc in sentences for t in doc]
    starts = [i == 0 for doc in sentences for i in range(len(doc))]
    document = nlp(Doc(nlp.vocab, words=words, sent_starts=starts))
    expected, offset = [], 0
    for doc in sentences:
        expected += [(s + offset, e + offset, label) for s, e, label in predicted(nlp(doc))]
        offset += len(doc)
    assert predicted(document) == sorted(expected) and expected
    # No candidate runs across a sentence start, whatever its score.
    fragments, _ = nlp.get_pipe("fofe_ner").predict([document])
    boundaries = numpy.flatnonzero(starts)
    assert not any(((s < boundaries) & (boundaries < e)).any() for _, s, e in fragments)


def spans_of_lengths(nlp, lengths):
    """Examples with one PER span of each given length (in tokens), each in its own doc."""
    examples = []
    for length in lengths:
        words = ["w"] * (length + 2)
        reference = Doc(nlp.vocab, words=words)
        reference.spans["sc"] = [Span(reference, 1, 1 + length, "PER")]
        examples.append(Example(Doc(nlp.vocab, words=words), reference))
    return examples


@pytest.mark.parametrize("lengths,expected", [
    ([1] * 150 + [2] * 40 + [3] * 9 + [12], 3),   # 199 of 200 spans (99.5%) have at most 3 tokens
    ([1] * 100 + [5] * 100, 5),
    ([20] * 10, 16),                                # never more than 16: longer spans are warned
])
def test_max_length_null_picks_the_n_that_covers_the_training_spans(lengths, expected, capsys):
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    assert ner.cfg["max_length"] is None  # the default
    examples = spans_of_lengths(nlp, lengths)
    if expected == 16:
        with pytest.warns(UserWarning, match="10 gold spans are longer than max_length=16"):
            nlp.initialize(lambda: examples)
    else:
        nlp.initialize(lambda: examples)
    assert ner.cfg["max_length"] == expected
    share = sum(length <= expected for length in lengths) / len(lengths)
    out = " ".join(capsys.readouterr().out.split())
    assert f"max_length = {expected}" in out and f"cover {100 * share:.2f}% of the {len(lengths)} training spans" in out
    fragments = ner._fragments([nlp.make_doc(" ".join(["w"] * 20))])
    assert (fragments[:, 2] - fragments[:, 1]).max() == expected


def test_an_explicit_max_length_is_kept_and_a_saved_pick_reloads(tmp_path):
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL, "max_length": 9})
    nlp.initialize(lambda: spans_of_lengths(nlp, [1, 2]))
    assert ner.cfg["max_length"] == 9
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL})
    nlp.initialize(lambda: spans_of_lengths(nlp, [1, 2, 2]))
    nlp.to_disk(tmp_path / "picked")
    assert spacy.load(tmp_path / "picked").get_pipe("fofe_ner").cfg["max_length"] == 2


def test_a_long_docs_words_and_spaces_are_its_tokens_texts_and_whitespace():
    from spacy_fofe.pipeline.component import doc_words_and_spaces

    doc = Doc(spacy.blank("de").vocab, words=["Bär", "\n", "🙂", "  ", "Bär", "straße", "."],
              spaces=[True, False, False, False, True, False, False])
    words, spaces = doc_words_and_spaces(doc)
    assert words == [t.text for t in doc] and spaces == [bool(t.whitespace_) for t in doc]
    assert all(type(word) is str for word in words) and all(type(space) is bool for space in spaces)
