"""Scores of fofe_ner: span P/R/F over all levels and per label, plus entity P/R/F."""

from typing import Any, Dict, Iterable

from spacy.scorer import Scorer, get_ner_prf
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry


def gold_spans(doc: Doc, spans_key: str):
    """The spans of `doc` under `spans_key`, or its entities when it has no such group.

    The same rule serves training and scoring, so a flat corpus converted with
    `spacy convert` (gold in doc.ents) trains and scores without extra settings.
    """
    return doc.spans[spans_key] if spans_key in doc.spans else doc.ents


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
    if ents != "off":
        scores.update(get_ner_prf(examples))
    return scores


@registry.scorers("spacy_fofe.fofe_ner_scorer.v1")
def make_fofe_ner_scorer():
    return score_fofe_ner
