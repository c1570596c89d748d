"""Fragment enumeration, gold targets and NONE sampling."""

import numpy

from spacy_fofe.ml.fragments import (
    DISJOINT,
    EXACT,
    IGNORED,
    OVERLAP,
    edge_flagged,
    enumerate_fragments,
    fragment_rows,
    fragment_targets,
    sample_fragments,
    within_sentences,
)


def test_enumerate_fragments_lists_every_span_up_to_n_once():
    fragments = enumerate_fragments([4, 0, 1, 2], 3)
    expected = [(0, s, e) for s in range(4) for e in range(s + 1, min(s + 3, 4) + 1)]
    expected += [(2, 0, 1), (3, 0, 1), (3, 0, 2), (3, 1, 2)]
    assert sorted(map(tuple, fragments.tolist())) == sorted(expected)
    assert len(fragments) == len(set(map(tuple, fragments.tolist())))


def test_enumerate_fragments_of_no_tokens_is_empty():
    assert enumerate_fragments([], 7).shape == (0, 3)
    assert enumerate_fragments([0, 0], 7).shape == (0, 3)


def test_targets_label_exact_overlap_and_disjoint_fragments():
    fragments = enumerate_fragments([6], 3)
    labels, kinds = fragment_targets(fragments, [[(1, 3, 2)]], [[(5, 6)]])
    by_span = {(s, e): (int(lab), int(k)) for (_, s, e), lab, k in zip(fragments, labels, kinds)}
    assert by_span[(1, 3)] == (2, EXACT)
    assert by_span[(2, 3)] == (0, OVERLAP) and by_span[(0, 2)] == (0, OVERLAP)
    assert by_span[(3, 5)] == (0, DISJOINT)
    assert by_span[(5, 6)] == (0, IGNORED) and by_span[(4, 6)] == (0, OVERLAP)


def test_targets_keep_the_first_label_of_a_span_given_twice():
    fragments = enumerate_fragments([3], 2)
    labels, kinds = fragment_targets(fragments, [[(0, 1, 1), (0, 1, 3)]])
    assert labels[0] == 1 and kinds[0] == EXACT


def test_sampling_keeps_all_gold_and_none_at_the_given_rates():
    rng = numpy.random.default_rng(0)
    kinds = numpy.asarray([EXACT] * 100 + [OVERLAP] * 20000 + [DISJOINT] * 20000 + [IGNORED] * 100)
    kept = sample_fragments(kinds, 0.36, 0.09, rng)
    kept_kinds = kinds[kept]
    assert (kept_kinds == EXACT).sum() == 100
    assert abs((kept_kinds == OVERLAP).sum() / 20000 - 0.36) < 0.02
    assert abs((kept_kinds == DISJOINT).sum() / 20000 - 0.09) < 0.01
    assert (kept_kinds == IGNORED).sum() == 0


def test_within_sentences_drops_exactly_the_fragments_that_cross_a_sentence_start():
    lengths = [5, 3]
    # doc 0: sentences [0, 2) and [2, 5); doc 1: no marked start but its first token
    flags = numpy.asarray([1, 0, 1, 0, 0, 1, 0, 0], dtype=bool)
    fragments = enumerate_fragments(lengths, 3)
    kept = within_sentences(fragments, lengths, flags)
    expected = [f for f in fragments.tolist() if not (f[0] == 0 and f[1] < 2 < f[2])]
    assert kept.tolist() == expected
    assert within_sentences(fragments[:0], lengths, flags).shape == (0, 3)


def test_edge_flagged_marks_the_fragments_whose_first_or_last_token_is_flagged():
    lengths = [4, 0, 3]
    flags = numpy.asarray([0, 1, 0, 0, 1, 0, 0], dtype=bool)  # doc 0: token 1; doc 2: token 0
    fragments = enumerate_fragments(lengths, 3)
    offsets = {0: 0, 2: 4}
    expected = [bool(flags[offsets[d] + s] or flags[offsets[d] + e - 1]) for d, s, e in fragments.tolist()]
    assert edge_flagged(fragments, lengths, flags).tolist() == expected
    flagged = [tuple(f) for f, e in zip(fragments.tolist(), expected) if e]
    assert flagged == [(0, 0, 2), (0, 1, 2), (0, 1, 3), (0, 1, 4), (2, 0, 1), (2, 0, 2), (2, 0, 3)]
    assert edge_flagged(fragments[:0], lengths, flags).shape == (0,)


def naive_targets(fragments, gold, ignored):
    """fragment_targets by its definition, one fragment at a time."""
    labels, kinds = [], []
    for d, s, e in fragments.tolist():
        same = [label for start, end, label in gold[d] if (start, end) == (s, e)]
        if same:
            labels.append(same[0]), kinds.append(EXACT)
        elif (s, e) in ignored[d]:
            labels.append(0), kinds.append(IGNORED)
        else:
            touching = [1 for start, end, *_ in gold[d] + ignored[d] if start < e and s < end]
            labels.append(0), kinds.append(OVERLAP if touching else DISJOINT)
    return labels, kinds


def test_targets_equal_their_definition_on_random_docs_with_nested_repeated_and_long_spans():
    rng = numpy.random.default_rng(7)
    lengths = rng.integers(0, 30, size=40).tolist()
    fragments = enumerate_fragments(lengths, 4)
    gold, ignored = [], []
    for n in lengths:
        spans = [(s, min(n, s + int(rng.integers(1, 7))), int(rng.integers(1, 4)))
                 for s in rng.integers(0, max(n, 1), size=rng.integers(0, 6)).tolist()] if n else []
        gold.append(spans + spans[:1])  # a span given twice keeps its first label
        starts = rng.integers(0, max(n, 1), size=rng.integers(0, 2)).tolist()
        ignored.append([(s, min(n, s + 2)) for s in starts] if n else [])
    labels, kinds = fragment_targets(fragments, gold, ignored)
    expected_labels, expected_kinds = naive_targets(fragments, gold, ignored)
    assert labels.tolist() == expected_labels and kinds.tolist() == expected_kinds
    assert {EXACT, OVERLAP, DISJOINT, IGNORED} <= set(kinds.tolist())


def test_fragment_rows_find_each_bounds_row_or_minus_one():
    rng = numpy.random.default_rng(0)
    lengths = [5, 0, 9, 1]
    fragments = enumerate_fragments(lengths, 3)
    fragments = fragments[rng.permutation(len(fragments))[: len(fragments) // 2]]  # a shuffled subset
    row_of = {tuple(f): i for i, f in enumerate(fragments.tolist())}
    wanted = [(int(d), int(s), int(s + n)) for d in range(4) for s in range(10) for n in range(1, 5)]
    assert fragment_rows(fragments, wanted).tolist() == [row_of.get(w, -1) for w in wanted]
    assert fragment_rows(fragments[:0], wanted[:3]).tolist() == [-1, -1, -1]
