"""Tune decoding on dev ("bias decoding", Tran et al.): per-level algorithm, thresholds, per-label thresholds.

A model trained with cross-entropy is not tuned for entity F1. The network runs once over
the dev set; every candidate setting is then scored by re-decoding the stored candidates.
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import spacy
from spacy.tokens import Span
from spacy.training import Corpus, Example

from .decoding import ALGORITHMS, Candidate, Level, decode, levels_from
from .scoring import gold_spans

GRID = [round(0.05 * i, 2) for i in range(2, 20)]  # 0.10 .. 0.95
Gold = Set[Tuple[int, int, str]]


def reference_map(eg: Example, candidates: List[Candidate]) -> Dict[Tuple[int, int], Optional[Tuple[int, int]]]:
    """Where spaCy's scorer puts each candidate's span in the reference tokens.

    Scorer.score_spans aligns predictions with Example.get_aligned_spans_x2y, which drops a
    span whose text differs from its aligned reference span (None here): such a prediction
    counts neither as right nor as wrong.
    """
    bounds = sorted({(c.start, c.end) for c in candidates})
    spans = [Span(eg.predicted, start, end) for start, end in bounds]
    mapped: Dict[Tuple[int, int], Optional[Tuple[int, int]]] = {}
    for bound, span in zip(bounds, spans):
        aligned = eg.get_aligned_spans_x2y([span], allow_overlap=True)
        mapped[bound] = (aligned[0].start, aligned[0].end) if aligned else None
    return mapped


def span_f1(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], levels: List[Level],
            maps: Optional[Sequence[Dict]] = None) -> float:
    """Span F1 over all levels of decoding `candidates` with `levels`, against `gold`.

    With `maps` (from `reference_map`), predictions are first put in the reference tokens,
    where gold is: the figure `spacy evaluate` reports.
    """
    tp = n_pred = n_gold = 0
    for i, (cands, doc_gold) in enumerate(zip(candidates, gold)):
        pred = {(c.start, c.end, c.label) for c, _ in decode(cands, levels)}
        if maps is not None:
            mapped = {(maps[i][(s, e)], label) for s, e, label in pred}
            pred = {(ref[0], ref[1], label) for ref, label in mapped if ref is not None}
        tp += len(pred & doc_gold)
        n_pred += len(pred)
        n_gold += len(doc_gold)
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0


def tune_decoding(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], cfg: Dict,
                  labels: Sequence[str], maps=None) -> Tuple[Dict, float, float]:
    """Coordinate search over the decoding settings of `cfg`; returns (new cfg, F1 before, F1 after)."""
    cfg = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
    before = best = span_f1(candidates, gold, levels_from(cfg), maps)

    def try_values(key, values, label=None):
        nonlocal best
        for value in values:
            trial = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
            if label is None:
                trial[key] = value
            else:
                trial["label_thresholds"][label] = value
            score = span_f1(candidates, gold, levels_from(trial), maps)
            if score > best:
                best = score
                cfg.clear()
                cfg.update(trial)

    try_values("decoding", list(ALGORITHMS))
    if cfg["nested"]:
        try_values("nested_decoding", list(ALGORITHMS))
    try_values("threshold", GRID)
    if cfg["nested"]:
        try_values("nested_threshold", GRID)
    for _ in range(2):  # two passes: each label's best depends a little on the others
        for label in labels:
            try_values("label_thresholds", GRID, label=label)
    return cfg, before, best


def tune_pipeline(model: Path, dev: Path, output: Path, component: str = "fofe_ner", batch_size: int = 256) -> None:
    """Load a pipeline, tune its fofe_ner decoding on a dev .spacy file, save it to `output`."""
    nlp = spacy.load(model)
    ner = nlp.get_pipe(component)
    # spaCy's own reader, so examples (and their tokenization) are those `spacy evaluate` uses.
    examples = list(Corpus(dev)(nlp))
    print(f"Scoring {len(examples)} dev docs once with {component} ...", flush=True)
    candidates: List[List[Candidate]] = []
    gold: List[Gold] = []
    maps: List[Dict] = []
    lowest = Level("highest-first", GRID[0])
    for i in range(0, len(examples), batch_size):
        batch = examples[i:i + batch_size]
        docs = [eg.predicted for eg in batch]
        for name, proc in nlp.pipeline:  # earlier components (e.g. a shared tok2vec) first
            if name == component:
                break
            docs = list(proc.pipe(docs))
        fragments, scores = ner.predict(docs)
        batch_candidates = ner.candidates(len(docs), fragments, scores, [lowest])
        candidates.extend(batch_candidates)
        maps.extend(reference_map(eg, cands) for eg, cands in zip(batch, batch_candidates))
        gold.extend({(s.start, s.end, s.label_) for s in gold_spans(eg.reference, ner.key)} for eg in batch)
        print(f"  {min(i + batch_size, len(examples))}/{len(examples)}", flush=True)
    new_cfg, before, after = tune_decoding(candidates, gold, ner.cfg, ner.labels, maps)
    keys = ["decoding", "nested_decoding", "threshold", "nested_threshold", "label_thresholds"]
    print(f"dev span F1 (as spacy evaluate scores it) before: {100 * before:.2f}  after: {100 * after:.2f}")
    for key in keys:
        if ner.cfg[key] != new_cfg[key]:
            print(f"  {key}: {ner.cfg[key]} -> {new_cfg[key]}")
    ner.cfg.update({key: new_cfg[key] for key in keys})
    nlp.to_disk(output)
    print(f"Saved tuned pipeline to {output}")
