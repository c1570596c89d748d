"""Decoding on hand-made candidate tables."""

import pytest

from spacy_fofe.decoding import Candidate, Level, decode, highest_first, longest_first

HF = Level("highest-first", 0.5)
LF = Level("longest-first", 0.5)


def spans(decoded):
    return [(c.start, c.end, c.label, depth) for c, depth in decoded]


def test_paper_example_nests_loc_inside_org():
    # [w2 w3, PER, .7], [w3 w4, LOC, .8], [w1..w4, ORG, .9], tokens counted from 0.
    cands = [Candidate(1, 3, "PER", 0.7), Candidate(2, 4, "LOC", 0.8), Candidate(0, 4, "ORG", 0.9)]
    assert spans(decode(cands, [HF, HF])) == [(0, 4, "ORG", 0), (2, 4, "LOC", 1)]
    assert spans(decode(cands, [HF])) == [(0, 4, "ORG", 0)]


def test_highest_first_keeps_best_non_overlapping():
    cands = [Candidate(0, 2, "A", 0.6), Candidate(1, 3, "B", 0.9), Candidate(3, 4, "C", 0.55)]
    assert [(c.start, c.end) for c in highest_first(cands)] == [(1, 3), (3, 4)]


def test_highest_first_ties_do_not_depend_on_input_order():
    cands = [Candidate(0, 2, "A", 0.8), Candidate(1, 3, "B", 0.8)]
    assert highest_first(cands) == highest_first(cands[::-1]) == [Candidate(0, 2, "A", 0.8)]


def test_longest_first_maximises_covered_tokens_then_score():
    cands = [Candidate(0, 3, "A", 0.6), Candidate(0, 1, "B", 0.99), Candidate(1, 2, "C", 0.99),
             Candidate(3, 5, "D", 0.7)]
    assert [(c.start, c.end) for c in longest_first(cands)] == [(0, 3), (3, 5)]
    tie = [Candidate(0, 2, "A", 0.6), Candidate(1, 3, "B", 0.9)]
    assert longest_first(tie) == [Candidate(1, 3, "B", 0.9)]


def test_thresholds_per_level_and_per_label():
    cands = [Candidate(0, 3, "ORG", 0.9), Candidate(1, 2, "LOC", 0.6), Candidate(4, 5, "PER", 0.45)]
    assert spans(decode(cands, [HF, Level("highest-first", 0.7)])) == [(0, 3, "ORG", 0)]
    assert spans(decode(cands, [Level("highest-first", 0.5, {"PER": 0.4})])) == [
        (0, 3, "ORG", 0), (4, 5, "PER", 0)]


def test_depth_limit_stops_nesting():
    cands = [Candidate(0, 5, "A", 0.9), Candidate(1, 4, "B", 0.9), Candidate(2, 3, "C", 0.9)]
    assert len(decode(cands, [HF, HF, HF])) == 3
    assert spans(decode(cands, [HF, HF])) == [(0, 5, "A", 0), (1, 4, "B", 1)]


def test_no_candidates_and_same_span_with_other_label_is_not_nested():
    assert decode([], [HF, HF]) == []
    cands = [Candidate(0, 2, "A", 0.9), Candidate(0, 2, "B", 0.8)]
    assert spans(decode(cands, [HF, HF])) == [(0, 2, "A", 0)]


def test_unknown_algorithm_is_rejected():
    with pytest.raises(ValueError, match="Unknown decoding algorithm"):
        decode([Candidate(0, 1, "A", 0.9)], [Level("best-guess", 0.5)])


def test_tuning_finds_thresholds_that_raise_f1_on_a_constructed_case():
    from spacy_fofe.tune import span_f1, tune_decoding

    # Label A: true spans score 0.4 and false ones 0.3, so the default 0.5 finds nothing.
    # Label B: false spans score 0.6 and true ones 0.9, so 0.5 keeps noise.
    candidates = [[Candidate(0, 1, "A", 0.4), Candidate(2, 3, "A", 0.3), Candidate(4, 5, "B", 0.9),
                   Candidate(6, 7, "B", 0.6)] for _ in range(5)]
    gold = [{(0, 1, "A"), (4, 5, "B")} for _ in range(5)]
    cfg = {"decoding": "highest-first", "threshold": 0.5, "label_thresholds": {}, "nested": False,
           "nested_decoding": "highest-first", "nested_threshold": None, "max_depth": 2}
    tuned, before, after = tune_decoding(candidates, gold, cfg, ["A", "B"])
    assert before == pytest.approx(span_f1(candidates, gold, [Level("highest-first", 0.5)]))
    assert before < 0.67 and after == 1.0
    assert 0.3 < tuned["label_thresholds"].get("A", tuned["threshold"]) <= 0.4
    assert 0.6 < tuned["label_thresholds"].get("B", tuned["threshold"]) <= 0.9
    # Without per-label thresholds one global threshold has to serve both labels: it cannot reach 1.0.
    tuned, before, after = tune_decoding(candidates, gold, cfg, ["A", "B"], label_thresholds=False)
    assert tuned["label_thresholds"] == {} and before < after < 1.0


NESTED_CFG = {"decoding": "highest-first", "threshold": 0.5, "label_thresholds": {}, "nested": True,
              "nested_decoding": "highest-first", "nested_threshold": None, "max_depth": 2}


def test_nested_threshold_replaces_the_outer_label_thresholds_on_inner_levels():
    from spacy_fofe.decoding import levels_from

    cands = [Candidate(0, 4, "ORG", 0.9), Candidate(2, 4, "LOC", 0.6)]
    cfg = {**NESTED_CFG, "label_thresholds": {"LOC": 0.8}}
    # nested_threshold None: the inner level inherits LOC's 0.8, so LOC (0.6) is dropped.
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0)]
    cfg["nested_threshold"] = 0.55
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0), (2, 4, "LOC", 1)]
    cfg["nested_threshold"] = 0.65
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0)]


def test_strict_f1_counts_a_span_only_on_its_own_level():
    from spacy_fofe.tune import span_f1

    cands = [[Candidate(2, 4, "LOC", 0.9)]]
    # Gold LOC(2, 4) is an inner span (of an ORG the model missed); predicted at the outer level.
    assert span_f1(cands, [{(2, 4, "LOC")}], [HF]) == 1.0
    assert span_f1(cands, [{(1, 2, 4, "LOC")}], [HF], strict=True) == 0.0
    assert span_f1(cands, [{(0, 2, 4, "LOC")}], [HF], strict=True) == 1.0


def test_strict_tuning_recovers_a_low_scoring_inner_level():
    from spacy_fofe.decoding import levels_from
    from spacy_fofe.tune import span_f1, tune_decoding

    # Inner LOCs score 0.35 (true) and 0.25 (false, inside the same ORG): 0.5 drops both.
    candidates = [[Candidate(0, 4, "ORG", 0.9), Candidate(2, 4, "LOC", 0.35), Candidate(0, 1, "LOC", 0.25)]
                  for _ in range(5)]
    gold = [{(0, 0, 4, "ORG"), (1, 2, 4, "LOC")} for _ in range(5)]
    tuned, before, after = tune_decoding(candidates, gold, dict(NESTED_CFG), ["ORG", "LOC"], strict=True)
    assert before == pytest.approx(2 / 3) and after == 1.0
    assert 0.25 < tuned["nested_threshold"] <= 0.35
    assert span_f1(candidates, gold, levels_from(tuned), strict=True) == 1.0


def test_tuning_scores_spans_in_reference_tokens_like_spacy_evaluate():
    import spacy
    from spacy.tokens import Doc, Span
    from spacy.training import Example

    from spacy_fofe.scoring import score_fofe_ner
    from spacy_fofe.tune import reference_map, span_f1

    nlp = spacy.blank("en")
    reference = Doc(nlp.vocab, words=["Chester-le-Street", "beat", "Ann"])
    reference.spans["sc"] = [Span(reference, 0, 1, "LOC"), Span(reference, 2, 3, "PER")]
    predicted = nlp.make_doc(reference.text)  # Chester - le - Street beat Ann
    assert len(predicted) == 7
    cands = [[Candidate(4, 5, "LOC", 0.9), Candidate(6, 7, "PER", 0.9)]]
    predicted.spans["sc"] = [Span(predicted, 4, 5, "LOC"), Span(predicted, 6, 7, "PER")]
    eg = Example(predicted, reference)
    gold = [{(0, 1, "LOC"), (2, 3, "PER")}]
    expected = score_fofe_ner([eg], spans_key="sc", ents="off")["spans_sc_f"]
    # "Street" lies inside the reference token "Chester-le-Street": spaCy drops it (neither
    # right nor wrong), so P = 1/1 and R = 1/2.
    assert span_f1(cands, gold, [HF], [reference_map(eg, cands[0])]) == pytest.approx(expected) == pytest.approx(2 / 3)


def test_unknown_tuning_objective_is_rejected_before_loading(tmp_path):
    from spacy_fofe.tune import tune_pipeline

    with pytest.raises(ValueError, match="Unknown tuning objective 'outer'"):
        tune_pipeline(tmp_path / "no-model", tmp_path / "dev.spacy", tmp_path / "out", objective="outer")


def test_tuning_leaves_a_label_threshold_alone_when_the_gain_is_tiny():
    from spacy_fofe.tune import tune_decoding

    # 1200 docs with a sure A; one true B at 0.45; ten false A at 0.46 (so a lower global
    # threshold loses). Lowering B's threshold finds one more span: +0.04 F1 points.
    candidates = [[Candidate(0, 1, "A", 0.9)] for _ in range(1200)]
    candidates[0].append(Candidate(2, 3, "B", 0.45))
    for i in range(1, 11):
        candidates[i].append(Candidate(4, 5, "A", 0.46))
    gold = [{(0, 1, "A")} for _ in range(1200)]
    gold[0].add((2, 3, "B"))
    cfg = {"decoding": "highest-first", "threshold": 0.5, "label_thresholds": {}, "nested": False,
           "nested_decoding": "highest-first", "nested_threshold": None, "max_depth": 2}
    tuned, before, after = tune_decoding(candidates, gold, dict(cfg), ["A", "B"])
    assert tuned["label_thresholds"] == {} and after == before
    tuned, before, after = tune_decoding(candidates, gold, dict(cfg), ["A", "B"], min_gain=0.0)
    assert tuned["label_thresholds"]["B"] <= 0.45 and after == 1.0
