"""Distillation (spacy_fofe/training/distill.py): a student fofe_ner trained towards a teacher's probabilities."""

import shutil
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.tokens import Doc

from spacy_fofe.ml.fragments import enumerate_fragments, fragment_rows
from spacy_fofe.training.distill import Teacher, soft_targets

from helpers import LISTENER_PIPELINE, NESTED, make_examples, predicted, small_pipeline, train

LABELS = ["LOC", "ORG", "PER"]
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.cfg"


@pytest.fixture(scope="module")
def teacher_path(trained, tmp_path_factory):
    path = tmp_path_factory.mktemp("teacher") / "pipeline"
    trained.to_disk(path)
    return path


def test_soft_targets_mix_the_gold_label_with_the_teacher():
    labels = numpy.array([1, 0])
    assert soft_targets(labels, 3).tolist() == [[0, 1, 0], [1, 0, 0]]
    teacher = numpy.array([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25]])
    mixed = soft_targets(labels, 3, teacher, 0.25)
    numpy.testing.assert_allclose(mixed, [[0.05, 0.95, 0.0], [0.875, 0.0625, 0.0625]])


def test_a_student_learns_from_the_teacher_alone(teacher_path):
    # No gold spans at all: with teacher_weight 1 the teacher's probabilities are the only targets.
    nlp = small_pipeline()
    nlp.get_pipe("fofe_ner").cfg["nested"] = True  # no gold spans to tell initialize
    nlp.config["initialize"]["components"]["fofe_ner"] = {
        "labels": LABELS, "teacher": str(teacher_path), "teacher_weight": 1.0}
    unlabelled = make_examples(nlp, [(text, []) for text, _ in NESTED])
    train(nlp, unlabelled, steps=300)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text


def test_the_student_loads_and_runs_without_its_teacher(teacher_path, tmp_path):
    shutil.copytree(teacher_path, tmp_path / "teacher")
    nlp = small_pipeline()
    nlp.config["initialize"]["components"]["fofe_ner"] = {"teacher": str(tmp_path / "teacher")}
    train(nlp, make_examples(nlp, NESTED), steps=100)
    nlp.to_disk(tmp_path / "student")
    shutil.rmtree(tmp_path / "teacher")
    student = spacy.load(tmp_path / "student")
    assert [predicted(student(text)) for text, _ in NESTED] == [predicted(nlp(text)) for text, _ in NESTED]


def test_a_shipped_config_takes_the_teacher_as_an_override(teacher_path):
    # What `spacy train configs/demo.cfg --initialize.components.fofe_ner.teacher PATH` resolves.
    overrides = {"initialize.components.fofe_ner.teacher": str(teacher_path)}
    config = spacy.util.load_config(DEMO_CONFIG, overrides=overrides)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    assert nlp.get_pipe("fofe_ner")._teacher.sentences is False
    overrides["initialize.components.fofe_ner.teacher_sentences"] = True
    config = spacy.util.load_config(DEMO_CONFIG, overrides=overrides)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    assert nlp.get_pipe("fofe_ner")._teacher.sentences is True


def test_a_list_of_teachers_is_the_mean_of_their_probabilities(teacher_path, tmp_path):
    # Pipelines `spacy fofe ensemble` cannot join (each fofe_ner reading its own listener) teach as one.
    spacy.util.fix_random_seed(1)
    other = small_pipeline()
    train(other, make_examples(other, NESTED), steps=30)  # partly trained: probabilities unlike the first's
    other.to_disk(tmp_path / "other")
    vocab = spacy.blank("en").vocab
    first = Teacher(teacher_path, "fofe_ner", LABELS, vocab, max_length=3)
    second = Teacher(tmp_path / "other", "fofe_ner", LABELS, vocab, max_length=3)
    both = Teacher([teacher_path, tmp_path / "other"], "fofe_ner", LABELS, vocab, max_length=3)
    docs = [spacy.blank("en").make_doc(text) for text, _ in NESTED]
    fragments = enumerate_fragments([len(doc) for doc in docs], 3)
    one, two = first.probabilities(docs, fragments), second.probabilities(docs, fragments)
    assert numpy.abs(one - two).max() > 0.1
    numpy.testing.assert_allclose(both.probabilities(docs, fragments), (one + two) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="empty list"):
        Teacher([], "fofe_ner", LABELS, vocab)


def test_a_list_of_teachers_is_a_config_override(teacher_path):
    # `--initialize.components.fofe_ner.teacher '["A", "B"]'`: spaCy reads the override as JSON.
    overrides = {"initialize.components.fofe_ner.teacher": [str(teacher_path), str(teacher_path)]}
    config = spacy.util.load_config(DEMO_CONFIG, overrides=overrides)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    assert len(nlp.get_pipe("fofe_ner")._teacher.members) == 2


def test_teacher_columns_follow_the_students_labels(teacher_path, trained):
    # The student knows PER and LOC only: the teacher's ORG probability counts as NONE.
    teacher = Teacher(teacher_path, "fofe_ner", ["PER", "LOC"], spacy.blank("en").vocab)
    docs = [trained.make_doc(text) for text, _ in NESTED]
    fragments = enumerate_fragments([len(doc) for doc in docs], 3)
    probs = teacher.probabilities(docs, fragments)
    full = trained.get_pipe("fofe_ner").model.predict((docs, fragments))
    none, loc, org, per = (full[:, i] for i in range(4))
    numpy.testing.assert_allclose(probs, numpy.stack([none + org, per, loc], axis=1), atol=1e-6)
    numpy.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)


def test_the_teacher_scores_each_doc_once_and_answers_from_its_tables(teacher_path, trained, monkeypatch):
    teacher = Teacher(teacher_path, "fofe_ner", LABELS, spacy.blank("en").vocab, max_length=3)
    docs = [trained.make_doc(text) for text, _ in NESTED]
    fragments = enumerate_fragments([len(doc) for doc in docs], 3)
    direct = teacher._score(docs, fragments)
    first = teacher.probabilities(docs, fragments)
    numpy.testing.assert_allclose(first, direct, atol=1e-6)
    scored = []
    monkeypatch.setattr(teacher, "_score", lambda d, f: scored.append(len(d)) or direct[:0])
    # Later epochs: new Doc objects of the same texts, a subset of fragments, in another order.
    again = [trained.make_doc(text) for text, _ in reversed(NESTED)]
    rows = numpy.arange(0, len(fragments), 3)
    flipped = fragments[rows].copy()
    flipped[:, 0] = len(docs) - 1 - flipped[:, 0]
    numpy.testing.assert_allclose(teacher.probabilities(again, flipped), direct[rows], atol=1e-6)
    assert scored == []
    with pytest.raises(ValueError, match="fragments of 1 to 3 tokens, asked for 1 to 4"):
        teacher.probabilities(docs, enumerate_fragments([len(doc) for doc in docs], 4))


def test_a_teacher_of_sentences_scores_each_sentence_of_a_document_alone(teacher_path, trained):
    # The teacher's probabilities on a document of three sentences are its probabilities on each
    # sentence as a doc; a fragment across a sentence start is NONE.
    teacher = Teacher(teacher_path, "fofe_ner", LABELS, spacy.blank("en").vocab, max_length=3, sentences=True)
    texts = [text for text, _ in NESTED[:3]]
    words = [word for text in texts for word in text.split()]
    starts = [i == 0 for text in texts for i in range(len(text.split()))]
    document = Doc(trained.vocab, words=words, sent_starts=starts)
    fragments = enumerate_fragments([len(document)], 3)
    probs = teacher.probabilities([document], fragments)
    alone = [trained.make_doc(text) for text in texts]
    alone_fragments = enumerate_fragments([len(doc) for doc in alone], 3)
    expected = teacher._score(alone, alone_fragments)
    offsets = numpy.cumsum([0] + [len(doc) for doc in alone])
    shifted = alone_fragments[:, 1:] + offsets[alone_fragments[:, 0], None]
    inside = fragment_rows(fragments, [(0, start, end) for start, end in shifted.tolist()])
    assert (inside >= 0).all()
    numpy.testing.assert_allclose(probs[inside], expected, atol=1e-6)
    across = numpy.setdiff1d(numpy.arange(len(fragments)), inside)
    assert len(across) == 2 * (1 + 2)  # at each of the two inner starts: 1 + 2 fragments of 2 and 3 tokens
    assert (probs[across] == numpy.eye(len(LABELS) + 1)[0]).all()
    # An empty doc beside it has no sentence and no fragment.
    empty = Doc(trained.vocab, words=[])
    batch = enumerate_fragments([0, len(document)], 3)
    numpy.testing.assert_allclose(teacher.probabilities([empty, Doc(trained.vocab, words=words, sent_starts=starts)],
                                                        batch), probs, atol=1e-6)
    # Without `sentences`, the same doc is scored whole: not the sentences' probabilities.
    whole = Teacher(teacher_path, "fofe_ner", LABELS, spacy.blank("en").vocab, max_length=3)
    assert not numpy.allclose(whole.probabilities([document], fragments)[inside], expected, atol=1e-3)


def test_docs_past_the_teachers_cache_are_scored_each_time(teacher_path, trained):
    teacher = Teacher(teacher_path, "fofe_ner", LABELS, spacy.blank("en").vocab, max_length=3, cache_bytes=0)
    docs = [trained.make_doc(text) for text, _ in NESTED]
    fragments = enumerate_fragments([len(doc) for doc in docs], 3)
    numpy.testing.assert_allclose(teacher.probabilities(docs, fragments), teacher._score(docs, fragments), atol=1e-6)
    assert teacher._tables == {}


def test_a_teacher_reading_a_listener_gets_its_tok2vec_run_on_copies(tmp_path):
    spacy.util.fix_random_seed(0)
    config = spacy.util.load_config_from_str(LISTENER_PIPELINE)
    teacher_nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    train(teacher_nlp, make_examples(teacher_nlp, NESTED), steps=200)
    teacher_nlp.to_disk(tmp_path / "teacher")
    teacher = Teacher(tmp_path / "teacher", "fofe_ner", LABELS, spacy.blank("en").vocab)
    text, spans = NESTED[0]
    doc = spacy.blank("en").make_doc(text)
    gold = numpy.array([[0, start, end] for start, end, _ in spans])
    probs = teacher.probabilities([doc], gold)
    assert probs.argmax(axis=1).tolist() == [LABELS.index(label) + 1 for *_, label in spans]
    assert doc.tensor.size == 0  # the student's doc is left as it was


def test_bad_teachers_are_clear_errors(teacher_path, trained, tmp_path):
    vocab = spacy.blank("en").vocab
    with pytest.raises(ValueError, match=r"does not predict the labels \['MISC'\]"):
        Teacher(teacher_path, "fofe_ner", ["PER", "MISC"], vocab)
    with pytest.raises(ValueError, match="has no component 'ner'"):
        Teacher(teacher_path, "ner", LABELS, vocab)
    with_vectors = spacy.load(teacher_path)
    with_vectors.vocab.set_vector("Paris", numpy.ones(4, dtype="float32"))
    with_vectors.to_disk(tmp_path / "vectors")
    with pytest.raises(ValueError, match="word vectors that the student's pipeline lacks"):
        Teacher(tmp_path / "vectors", "fofe_ner", LABELS, vocab)
    vocab.set_vector("Paris", numpy.ones(4, dtype="float32"))
    Teacher(tmp_path / "vectors", "fofe_ner", LABELS, vocab)  # the same vectors: accepted
    nlp = small_pipeline()
    nlp.config["initialize"]["components"]["fofe_ner"] = {"teacher": str(teacher_path), "teacher_weight": 0.0}
    with pytest.raises(ValueError, match=r"teacher_weight must be in \(0, 1\]"):
        nlp.initialize(lambda: make_examples(nlp, NESTED))
