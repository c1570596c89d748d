"""Decoding on hand-made candidate tables."""

import random

import numpy
import pytest

from spacy_fofe.pipeline.decoding import (
    Candidate,
    CandidateTable,
    Level,
    decode,
    decode_batch,
    highest_first,
    longest_first,
)
from spacy_fofe.pipeline.span_geometry import contains, crosses, nested_flags

HF = Level("highest-first", 0.5)
LF = Level("longest-first", 0.5)
NA = Level("nesting-aware", 0.5)


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
    from spacy_fofe.training.tune import span_f1, tune_decoding

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
    from spacy_fofe.pipeline.decoding import levels_from

    cands = [Candidate(0, 4, "ORG", 0.9), Candidate(2, 4, "LOC", 0.6)]
    cfg = {**NESTED_CFG, "label_thresholds": {"LOC": 0.8}}
    # nested_threshold None: the inner level inherits LOC's 0.8, so LOC (0.6) is dropped.
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0)]
    cfg["nested_threshold"] = 0.55
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0), (2, 4, "LOC", 1)]
    cfg["nested_threshold"] = 0.65
    assert spans(decode(cands, levels_from(cfg))) == [(0, 4, "ORG", 0)]


def test_strict_f1_counts_a_span_only_on_its_own_level():
    from spacy_fofe.training.tune import span_f1

    cands = [[Candidate(2, 4, "LOC", 0.9)]]
    # Gold LOC(2, 4) is an inner span (of an ORG the model missed); predicted at the outer level.
    assert span_f1(cands, [{(2, 4, "LOC")}], [HF]) == 1.0
    assert span_f1(cands, [{(1, 2, 4, "LOC")}], [HF], strict=True) == 0.0
    assert span_f1(cands, [{(0, 2, 4, "LOC")}], [HF], strict=True) == 1.0


def test_strict_tuning_recovers_a_low_scoring_inner_level():
    from spacy_fofe.pipeline.decoding import levels_from
    from spacy_fofe.training.tune import span_f1, tune_decoding

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

    from spacy_fofe.pipeline.scoring import score_fofe_ner
    from spacy_fofe.training.tune import reference_map, span_f1

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
    from spacy_fofe.training.tune import tune_pipeline

    with pytest.raises(ValueError, match="Unknown tuning objective 'outer'"):
        tune_pipeline(tmp_path / "no-model", tmp_path / "dev.spacy", tmp_path / "out", objective="outer")


def test_tuning_leaves_a_label_threshold_alone_when_the_gain_is_tiny():
    from spacy_fofe.training.tune import tune_decoding

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


# ----- nesting-aware decoding ---------------------------------------------------------------


def test_nesting_aware_keeps_a_container_that_scores_below_its_inner_span():
    # The Bank of [England]: LOC scores 1.0, the ORG around it 0.9. Highest-first lets the
    # LOC take the outer slot and drops the ORG; nesting-aware keeps both.
    cands = [Candidate(1, 4, "ORG", 0.9), Candidate(3, 4, "LOC", 1.0), Candidate(0, 1, "PER", 0.3)]
    assert spans(decode(cands, [NA, NA])) == [(1, 4, "ORG", 0), (3, 4, "LOC", 1)]
    assert spans(decode(cands, [HF, HF])) == [(3, 4, "LOC", 0)]


def test_nesting_aware_resolves_crossing_candidates_by_score():
    cands = [Candidate(0, 3, "A", 0.7), Candidate(2, 5, "B", 0.8), Candidate(4, 6, "C", 0.75)]
    # B beats A (crossing); C crosses B and scores lower: only B.
    assert spans(decode(cands, [NA, NA])) == [(2, 5, "B", 0)]
    cands[1] = Candidate(2, 5, "B", 0.6)
    assert spans(decode(cands, [NA, NA])) == [(0, 3, "A", 0), (4, 6, "C", 0)]


def test_nesting_aware_honours_max_depth():
    cands = [Candidate(0, 5, "A", 0.6), Candidate(1, 4, "B", 0.7), Candidate(2, 3, "C", 0.9)]
    assert spans(decode(cands, [NA, NA, NA])) == [(0, 5, "A", 0), (1, 4, "B", 1), (2, 3, "C", 2)]
    # Two levels: C and B come first (C at depth 1 inside B); A would push C to depth 2.
    assert spans(decode(cands, [NA, NA])) == [(1, 4, "B", 0), (2, 3, "C", 1)]
    # One level: flat, the same as highest-first.
    assert spans(decode(cands, [NA])) == [(2, 3, "C", 0)] == spans(decode(cands, [HF]))


def test_nesting_aware_applies_each_levels_thresholds_at_the_final_depth():
    cands = [Candidate(0, 4, "ORG", 0.9), Candidate(2, 4, "LOC", 0.6), Candidate(5, 6, "LOC", 0.6)]
    inner_strict = [NA, Level("nesting-aware", 0.7)]
    # LOC(2, 4) is inner (needs 0.7); LOC(5, 6) is outer (needs 0.5).
    assert spans(decode(cands, inner_strict)) == [(0, 4, "ORG", 0), (5, 6, "LOC", 0)]
    # An inner span kept first is not pushed down a level whose threshold it fails.
    cands = [Candidate(0, 4, "ORG", 0.55), Candidate(2, 4, "LOC", 0.6)]
    assert spans(decode(cands, inner_strict)) == [(2, 4, "LOC", 0)]
    per_label = [Level("nesting-aware", 0.5, {"LOC": 0.95}), Level("nesting-aware", 0.5)]
    assert spans(decode(cands, per_label)) == [(0, 4, "ORG", 0), (2, 4, "LOC", 1)]
    # A candidate below the outer threshold is kept inside a span that passes it.
    low_inner = [Level("nesting-aware", 0.8), Level("nesting-aware", 0.3)]
    cands = [Candidate(0, 4, "ORG", 0.9), Candidate(2, 4, "LOC", 0.4), Candidate(6, 7, "LOC", 0.4)]
    assert spans(decode(cands, low_inner)) == [(0, 4, "ORG", 0), (2, 4, "LOC", 1)]


def test_nesting_aware_same_bounds_and_ties_are_deterministic():
    same = [Candidate(0, 2, "A", 0.9), Candidate(0, 2, "B", 0.8)]
    assert spans(decode(same, [NA, NA])) == [(0, 2, "A", 0)]
    # Equal scores: the earlier, then the longer candidate goes first, whatever the input order.
    tie = [Candidate(1, 3, "B", 0.8), Candidate(0, 2, "A", 0.8), Candidate(0, 3, "C", 0.8)]
    expected = [(0, 3, "C", 0), (0, 2, "A", 1)]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        assert spans(decode([tie[i] for i in order], [NA, NA])) == expected


def test_a_flat_outer_level_can_be_followed_by_nesting_aware_inner_levels():
    cands = [Candidate(0, 6, "A", 0.9), Candidate(1, 5, "B", 0.6), Candidate(2, 3, "C", 0.95)]
    assert spans(decode(cands, [LF, NA, NA])) == [(0, 6, "A", 0), (1, 5, "B", 1), (2, 3, "C", 2)]
    assert spans(decode(cands, [LF, HF, HF])) == [(0, 6, "A", 0), (2, 3, "C", 1)]


def random_candidates(rng, n_tokens, max_length=5, per_token=3):
    cands = []
    for _ in range(n_tokens * per_token):
        start = rng.randrange(n_tokens)
        end = min(n_tokens, start + rng.randint(1, max_length))
        cands.append(Candidate(start, end, rng.choice("ABC"), round(rng.random(), 3)))
    return cands


def brute_force_nesting_aware(cands, levels):
    """The nesting-aware rule written as plainly as possible (quadratic), for comparison."""
    pool = sorted((c for c in cands if any(lv.passes(c) for lv in levels)),
                  key=lambda c: (-c.score, c.start, -c.end, c.label))
    kept, waiting = [], []

    def depth_in(spans, span):
        return sum(contains((o.start, o.end), (span.start, span.end)) for o in spans)

    def try_keep(cand):
        nonlocal kept
        bounds = [(c.start, c.end) for c in kept]
        if any(crosses((cand.start, cand.end), b) for b in bounds):
            return
        trial = kept + [cand]
        if any(depth_in(trial, c) >= len(levels) or not levels[depth_in(trial, c)].passes(c) for c in kept):
            return
        d = depth_in(trial, cand)
        if d < len(levels) and levels[d].passes(cand):
            kept = trial
            for w in sorted(waiting, key=pool.index):
                if contains((cand.start, cand.end), (w.start, w.end)):
                    waiting.remove(w)
                    try_keep(w)
        elif any(lv.passes(cand) for lv in levels[d + 1:]):
            waiting.append(cand)

    for cand in pool:
        try_keep(cand)
    return sorted((c, depth_in(kept, c)) for c in kept)


def test_nesting_aware_matches_the_plain_rule_on_random_tables():
    rng = random.Random(0)
    for trial in range(200):
        cands = random_candidates(rng, rng.randint(1, 30))
        levels = [Level("nesting-aware", rng.choice([0.3, 0.5]), {"A": rng.choice([0.2, 0.6])})] + [
            Level("nesting-aware", rng.choice([0.2, 0.4, 0.7]))] * rng.randint(0, 2)
        assert sorted(decode(cands, levels)) == brute_force_nesting_aware(cands, levels), trial


def test_level_by_level_decoding_keeps_its_old_answers_on_random_tables():
    def old_decode(candidates, levels):  # the recursion as it was: scan every candidate per kept span
        algorithms = {"highest-first": highest_first, "longest-first": longest_first}
        found = []

        def level(cands, depth):
            for span in algorithms[levels[depth].algorithm]([c for c in cands if levels[depth].passes(c)]):
                found.append((span, depth))
                if depth + 1 < len(levels):
                    inside = [c for c in cands if span.start <= c.start and c.end <= span.end
                              and (c.start, c.end) != (span.start, span.end)]
                    if inside:
                        level(inside, depth + 1)
        level(list(candidates), 0)
        return sorted(found, key=lambda item: (item[0].start, -item[0].end, item[1]))

    rng = random.Random(1)
    for trial in range(200):
        cands = random_candidates(rng, rng.randint(1, 30))
        levels = [rng.choice([HF, LF])] + [rng.choice([HF, LF, Level("highest-first", 0.3)])] * rng.randint(0, 2)
        assert decode(cands, levels) == old_decode(cands, levels), trial


def dense_candidates(n_tokens, max_length=7):
    """Every fragment of up to max_length tokens, with scores that keep many spans at all depths."""
    rng = random.Random(2)
    return [Candidate(s, s + k, "AB"[k % 2], rng.random()) for s in range(n_tokens)
            for k in range(1, max_length + 1) if s + k <= n_tokens]


def test_decoding_work_grows_linearly_with_the_candidates(monkeypatch):
    """Span comparisons (span_geometry.contains, which every pairwise test in decoding goes
    through) for 2,000 and 20,000 dense candidates: about 10x, where the old scan of every
    candidate per kept span made about 100x. Counted, not timed, so the test is exact."""
    import spacy_fofe.pipeline.decoding as decoding

    calls = [0]

    def counting_contains(outer, inner):
        calls[0] += 1
        return contains(outer, inner)

    monkeypatch.setattr(decoding, "contains", counting_contains)
    small, large = dense_candidates(2000 // 7), dense_candidates(20000 // 7)
    levels = {"nesting-aware": [Level("nesting-aware", 0.2)] * 3,
              "highest-first": [Level("highest-first", 0.2)] + [Level("highest-first", 0.1)] * 2,
              "longest-first": [Level("longest-first", 0.2)] + [Level("highest-first", 0.1)] * 2}
    for name, lv in levels.items():
        counts = []
        for candidates in (small, large):
            calls[0] = 0
            decode(candidates, lv)
            counts.append(calls[0])
        assert counts[0] > 100, (name, counts)  # the count measures real work
        assert counts[1] / counts[0] < 12, (name, counts)


def test_span_geometry():
    assert contains((0, 3), (1, 2)) and contains((0, 3), (0, 3 - 1)) and not contains((0, 3), (0, 3))
    assert crosses((0, 3), (2, 5)) and crosses((1, 2), (1, 2)) and not crosses((0, 3), (1, 2))
    assert not crosses((0, 2), (2, 4))
    bounds = [(0, 5), (1, 3), (1, 3), (6, 7), (6, 8), (2, 9)]
    assert nested_flags(bounds) == [False, True, True, True, True, False]


def test_tuning_changes_no_setting_when_nothing_raises_dev_f1():
    from spacy_fofe.training.tune import tune_decoding

    candidates = [[Candidate(0, 2, "ORG", 0.9), Candidate(1, 2, "LOC", 0.8)]]
    gold = [{(0, 2, "ORG"), (1, 2, "LOC")}]  # already perfect
    tuned, before, after = tune_decoding(candidates, gold, dict(NESTED_CFG, decoding="nesting-aware"), ["ORG", "LOC"])
    assert before == after == 1.0
    assert tuned == dict(NESTED_CFG, decoding="nesting-aware")  # nested_threshold stays None


def test_tuning_on_a_dev_file_without_gold_spans_is_an_error_and_writes_nothing(trained, tmp_path):
    from spacy.tokens import DocBin

    from spacy_fofe.training.tune import tune_pipeline

    trained.to_disk(tmp_path / "model")
    DocBin(docs=[trained.make_doc("Ann Lee lives in Toronto .")]).to_disk(tmp_path / "dev.spacy")
    with pytest.raises(ValueError, match="no gold spans under doc.spans\\['sc'\\] or doc.ents.*nothing was written"):
        tune_pipeline(tmp_path / "model", tmp_path / "dev.spacy", tmp_path / "tuned")
    assert not (tmp_path / "tuned").exists()


@pytest.mark.parametrize("levels", [[HF], [HF, HF], [NA], [NA, NA], [Level("longest-first", 0.4, {"B": 0.7})],
                                    [Level("nesting-aware", 0.6, {"A": 0.3}), Level("highest-first", 0.5)]])
def test_batch_decoding_equals_each_docs_decoding(levels):
    """decode_batch decides the candidates that overlap no other of their doc by array work and decodes each
    cluster of overlapping ones alone: the same spans and depths as decoding every doc alone, on random score
    tables where most docs have no overlapping candidates and some have nested and crossing ones, in one
    cluster or in several (docs of 40 tokens), among candidates that pass no level's threshold."""
    rng = numpy.random.default_rng(0)
    rows, label_ids, scores = [], [], []
    for doc in range(300):
        taken = set()
        for _ in range(rng.integers(0, 4 if doc % 3 else 8 if doc % 2 else 16)):
            start = int(rng.integers(0, 12 if doc % 2 else 40))
            end = start + int(rng.integers(1, 5))
            if doc % 3 and any(t in taken for t in range(start, end)):
                continue  # two docs in three without overlapping candidates
            if (start, end) in {(s, e) for _, s, e in rows if _ == doc}:
                continue
            taken.update(range(start, end))
            rows.append((doc, start, end))
            label_ids.append(int(rng.integers(0, 2)))
            scores.append(float(rng.uniform(0.2, 1.0)))
    order = sorted(range(len(rows)), key=rows.__getitem__)
    table = CandidateTable(numpy.asarray([rows[i] for i in order]), numpy.asarray([label_ids[i] for i in order]),
                           numpy.asarray([scores[i] for i in order], dtype="float32"), 301, ["A", "B"])
    batch = decode_batch(table, levels)
    assert [decode(candidates, levels) for candidates in table.per_doc()] == batch
    assert sum(map(len, batch)) > 200 and batch[300] == []
    assert decode_batch(CandidateTable.empty(2, ["A"]), levels) == [[], []]
    with pytest.raises(ValueError, match="Unknown decoding algorithm 'best-guess'"):
        decode_batch(CandidateTable.empty(2, ["A"]), [Level("best-guess", 0.5)])  # even with nothing to decode
