"""What became of each gold span (`error_analysis.gold_fates`), on hand-made score tables, and how the
spans seen in training fare (`seen_in_training`)."""

import numpy
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example
from spacy.vocab import Vocab

from spacy_fofe.cli.error_analysis import (
    FATES,
    gold_fates,
    seen_counts,
    seen_in_training,
    seen_recall,
    seen_rows,
    training_mentions,
)
from spacy_fofe.ml.fragments import enumerate_fragments
from spacy_fofe.pipeline.decoding import Level

NONE, LOC, ORG = 0, 1, 2


class TableComponent:
    """Stands in for fofe_ner: fixed probabilities (NONE, LOC, ORG) per (doc, start, end), NONE elsewhere."""

    key = "sc"
    labels = ("LOC", "ORG")
    cfg = {"max_length": 3}

    def __init__(self, table):
        self.table = table
        self.predicted = 0

    def levels(self):
        return [Level("nesting-aware", 0.5, {"ORG": 0.7}), Level("nesting-aware", 0.8)]

    def predict(self, docs):
        self.predicted += len(docs)
        fragments = enumerate_fragments([len(doc) for doc in docs], self.cfg["max_length"])
        scores = numpy.zeros((len(fragments), 3), dtype="float32")
        scores[:, NONE] = 1.0
        for row, bounds in enumerate(map(tuple, fragments.tolist())):
            scores[row] = self.table.get(bounds, scores[row])
        return fragments, scores


def example(vocab, words, gold, predicted, depths, predicted_words=None, spaces=None):
    reference = Doc(vocab, words=words, spaces=spaces)
    reference.spans["sc"] = [Span(reference, s, e, label=label) for s, e, label in gold]
    doc = Doc(vocab, words=predicted_words or words, spaces=spaces)
    doc.spans["sc"] = SpanGroup(doc, name="sc", spans=[Span(doc, s, e, label=label) for s, e, label in predicted],
                                attrs={"depths": depths})
    return Example(doc, reference)


def probs(none, loc, org):
    return numpy.asarray([none, loc, org], dtype="float32")


def test_each_gold_span_is_found_or_given_the_reason_it_was_not():
    vocab = Vocab()
    words = "a b c d e f g h i j k l".split() + [" ", "z"]
    gold = [(0, 1, "LOC"),  # predicted on its level
            (2, 4, "ORG"), (2, 3, "LOC"), (3, 4, "LOC"),  # ORG missed; (3, 4) then predicted as outer
            (5, 9, "LOC"),  # four tokens: max_length is 3
            (9, 10, "LOC"), (10, 11, "ORG"), (11, 12, "LOC"),
            (12, 14, "LOC")]  # starts on a whitespace token
    predicted = [(0, 1, "LOC"), (2, 3, "LOC"), (3, 4, "LOC"), (10, 12, "LOC")]
    table = {(0, 2, 4): probs(0.35, 0.0, 0.65),  # ORG is the best label but under ORG's 0.7
             (0, 9, 10): probs(0.7, 0.3, 0.0),  # no label passes
             (0, 10, 11): probs(0.3, 0.6, 0.1),  # LOC passes, the gold is ORG
             (0, 11, 12): probs(0.1, 0.9, 0.0),  # passes; the decoder kept (10, 12) instead
             (0, 12, 14): probs(0.0, 1.0, 0.0)}
    eg = example(vocab, words, gold, predicted, depths=[0, 1, 0, 0],
                 spaces=[True] * 12 + [False, False])
    fates = gold_fates(TableComponent(table), [eg])
    assert {key: n for key, n in fates.items() if n} == {
        ("outer", "found"): 1, ("outer", "below threshold"): 1, ("outer", "too long"): 1,
        ("outer", "no entity"): 1, ("outer", "other label"): 1, ("outer", "decoding"): 1,
        ("outer", "not scored"): 1, ("inner", "found"): 1, ("inner", "other level"): 1}
    assert set(key[1] for key in fates) <= set(FATES)


def test_inner_spans_use_the_inner_threshold_and_other_tokenizations_are_not_scored():
    vocab = Vocab()
    gold = [(0, 2, "ORG"), (1, 2, "LOC")]
    table = {(0, 0, 2): probs(0.0, 0.0, 1.0), (0, 1, 2): probs(0.3, 0.7, 0.0)}  # LOC passes 0.5, not 0.8
    eg = example(vocab, ["x", "y"], gold, [(0, 2, "ORG")], depths=[0])
    component = TableComponent(table)
    assert dict(gold_fates(component, [eg])) == {("outer", "found"): 1, ("inner", "below threshold"): 1}
    # "New" of "New" "-York" is no token span of "New-" "York"; "New-York" is, and was scored
    split = example(vocab, ["New", "-York"], [(0, 1, "LOC"), (0, 2, "ORG")], [], depths=[],
                    predicted_words=["New-", "York"], spaces=[False, False])
    fates = gold_fates(TableComponent({}), [split])
    assert dict(fates) == {("inner", "not scored"): 1, ("outer", "no entity"): 1}


def test_documents_are_scored_batch_by_batch_and_only_when_something_was_missed():
    vocab = Vocab()
    found = [example(vocab, ["a", "b"], [(0, 1, "LOC")], [(0, 1, "LOC")], depths=[0]) for _ in range(5)]
    missed = [example(vocab, ["a", "b"], [(1, 2, "LOC")], [], depths=[]) for _ in range(5)]
    component = TableComponent({(d, 1, 2): probs(0.6, 0.4, 0.0) for d in range(2)})
    fates = gold_fates(component, found + missed, batch_size=2)
    assert dict(fates) == {("outer", "found"): 5, ("outer", "no entity"): 5}
    assert component.predicted == 6  # batches [found, missed] once and [missed, missed] twice; [found, found] not


def test_recall_and_precision_are_split_by_whether_the_text_is_a_training_span():
    vocab = Vocab()
    train = Doc(vocab, words="Ann Lee met Bo in Paris and Ann".split())
    train.spans["sc"] = [Span(train, 0, 2, label="PER"), Span(train, 3, 4, label="PER"), Span(train, 5, 6, label="LOC"),
                         Span(train, 7, 8, label="ORG")]
    mentions = training_mentions([train], "sc")
    assert mentions == {"Ann Lee": {"PER"}, "Bo": {"PER"}, "Paris": {"LOC"}, "Ann": {"ORG"}}
    words = "Ann Lee saw Paris Hilton and Ann in Oslo".split()
    gold = [(0, 2, "PER"),  # seen, found
            (3, 5, "PER"), (3, 4, "LOC"),  # unseen, found; seen (inner), missed
            (6, 7, "PER"),  # seen with another label (ORG), found
            (8, 9, "LOC")]  # unseen, missed
    predicted = [(0, 2, "PER"), (3, 5, "PER"), (6, 7, "PER"), (0, 1, "ORG"), (7, 8, "LOC")]
    eg = example(vocab, words, gold, predicted, depths=[0, 0, 0, 1, 0])
    counts = seen_in_training([eg], "sc", mentions)
    assert {key: n for key, n in counts.items() if n and len(key) == 2} == {
        ("gold", "seen"): 2, ("found", "seen"): 1, ("gold", "seen with another label"): 1,
        ("found", "seen with another label"): 1, ("gold", "unseen"): 2, ("found", "unseen"): 1,
        # predictions: "Ann Lee" PER seen, right; "Ann" ORG seen, wrong; "Ann" PER other label, right;
        # "Paris Hilton" unseen, right; "in" unseen, wrong
        ("predicted", "seen"): 2, ("correct", "seen"): 1, ("predicted", "seen with another label"): 1,
        ("correct", "seen with another label"): 1, ("predicted", "unseen"): 2, ("correct", "unseen"): 1}
    assert seen_rows(counts)[0] == ["seen", 2, 1, "50.00", 2, 1, "50.00"]
    assert seen_recall(counts, "unseen", "PER") == "100.00" and seen_recall(counts, "unseen", "LOC") == "0.00"
    assert seen_recall(counts, "seen", "ORG") == "-"  # no ORG gold span
    assert seen_counts(counts, "LOC")["seen"] == {"gold": 1, "found": 0, "predicted": 0, "correct": 0}
    assert seen_counts(counts)["unseen"] == {"gold": 2, "found": 1, "predicted": 2, "correct": 1}
    assert seen_rows(seen_in_training([eg], "sc", {}))[:2] == [["seen", 0, 0, "-", 0, 0, "-"],
                                                                ["seen with another label", 0, 0, "-", 0, 0, "-"]]
