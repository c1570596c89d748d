"""spacy_fofe.mention_replacement.v1: mentions swapped for others of their label, every other
annotation moved with its tokens."""

import random

import pytest
import spacy
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry

from spacy_fofe.augment import outer_spans


def make_example(nlp, words, spans, ents=None, other=None, sent_starts=None):
    reference = Doc(nlp.vocab, words=words, sent_starts=sent_starts)
    reference.spans["sc"] = [Span(reference, s, e, label=label) for s, e, label in spans]
    if ents is not None:
        reference.set_ents([Span(reference, s, e, label=label) for s, e, label in ents], default="outside")
    if other is not None:
        reference.spans["other"] = [Span(reference, s, e, label=label) for s, e, label in other]
    return Example(Doc(nlp.vocab, words=words), reference)


def spans_of(doc, key):
    spans = doc.ents if key is None else doc.spans[key]
    return [(s.text, s.label_) for s in spans]


@pytest.fixture
def nlp():
    return spacy.blank("en")


def swap_all(nlp, examples):
    """Every example through an augmenter that swaps each mention it can (level 1)."""
    augment = registry.augmenters.get("spacy_fofe.mention_replacement.v1")(level=1.0)
    return [out for eg in examples for out in augment(nlp, eg)]


def test_a_nested_mention_is_swapped_with_its_inner_spans_and_the_rest_moves(nlp):
    source = make_example(nlp, ["The", "Bank", "of", "Paris", "opened", "."],
                          [(1, 4, "ORG"), (3, 4, "LOC")], ents=[(1, 4, "ORG")])
    words = ["He", "left", "Acme", "in", "June", ".", "Ann", "Lee", "stayed", "."]
    target = make_example(nlp, words, [(2, 3, "ORG"), (6, 8, "PER")], ents=[(2, 3, "ORG"), (6, 8, "PER")],
                          other=[(0, 6, "SENT"), (7, 8, "SURNAME")],
                          sent_starts=[True] + [False] * 5 + [True] + [False] * 3)
    out = swap_all(nlp, [source, target])[1]
    doc = out.reference
    # "Acme" became "Bank of Paris" with its inner LOC; PER has no other mention to take
    assert doc.text == "He left Bank of Paris in June . Ann Lee stayed . "
    assert spans_of(doc, "sc") == [("Bank of Paris", "ORG"), ("Paris", "LOC"), ("Ann Lee", "PER")]
    assert spans_of(doc, None) == [("Bank of Paris", "ORG"), ("Ann Lee", "PER")]
    # a span around the mention stretches with it; one elsewhere keeps its tokens
    assert spans_of(doc, "other") == [("He left Bank of Paris in June .", "SENT"), ("Lee", "SURNAME")]
    assert [t.is_sent_start for t in doc] == [True] + [False] * 7 + [True] + [False] * 3
    assert [t.text for t in out.predicted] == [t.text for t in doc]
    assert target.reference.text == "He left Acme in June . Ann Lee stayed . "  # the corpus doc is not changed


def test_the_predicted_doc_is_tokenized_as_the_example_s_was(nlp):
    source = make_example(nlp, ["Bank", "of", "Paris"], [(0, 3, "ORG")])
    words = ["Ann's", "firm", "Acme", "won"]
    reference = Doc(nlp.vocab, words=words)
    reference.spans["sc"] = [Span(reference, 2, 3, "ORG")]
    # the reference's tokens (as with gold_preproc), or the tokenizer's, which splits "Ann's"
    for predicted, expected in [(Doc(nlp.vocab, words=words), ["Ann's", "firm", "Bank", "of", "Paris", "won"]),
                                (nlp.make_doc(reference.text), ["Ann", "'s", "firm", "Bank", "of", "Paris", "won"])]:
        out = swap_all(nlp, [source, Example(predicted, reference)])[1]
        assert [t.text for t in out.predicted] == expected
        assert [t.text for t in out.reference] == ["Ann's", "firm", "Bank", "of", "Paris", "won"]


def test_level_zero_and_no_other_mention_give_the_example_itself(nlp):
    examples = [make_example(nlp, ["Ann", "met", "Bob"], [(0, 1, "PER"), (2, 3, "PER")])]
    augment = registry.augmenters.get("spacy_fofe.mention_replacement.v1")(level=0.0)
    assert [out for eg in examples for out in augment(nlp, eg)] == examples
    # level 1, but no other mention of the label to take
    lone = [make_example(nlp, ["Ann", "slept"], [(0, 1, "PER")])]
    assert swap_all(nlp, lone) == lone


def test_a_span_crossing_a_mention_keeps_it_in_place(nlp):
    source = make_example(nlp, ["Acme", "Corp"], [(0, 2, "ORG")])
    # "other" starts inside the ORG mention and ends after it: it cannot follow a swap
    target = make_example(nlp, ["Big", "Blue", "rose"], [(0, 2, "ORG")], other=[(1, 3, "X")])
    out = swap_all(nlp, [source, target])[1]
    assert out is target


def test_swapped_docs_draw_from_the_label_s_distinct_mentions(nlp):
    random.seed(0)
    pool = [make_example(nlp, [name, "won"], [(0, 1, "PER")]) for name in ["Ann", "Bob", "Cy"] * 5]
    target = make_example(nlp, ["Dee", "lost", "to", "Acme"], [(0, 1, "PER"), (3, 4, "ORG")])
    augment = registry.augmenters.get("spacy_fofe.mention_replacement.v1")(level=1.0)
    for eg in pool:
        list(augment(nlp, eg))
    names = {next(augment(nlp, target)).reference[0].text for _ in range(60)}
    assert names == {"Ann", "Bob", "Cy"}  # "Dee" (added by the first draw) is never its own swap
    assert all(next(augment(nlp, target)).reference[-1].text == "Acme" for _ in range(5))  # only ORG


def test_outer_spans():
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=list("abcdef"))
    spans = [Span(doc, 2, 3, "B"), Span(doc, 0, 3, "A"), Span(doc, 4, 6, "C"), Span(doc, 0, 3, "A2")]
    assert [(s.start, s.end) for s in outer_spans(spans)] == [(0, 3), (4, 6)]
    assert outer_spans(spans + [Span(doc, 2, 5, "X")]) == []  # crossing spans have no outer level


def test_level_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="level"):
        registry.augmenters.get("spacy_fofe.mention_replacement.v1")(level=1.5)


def test_a_corpus_reader_takes_it_from_a_config(tmp_path, nlp):
    from spacy.tokens import DocBin

    docs = []
    for words, spans in [(["Ann", "won"], [(0, 1, "PER")]), (["Bob", "lost"], [(0, 1, "PER")])] * 3:
        doc = Doc(nlp.vocab, words=words)
        doc.spans["sc"] = [Span(doc, s, e, label) for s, e, label in spans]
        docs.append(doc)
    DocBin(docs=docs).to_disk(tmp_path / "train.spacy")
    config = {"corpus": {"@readers": "spacy_fofe.CachedCorpus.v1", "path": str(tmp_path / "train.spacy"),
                         "gold_preproc": False,
                         "augmenter": {"@augmenters": "spacy_fofe.mention_replacement.v1", "level": 1.0}}}
    corpus = registry.resolve(config)["corpus"]
    texts = [eg.reference.text for eg in corpus(nlp)]
    # the first doc has no other PER yet; every later one is swapped for the other name
    assert texts == ["Ann won ", "Ann lost ", "Bob won ", "Ann lost ", "Bob won ", "Ann lost "]
