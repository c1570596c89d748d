"""Scores of fofe_ner: span P/R/F over all levels and per label, the level-aware strict
metric of GermEval 2014, and entity P/R/F."""

from typing import Any, Dict, Iterable, List, Set, Tuple

from spacy.scorer import PRFScore, Scorer, get_ner_prf
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry

from .gold import gold_spans, same_tokens
from .span_geometry import bounds_of, nested_flags


def score_fofe_ner(
    examples: Iterable[Example], *, spans_key: str = "sc", ents: str = "overwrite", **kwargs: Any
) -> Dict[str, Any]:
    """`spans_{key}_p/r/f` and `spans_{key}_per_type` over every level (overlaps allowed),
    and spaCy's `ents_*` scores when the component writes doc.ents."""
    examples = list(examples)
    scores = Scorer.score_spans(
        examples,
        f"spans_{spans_key}",
        getter=lambda doc, attr: gold_spans(doc, spans_key),
        has_annotation=lambda doc: spans_key in doc.spans or doc.has_annotation("ENT_IOB"),
        allow_overlap=True,
    )
    scores.update(score_levels(examples, spans_key))
    if ents != "off":
        scores.update(get_ner_prf(examples))
    return scores


def span_levels(doc: Doc, spans_key: str, predicted: bool) -> List[Set[Tuple[int, int, str]]]:
    """[outer spans, inner spans] of a doc, each as (start, end, label).

    Gold levels come from doc.spans[f"{key}_level1"], [f"{key}_level2"], ... when the
    converter wrote them; predicted levels from the decoded depths in the span group's
    attrs. Otherwise a span is inner when another span strictly contains it. Depth 2 and
    below count as inner (GermEval has two levels).
    """
    spans = list(gold_spans(doc, spans_key))
    if not predicted and f"{spans_key}_level1" in doc.spans:
        levels = [{(s.start, s.end, s.label_) for s in doc.spans[f"{spans_key}_level1"]}, set()]
        i = 2
        while f"{spans_key}_level{i}" in doc.spans:
            levels[1] |= {(s.start, s.end, s.label_) for s in doc.spans[f"{spans_key}_level{i}"]}
            i += 1
        return levels
    depths = doc.spans[spans_key].attrs.get("depths") if spans_key in doc.spans else None
    if depths is None or len(depths) != len(spans):
        depths = [int(flag) for flag in nested_flags(bounds_of(spans))]
    levels: List[Set[Tuple[int, int, str]]] = [set(), set()]
    for span, depth in zip(spans, depths):
        levels[min(depth, 1)].add((span.start, span.end, span.label_))
    return levels


def score_levels(examples: Iterable[Example], spans_key: str) -> Dict[str, Any]:
    """GermEval 2014's strict metric: a span counts only on its own level (outer or inner).

    Returns spans_{key}_outer_p/r/f, _inner_p/r/f, and _strict_p/r/f for both levels
    together (the official "combined" figure), on the reference's tokens (`predicted_levels`).
    A level with neither gold nor predicted spans (the inner level of flat data) scores None, as
    spaCy's `Scorer.score_spans` scores a key with nothing to score.
    """
    per_level = [PRFScore(), PRFScore()]
    for eg in examples:
        if not (spans_key in eg.reference.spans or eg.reference.has_annotation("ENT_IOB")):
            continue
        gold = span_levels(eg.reference, spans_key, predicted=False)
        pred = predicted_levels(eg, spans_key)
        for score, g, p in zip(per_level, gold, pred):
            score.score_set(p, g)
    combined = PRFScore()
    for score in per_level:
        combined += score
    out: Dict[str, Any] = {}
    for name, score in (("outer", per_level[0]), ("inner", per_level[1]), ("strict", combined)):
        scored = len(score) > 0  # true positives, false positives and false negatives
        out.update({f"spans_{spans_key}_{name}_{metric}": value if scored else None
                    for metric, value in (("p", score.precision), ("r", score.recall), ("f", score.fscore))})
    return out


def predicted_levels(eg: Example, spans_key: str) -> List[Set[Tuple[int, int, str]]]:
    """`span_levels` of the predicted doc on the reference's tokens, so they compare with the gold
    levels when the tokenizations differ; a span that does not align is left out, as spaCy's
    span scorer leaves it out."""
    levels = span_levels(eg.predicted, spans_key, predicted=True)
    if same_tokens(eg.predicted, eg.reference):
        return levels
    doc = eg.predicted
    return [{(span.start, span.end, span.label_) for span in eg.get_aligned_spans_x2y(
        [Span(doc, start, end, label=label) for start, end, label in sorted(level)], allow_overlap=True)}
        for level in levels]


@registry.scorers("spacy_fofe.fofe_ner_scorer.v1")
def make_fofe_ner_scorer():
    return score_fofe_ner
