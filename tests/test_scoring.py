"""Scores: spans over all levels and GermEval 2014's strict level-aware metric, on hand-made docs."""

import pytest
import spacy
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example

from spacy_fofe.pipeline.scoring import score_fofe_ner


def test_strict_metric_counts_a_span_only_on_its_own_level():
    nlp = spacy.blank("de")
    gold = nlp.make_doc("Die Universität Toronto in Kanada")
    gold.spans["sc"] = [Span(gold, 1, 3, "ORG"), Span(gold, 2, 3, "LOC"), Span(gold, 4, 5, "LOC")]
    gold.spans["sc_level1"] = [Span(gold, 1, 3, "ORG"), Span(gold, 4, 5, "LOC")]
    gold.spans["sc_level2"] = [Span(gold, 2, 3, "LOC")]
    pred = nlp.make_doc(gold.text)
    # ORG right (outer); LOC(2,3) right but predicted on the outer level; LOC(4,5) missed;
    # a wrong inner PER.
    spans = [Span(pred, 1, 3, "ORG"), Span(pred, 2, 3, "LOC"), Span(pred, 1, 2, "PER")]
    pred.spans["sc"] = SpanGroup(pred, name="sc", spans=spans, attrs={"depths": [0, 0, 1], "scores": [1, 1, 1]})
    scores = score_fofe_ner([Example(pred, gold)], spans_key="sc", ents="off")
    # All levels together: 2 of 3 predictions right, 2 of 3 gold found.
    assert scores["spans_sc_f"] == pytest.approx(2 / 3)
    # Outer: predicted {ORG, LOC(2,3)} vs gold {ORG, LOC(4,5)}: tp 1.
    assert scores["spans_sc_outer_p"] == pytest.approx(0.5) and scores["spans_sc_outer_r"] == pytest.approx(0.5)
    # Inner: predicted {PER} vs gold {LOC(2,3)}: tp 0.
    assert scores["spans_sc_inner_f"] == 0.0
    # Strict combined: tp 1 of 3 predicted, 3 gold.
    assert scores["spans_sc_strict_p"] == pytest.approx(1 / 3) and scores["spans_sc_strict_r"] == pytest.approx(1 / 3)


def test_levels_fall_back_to_containment_without_level_groups():
    nlp = spacy.blank("en")
    gold = nlp.make_doc("Bank of Paris")
    gold.spans["sc"] = [Span(gold, 0, 3, "ORG"), Span(gold, 2, 3, "LOC")]
    pred = nlp.make_doc(gold.text)
    pred.spans["sc"] = [Span(pred, 0, 3, "ORG"), Span(pred, 2, 3, "LOC")]
    scores = score_fofe_ner([Example(pred, gold)], spans_key="sc", ents="off")
    assert scores["spans_sc_outer_f"] == scores["spans_sc_inner_f"] == scores["spans_sc_strict_f"] == 1.0


def test_levels_align_predictions_tokenized_otherwise_with_the_reference():
    # A reference with the file's tokens (CoNLL keeps "1996-08-22" whole) and a prediction on
    # tokens that split it: the level scores compare the same spans, not shifted token indices.
    nlp = spacy.blank("en")
    gold = Doc(nlp.vocab, words=["1996-08-22", "Leeds", "beat", "Big", "Ben", "FC"])
    gold.spans["sc"] = [Span(gold, 1, 2, "ORG"), Span(gold, 3, 6, "ORG"), Span(gold, 3, 5, "LOC")]
    pred = Doc(nlp.vocab, words=["1996", "-", "08", "-", "22", "Leeds", "beat", "Big", "Ben", "FC"],
               spaces=[False, False, False, False, True, True, True, True, True, False])
    spans = [Span(pred, 5, 6, "ORG"), Span(pred, 7, 10, "ORG"), Span(pred, 8, 9, "LOC")]
    pred.spans["sc"] = SpanGroup(pred, name="sc", spans=spans, attrs={"depths": [0, 0, 1], "scores": [1, 1, 1]})
    scores = score_fofe_ner([Example(pred, gold)], spans_key="sc", ents="off")
    # Leeds and Big Ben FC right on the outer level; LOC(8,9) is Ben, not the gold inner Big Ben.
    assert scores["spans_sc_outer_f"] == 1.0 and scores["spans_sc_inner_f"] == 0.0
    assert scores["spans_sc_strict_p"] == pytest.approx(2 / 3) == scores["spans_sc_strict_r"]
    assert scores["spans_sc_strict_f"] == pytest.approx(scores["spans_sc_f"])


def test_a_level_with_nothing_to_score_is_none_as_in_spacys_span_scorer():
    # flat data: no inner span in gold or prediction, so the inner level has no score (not 0.0),
    # and the outer level and strict metric are the span scores
    nlp = spacy.blank("en")
    gold = nlp.make_doc("Ann met Bob in Paris")
    gold.spans["sc"] = [Span(gold, 0, 1, "PER"), Span(gold, 2, 3, "PER"), Span(gold, 4, 5, "LOC")]
    pred = nlp.make_doc(gold.text)
    pred.spans["sc"] = [Span(pred, 0, 1, "PER"), Span(pred, 4, 5, "ORG")]
    scores = score_fofe_ner([Example(pred, gold)], spans_key="sc", ents="off")
    assert scores["spans_sc_inner_p"] is scores["spans_sc_inner_r"] is scores["spans_sc_inner_f"] is None
    assert scores["spans_sc_outer_f"] == scores["spans_sc_strict_f"] == pytest.approx(scores["spans_sc_f"]) == 0.4
    # no annotated doc at all: every level is None, as the span scores are
    empty = score_fofe_ner([Example(nlp.make_doc("Hi"), nlp.make_doc("Hi"))], spans_key="sc", ents="off")
    assert empty["spans_sc_p"] is None and empty["spans_sc_strict_f"] is None
