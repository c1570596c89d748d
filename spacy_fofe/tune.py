"""Tune decoding on dev ("bias decoding", Tran et al.): per-level algorithm, thresholds, per-label thresholds.

A model trained with cross-entropy is not tuned for entity F1. The network runs once over
the dev set; every candidate setting is then scored by re-decoding the stored candidates.
"""

from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

import spacy
from spacy.tokens import DocBin
from spacy.training import Example

from .decoding import ALGORITHMS, Candidate, Level, decode, levels_from

GRID = [round(0.05 * i, 2) for i in range(2, 20)]  # 0.10 .. 0.95
Gold = Set[Tuple[int, int, str]]


def span_f1(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], levels: List[Level]) -> float:
    """Span F1 over all levels of decoding `candidates` with `levels`, against `gold`."""
    tp = n_pred = n_gold = 0
    for cands, doc_gold in zip(candidates, gold):
        pred = {(c.start, c.end, c.label) for c, _ in decode(cands, levels)}
        tp += len(pred & doc_gold)
        n_pred += len(pred)
        n_gold += len(doc_gold)
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0


def tune_decoding(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], cfg: Dict,
                  labels: Sequence[str]) -> Tuple[Dict, float, float]:
    """Coordinate search over the decoding settings of `cfg`; returns (new cfg, F1 before, F1 after)."""
    cfg = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
    before = best = span_f1(candidates, gold, levels_from(cfg))

    def try_values(key, values, label=None):
        nonlocal best
        for value in values:
            trial = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
            if label is None:
                trial[key] = value
            else:
                trial["label_thresholds"][label] = value
            score = span_f1(candidates, gold, levels_from(trial))
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
    examples = [Example(nlp.make_doc(doc.text), doc) for doc in DocBin().from_disk(dev).get_docs(nlp.vocab)]
    print(f"Scoring {len(examples)} dev docs once with {component} ...", flush=True)
    candidates: List[List[Candidate]] = []
    gold: List[Gold] = []
    lowest = Level("highest-first", GRID[0])
    for i in range(0, len(examples), batch_size):
        batch = examples[i:i + batch_size]
        docs = [eg.predicted for eg in batch]
        for name, proc in nlp.pipeline:  # earlier components (e.g. a shared tok2vec) first
            if name == component:
                break
            docs = list(proc.pipe(docs))
        fragments, scores = ner.predict(docs)
        candidates.extend(ner.candidates(len(docs), fragments, scores, [lowest]))
        gold.extend({(s.start, s.end, s.label_) for s in ner._aligned_gold(eg)} for eg in batch)
        print(f"  {min(i + batch_size, len(examples))}/{len(examples)}", flush=True)
    new_cfg, before, after = tune_decoding(candidates, gold, ner.cfg, ner.labels)
    keys = ["decoding", "nested_decoding", "threshold", "nested_threshold", "label_thresholds"]
    print(f"dev span F1 before: {100 * before:.2f}  after: {100 * after:.2f}")
    for key in keys:
        if ner.cfg[key] != new_cfg[key]:
            print(f"  {key}: {ner.cfg[key]} -> {new_cfg[key]}")
    ner.cfg.update({key: new_cfg[key] for key in keys})
    nlp.to_disk(output)
    print(f"Saved tuned pipeline to {output}")
