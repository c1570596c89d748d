"""Error analysis of predicted (nested) spans against gold, and its HTML page.

Per nesting level (outer, inner: as the level-aware scores count them), each gold span that
was not predicted exactly is a "label" error (a prediction with its bounds and another
label), a "boundary" error (an overlapping prediction with other bounds) or "missed"; each
prediction that overlaps no gold span of its level is "spurious".

`gold_fates` says why, from the component's own probabilities: what became of each gold span.
`seen_in_training` splits recall and precision by whether a span's text carries its label in the
training data: a model that misses mostly unseen names needs features that generalise (word
classes, subword features, context), one that misses seen names needs more memory of them.
"""

import bisect
import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy
from spacy import displacy
from spacy.scorer import PRFScore
from spacy.tokens import Doc, Span
from spacy.training import Example

from ..ml.fragments import fragment_rows
from ..pipeline.gold import gold_spans, on_whitespace, same_tokens
from ..pipeline.scoring import predicted_levels, span_levels

LEVELS = ("outer", "inner")
KINDS = ("missed", "boundary", "label", "spurious")
FATES = ("found", "other level", "too long", "not scored", "no entity", "other label", "below threshold",
         "decoding")
# How a span's text occurs in the training data (`seen_in_training`).
SEEN = ("seen", "seen with another label", "unseen")
SEEN_COUNTS = ("gold", "found", "predicted", "correct")
SEEN_HEADER = ("text in training", "gold", "found", "R", "predicted", "correct", "P")  # `seen_rows`' columns
SpanTuple = Tuple[int, int, str]


@dataclass
class DocErrors:
    """The errors of one doc: (level, kind, span) triples."""

    index: int
    errors: List[Tuple[str, str, SpanTuple]] = field(default_factory=list)


@dataclass
class Analysis:
    """Counts per level and kind, P/R/F per level and label, and each doc's errors."""

    kinds: Counter = field(default_factory=Counter)  # (level, kind) -> count
    prf: Dict[Tuple[str, str], PRFScore] = field(default_factory=dict)  # (level, label or "ALL") -> score
    docs: List[DocErrors] = field(default_factory=list)
    fates: Counter = field(default_factory=Counter)  # (level, fate) -> count, from gold_fates
    seen: Optional[Counter] = None  # from seen_in_training, when the training data was given

    def score(self, level: str, label: str = "ALL") -> PRFScore:
        return self.prf.setdefault((level, label), PRFScore())


def analyse(examples: Iterable[Example], spans_key: str) -> Analysis:
    """Compare each example's predicted spans with its gold, level by level, on the reference's tokens."""
    analysis = Analysis()
    for index, eg in enumerate(examples):
        doc_errors = DocErrors(index)
        gold_levels = span_levels(eg.reference, spans_key, predicted=False)
        pred_levels = predicted_levels(eg, spans_key)
        for level, gold, pred in zip(LEVELS, gold_levels, pred_levels):
            analysis.score(level).score_set(pred, gold)
            for label in {s[2] for s in gold | pred}:
                analysis.score(level, label).score_set({s for s in pred if s[2] == label},
                                                       {s for s in gold if s[2] == label})
            for kind, span in classify(gold, pred):
                analysis.kinds[level, kind] += 1
                doc_errors.errors.append((level, kind, span))
        analysis.docs.append(doc_errors)
    return analysis


def gold_fates(ner, examples: Sequence[Example], batch_size: int = 256) -> Counter:
    """(level, fate) -> count over every gold span: "found" on its level, found on the "other level"
    (e.g. an inner span whose outer one was missed is predicted as outer), or why it was not predicted:
    "too long" (over max_length), "not scored" (no fragment of the predicted tokens has its bounds,
    or the fragment crosses a sentence start or has whitespace at an edge), or, from the
    component's probabilities for its fragment (`_fate`): "no entity", "other label", "below
    threshold" or "decoding" (its label passed, but the decoder kept an overlapping span).
    Scores the predicted docs of the batches that have such spans again.
    """
    fates: Counter = Counter()
    levels, labels = ner.levels(), list(ner.labels)
    key, max_length = ner.key, ner.cfg["max_length"]
    for lo in range(0, len(examples), batch_size):
        batch = examples[lo:lo + batch_size]
        unexplained = []  # (level, doc in the batch, start and end on the predicted tokens, label)
        for i, eg in enumerate(batch):
            pred, same = predicted_levels(eg, key), same_tokens(eg.predicted, eg.reference)
            for level, gold in enumerate(span_levels(eg.reference, key, predicted=False)):
                for span in sorted(gold):
                    if span in pred[level]:
                        fates[LEVELS[level], "found"] += 1
                    elif span in pred[1 - level]:
                        fates[LEVELS[level], "other level"] += 1
                    elif span[1] - span[0] > max_length:
                        fates[LEVELS[level], "too long"] += 1
                    else:
                        on_predicted = _on_predicted_tokens(eg, span, same)
                        if on_predicted is None or on_whitespace(on_predicted):
                            fates[LEVELS[level], "not scored"] += 1
                        else:
                            unexplained.append((level, i, on_predicted.start, on_predicted.end, span[2]))
        if not unexplained:
            continue
        fragments, scores = ner.predict([eg.predicted for eg in batch])
        rows = fragment_rows(fragments, [(i, start, end) for _, i, start, end, _ in unexplained])
        for (level, _, _, _, label), row in zip(unexplained, rows.tolist()):
            fates[LEVELS[level], "not scored" if row < 0 else
                  _fate(scores[row], label, labels, levels[min(level, len(levels) - 1)])] += 1
    return fates


def training_mentions(docs: Iterable[Doc], spans_key: str) -> Dict[str, Set[str]]:
    """Each span text of the docs' gold (doc.spans[key], or doc.ents), with the labels it carries."""
    mentions: Dict[str, Set[str]] = {}
    for doc in docs:
        for span in gold_spans(doc, spans_key):
            mentions.setdefault(span.text, set()).add(span.label_)
    return mentions


def seen_in_training(examples: Iterable[Example], spans_key: str, mentions: Dict[str, Set[str]]) -> Counter:
    """(count, category) -> number, over every level: for "gold" and "found" (gold spans predicted
    with their bounds and label) and for "predicted" and "correct" (predictions that are gold spans),
    the category of the span's text in `mentions` (`training_mentions`): "seen" with this label,
    "seen with another label" only, or "unseen"; (count, category, label) -> number, the same per
    label. Texts are compared exactly, as written."""
    counts: Counter = Counter()
    for eg in examples:
        gold = set().union(*span_levels(eg.reference, spans_key, predicted=False))
        pred = set().union(*predicted_levels(eg, spans_key))
        for spans, total, hit, other in ((gold, "gold", "found", pred), (pred, "predicted", "correct", gold)):
            for span in spans:
                category = _seen(eg.reference[span[0]:span[1]].text, span[2], mentions)
                for key in ((category,), (category, span[2])):
                    counts[(total, *key)] += 1
                    counts[(hit, *key)] += span in other
    return counts


def seen_counts(counts: Counter, label: Optional[str] = None) -> Dict[str, Dict[str, int]]:
    """{category: {"gold", "found", "predicted", "correct": number}} of `seen_in_training`'s counts,
    over every label or for one (what `fofe evaluate --output` writes)."""
    key = () if label is None else (label,)
    return {category: {count: counts[(count, category, *key)] for count in SEEN_COUNTS} for category in SEEN}


def seen_per_type(counts: Counter) -> Dict[str, Dict[str, Dict[str, int]]]:
    """`seen_counts` of each label that `seen_in_training` counted."""
    return {label: seen_counts(counts, label) for label in sorted({key[2] for key in counts if len(key) == 3})}


def seen_recall(counts: Counter, category: str, label: str) -> str:
    """Recall of the label's gold spans of that category (`seen_in_training`), "-" without any."""
    return _percent(counts["found", category, label], counts["gold", category, label])


def seen_rows(counts: Counter) -> List[list]:
    """[category, gold, found, recall, predicted, correct, precision] per category (`fofe evaluate`'s table)."""
    return [[category, counts["gold", category], counts["found", category],
             _percent(counts["found", category], counts["gold", category]), counts["predicted", category],
             counts["correct", category], _percent(counts["correct", category], counts["predicted", category])]
            for category in SEEN]


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}" if whole else "-"


def _seen(text: str, label: str, mentions: Dict[str, Set[str]]) -> str:
    labels = mentions.get(text)
    return SEEN[2] if not labels else SEEN[0] if label in labels else SEEN[1]


def fate_rows(fates: Counter) -> List[list]:
    """[level, gold spans, count of each fate] per level: the table `fofe evaluate` prints."""
    return [[level, sum(fates[level, fate] for fate in FATES), *(fates[level, fate] for fate in FATES)]
            for level in LEVELS]


def _on_predicted_tokens(eg: Example, span: SpanTuple, same: bool):
    """The gold span on the predicted doc's tokens (`same`: the docs have the same tokens), or None
    where the tokenizations disagree on it."""
    if same:
        return Span(eg.predicted, span[0], span[1], label=span[2])
    aligned = eg.get_aligned_spans_y2x([Span(eg.reference, *span)], allow_overlap=True)
    return aligned[0] if aligned else None


def _fate(probs: numpy.ndarray, label: str, labels: List[str], level) -> str:
    """Why a scored gold fragment was not predicted, from its probabilities (NONE first). Its
    candidate is its most probable label but NONE: "decoding" when that is the gold label and
    passes its threshold, "below threshold" when it is the gold label and beats NONE but not the
    threshold, "other label" when another label passes or beats NONE, else "no entity"."""
    best = int(numpy.argmax(probs[1:]))
    passes = probs[1 + best] >= level.label_thresholds.get(labels[best], level.threshold)
    if labels[best] != label:
        return "other label" if passes or probs[1 + best] > probs[0] else "no entity"
    if passes:
        return "decoding"
    return "below threshold" if probs[1 + best] > probs[0] else "no entity"


def classify(gold: Set[SpanTuple], pred: Set[SpanTuple]) -> List[Tuple[str, SpanTuple]]:
    """(kind, span) for every error: gold spans missed, with wrong bounds or label; spurious predictions.

    Overlaps are found by bisection among spans sorted by start, looking back only as far as
    the longest span reaches, so a long doc costs what its spans cost."""
    wrong_gold, wrong_pred, all_gold = sorted(gold - pred), sorted(pred - gold), sorted(gold)
    pred_reach, gold_reach = _longest(wrong_pred), _longest(all_gold)
    errors = []
    for span in wrong_gold:
        near = _overlapping(span, wrong_pred, pred_reach)
        if any(p[:2] == span[:2] for p in near):
            errors.append(("label", span))
        elif near:
            errors.append(("boundary", span))
        else:
            errors.append(("missed", span))
    for span in wrong_pred:
        if not _overlapping(span, all_gold, gold_reach):
            errors.append(("spurious", span))
    return errors


def _longest(spans: Sequence[SpanTuple]) -> int:
    return max((end - start for start, end, _ in spans), default=0)


def _overlapping(span: SpanTuple, spans: Sequence[SpanTuple], longest: int) -> List[SpanTuple]:
    """The spans of `spans` (sorted, none longer than `longest`) that overlap `span`."""
    lo = bisect.bisect_left(spans, (span[0] - longest + 1,))
    hi = bisect.bisect_left(spans, (span[1],))
    return [s for s in spans[lo:hi] if s[1] > span[0]]


def write_html(analysis: Analysis, examples: Sequence[Example], spans_key: str, title: str,
               worst: int = 20) -> str:
    """One self-contained HTML page: the tables, then the `worst` docs with gold and
    predicted spans side by side (displaCy's span style, which draws nested spans)."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
    parts.append("<h2>Scores and errors per level</h2>")
    rows = []
    for level in LEVELS:
        score = analysis.score(level)
        rows.append([level, *_prf(score), *(analysis.kinds[level, kind] for kind in KINDS)])
    parts.append(_table(["level", "P", "R", "F", *KINDS], rows))
    if analysis.fates:
        parts.append("<h2>What became of the gold spans</h2>")
        parts.append(_table(["level", "gold", *FATES], fate_rows(analysis.fates)))
    if analysis.seen is not None:
        parts.append("<h2>Spans by whether their text is a training span</h2>")
        parts.append(_table(list(SEEN_HEADER), seen_rows(analysis.seen)))
    parts.append("<h2>Per label</h2>")
    labels = sorted({label for (_, label) in analysis.prf if label != "ALL"})
    rows = [[label, level, *_prf(analysis.prf[level, label])] for label in labels for level in LEVELS
            if (level, label) in analysis.prf]
    parts.append(_table(["label", "level", "P", "R", "F"], rows))
    ranked = sorted((d for d in analysis.docs if d.errors), key=lambda d: (-len(d.errors), d.index))[:worst]
    parts.append(f"<h2>The {len(ranked)} documents with the most errors</h2>")
    for doc_errors in ranked:
        eg = examples[doc_errors.index]
        listed = "".join(f"<li>{level} {kind}: {html.escape(_describe(eg.reference, span))}</li>"
                         for level, kind, span in doc_errors.errors)
        parts.append(f"<section class='doc'><h3>doc {doc_errors.index}: {len(doc_errors.errors)} errors</h3>"
                     f"<ul class='errors'>{listed}</ul><div class='pair'>"
                     f"<div><h4>gold</h4>{_render(eg.reference, spans_key)}</div>"
                     f"<div><h4>predicted</h4>{_render(eg.predicted, spans_key)}</div></div></section>")
    parts.append("</body></html>")
    return "\n".join(parts)


STYLE = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
.pair{display:flex;gap:2em}.pair>div{flex:1;min-width:0}.doc{border-top:2px solid #888;margin-top:2em}
.errors{font-size:90%}"""


def _prf(score: PRFScore) -> List[str]:
    return [f"{100 * score.precision:.2f}", f"{100 * score.recall:.2f}", f"{100 * score.fscore:.2f}"]


def _table(header: List[str], rows: List[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _describe(doc: Doc, span: SpanTuple) -> str:
    start, end, label = span
    return f"{doc[start:end].text!r} [{start}, {end}) {label}"


def _render(doc: Doc, spans_key: str) -> str:
    """displaCy's span rendering of the doc's spans (gold: doc.spans[key], or its entities)."""
    spans = list(gold_spans(doc, spans_key))
    if not spans:
        return f"<p class='plain'>{html.escape(doc.text)}</p><p><em>(no spans)</em></p>"
    shown = Doc(doc.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
    shown.spans[spans_key] = [Span(shown, s.start, s.end, label=s.label_) for s in spans]
    return displacy.render(shown, style="span", options={"spans_key": spans_key}, page=False, jupyter=False)
