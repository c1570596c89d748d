"""Tune decoding on dev ("bias decoding", Tran et al.): per-level algorithm, thresholds, per-label thresholds.

A model trained with cross-entropy is not tuned for entity F1. The network runs once over
the dev set; every candidate setting is then scored by re-decoding the stored candidates.
A model with a fragment filter first gets the filter threshold that keeps RECALL of dev's spans.
"""

import random
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy
from spacy.tokens import Doc, Span
from spacy.training import Example

from ..ml.boundaries import RECALL, span_plausibility, threshold_for_recall
from ..ml.model import boundary_probabilities, has_fragment_filter, members
from ..pipeline.decoding import ALGORITHMS, Candidate, Level, decode, levels_from
from ..pipeline.gold import aligned_gold, gold_spans, same_tokens, unknown_labels_note
from ..pipeline.loading import load_pipeline
from ..pipeline.scoring import span_levels
from .corpus import read_examples

GRID = [round(0.05 * i, 2) for i in range(2, 20)]  # 0.10 .. 0.95
OBJECTIVES = ("span", "strict")
Gold = Set[tuple]  # (start, end, label); with strict=True (level, start, end, label), level 0 = outer


def reference_map(eg: Example, candidates: List[Candidate]) -> Dict[Tuple[int, int], Optional[Tuple[int, int]]]:
    """Where spaCy's scorer puts each candidate's span in the reference tokens.

    Scorer.score_spans aligns predictions with Example.get_aligned_spans_x2y, which drops a
    span whose text differs from its aligned reference span (None here): such a prediction
    counts neither as right nor as wrong.
    """
    bounds = sorted({(c.start, c.end) for c in candidates})
    if same_tokens(eg.predicted, eg.reference):
        return {bound: bound for bound in bounds}  # the usual case: alignment is the identity
    spans = [Span(eg.predicted, start, end) for start, end in bounds]
    mapped: Dict[Tuple[int, int], Optional[Tuple[int, int]]] = {}
    for bound, span in zip(bounds, spans):
        aligned = eg.get_aligned_spans_x2y([span], allow_overlap=True)
        mapped[bound] = (aligned[0].start, aligned[0].end) if aligned else None
    return mapped


def span_f1(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], levels: List[Level],
            maps: Optional[Sequence[Dict]] = None, strict: bool = False) -> float:
    """Span F1 over all levels of decoding `candidates` with `levels`, against `gold`.

    With `maps` (from `reference_map`), predictions are first put in the reference tokens,
    where gold is: the figure `spacy evaluate` reports. With `strict`, a span counts only on
    its own level (outer, or inner for depth >= 1): GermEval 2014's strict combined F1,
    spans_{key}_strict_f; `gold` then holds (level, start, end, label).
    """
    tp = n_pred = n_gold = 0
    for i, (cands, doc_gold) in enumerate(zip(candidates, gold)):
        pred = set()
        for c, depth in decode(cands, levels):
            bounds = (c.start, c.end) if maps is None else maps[i][(c.start, c.end)]
            if bounds is not None:
                pred.add((min(depth, 1), *bounds, c.label) if strict else (*bounds, c.label))
        tp += len(pred & doc_gold)
        n_pred += len(pred)
        n_gold += len(doc_gold)
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0


def part(items: Sequence, rows: Sequence[int]) -> list:
    return [items[i] for i in rows]


MIN_GAIN = 0.0005  # 0.05 F1 points: smaller gains on dev are noise (a rare label's one span)


def tune_decoding(candidates: Sequence[List[Candidate]], gold: Sequence[Gold], cfg: Dict,
                  labels: Sequence[str], maps=None, strict: bool = False,
                  min_gain: float = MIN_GAIN, label_thresholds: bool = True,
                  log: Callable[[str], None] = lambda line: None) -> Tuple[Dict, float, float]:
    """Coordinate search over the decoding settings of `cfg`; returns (new cfg, F1 before, F1 after).

    The F1 is `span_f1`'s, strict (level-aware) or not. A per-label threshold is changed
    only when it raises dev F1 by min_gain: otherwise rare labels get thresholds fitted to
    a handful of dev spans, which lose F1 on test. With label_thresholds False only each
    level's algorithm and threshold are searched (the per-label ones are kept as they are).
    `log` receives a line per stage of the search, with the best F1 so far.
    """
    original = cfg
    cfg = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
    before = best = span_f1(candidates, gold, levels_from(cfg), maps, strict)
    if cfg["nested"] and cfg["nested_threshold"] is None and not cfg["label_thresholds"]:
        cfg["nested_threshold"] = cfg["threshold"]  # same decoding; inner thresholds now tune apart

    def try_settings(settings, label=None):
        """Keep the best of `settings` (dicts of cfg values, or thresholds of `label`)."""
        nonlocal best
        floor = best + (min_gain if label is not None else 0.0)
        for setting in settings:
            trial = {**cfg, "label_thresholds": dict(cfg["label_thresholds"])}
            if label is None:
                trial.update(setting)
            else:
                trial["label_thresholds"][label] = setting
            score = span_f1(candidates, gold, levels_from(trial), maps, strict)
            if score > max(best, floor):
                best = score
                cfg.clear()
                cfg.update(trial)

    # Algorithm and threshold together: the best algorithm at 0.5 is not the best at 0.85.
    stages = [("outer level: algorithm x threshold", [{"decoding": a, "threshold": t}
                                                      for a in ALGORITHMS for t in GRID], None)]
    if cfg["nested"]:
        stages.append(("inner levels: algorithm x threshold", [{"nested_decoding": a, "nested_threshold": t}
                                                               for a in ALGORITHMS for t in GRID], None))
    if label_thresholds:
        for round_ in (1, 2):  # two passes: each label's best depends a little on the others
            stages += [(f"threshold of {label} (pass {round_})", GRID, label) for label in labels]
    log(f"F1 with the current settings: {100 * before:.2f}; {len(stages)} stages")
    for i, (name, settings, label) in enumerate(stages, 1):
        try_settings(settings, label=label)
        log(f"  [{i}/{len(stages)}] {name}: {len(settings)} settings, best {100 * best:.2f}")
    if best <= before:
        return dict(original), before, before  # nothing helped: no setting changes
    return cfg, before, best


def tune_fragment_filter(ner, batches: Sequence[Tuple[List[Example], List[Doc]]], recall: float = RECALL,
                         log: Callable[[str], None] = print) -> Dict[str, float]:
    """Set the fragment filter's threshold to the highest that keeps `recall` of the dev gold spans
    the model can score (those within max_length); each member of an ensemble its own. Returns,
    per member, the threshold and the shares of gold spans and of fragments it keeps."""
    figures = {}
    for number, member in enumerate(members(ner.model)):
        plausibility, fragment_probs = [], []
        for batch, docs in batches:
            probs = boundary_probabilities(member, docs)
            lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")
            spans = [(i, s.start, s.end) for i, eg in enumerate(batch) for s in aligned_gold(eg, ner.key)
                     if s.end - s.start <= ner.cfg["max_length"]]
            plausibility.append(span_plausibility(probs, spans, lengths))
            fragments = ner._fragments(docs)
            fragment_probs.append(span_plausibility(probs, fragments, lengths))
        values, fragment_values = numpy.concatenate(plausibility), numpy.concatenate(fragment_probs)
        threshold = threshold_for_recall(values, recall)
        member.get_ref("fragment_filter").attrs["threshold"] = threshold
        name = f" of member {number}" if len(members(ner.model)) > 1 else ""
        figures[f"filter_threshold_{number}"] = threshold
        figures[f"filter_recall_{number}"] = _share_kept(values, threshold)
        figures[f"filter_fragments_{number}"] = _share_kept(fragment_values, threshold)
        log(f"fragment filter{name}: threshold {threshold:.4f} keeps {100 * figures[f'filter_recall_{number}']:.2f}% "
            f"of {len(values)} dev gold spans and {100 * figures[f'filter_fragments_{number}']:.1f}% of "
            f"{len(fragment_values)} fragments")
    return figures


def _share_kept(plausibility: numpy.ndarray, threshold: float) -> float:
    return float((plausibility >= threshold).mean()) if len(plausibility) else 1.0


def tune_pipeline(model: Path, dev: Path, output: Path, component: str = "fofe_ner", batch_size: int = 256,
                  objective: str = "span", label_thresholds: bool = True, holdout: float = 0.0,
                  sentence_starts: bool = False, log: Callable[[str], None] = print) -> Dict[str, float]:
    """Load a pipeline, tune its fofe_ner decoding on a dev .spacy file, save it to `output`.

    objective "span" maximises span F1 over all levels (spans_{key}_f); "strict" maximises
    the level-aware GermEval figure (spans_{key}_strict_f), which also rewards getting the
    inner level right. label_thresholds False: search only each level's algorithm and
    threshold (steadier on test when dev is small: see the README). holdout: the share of dev
    docs (drawn at random, seed 0) left out of the search, on which the gain is reported.
    sentence_starts: give the docs the dev data's sentence starts (`with_sentence_starts`).
    Returns the F1 figures; nothing is written when the dev file has no gold spans.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"Unknown tuning objective {objective!r}; choose one of {', '.join(OBJECTIVES)}.")
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout is the share of dev docs to leave out of tuning, in [0, 1); got {holdout}")
    strict = objective == "strict"
    nlp, ner = load_pipeline(model, component)
    # spaCy's own reader, so examples (and their tokenization) are those `spacy evaluate` uses.
    examples = read_examples(dev, nlp, sentence_starts)
    batches = []
    for i in range(0, len(examples), batch_size):
        batch = examples[i:i + batch_size]
        docs = [eg.predicted for eg in batch]
        for name, proc in nlp.pipeline:  # earlier components (e.g. a shared tok2vec) first
            if name == component:
                break
            docs = list(proc.pipe(docs))
        batches.append((batch, docs))
    figures = {}
    if has_fragment_filter(ner.model):
        figures.update(tune_fragment_filter(ner, batches, log=log))
    log(f"Scoring {len(examples)} dev docs once with {component} ...")
    candidates: List[List[Candidate]] = []
    gold: List[Gold] = []
    maps: List[Dict] = []
    lowest = Level("highest-first", GRID[0])
    for batch, docs in batches:
        fragments, scores = ner.predict(docs)
        batch_candidates = ner.candidates(docs, fragments, scores, [lowest])
        candidates.extend(batch_candidates)
        maps.extend(reference_map(eg, cands) for eg, cands in zip(batch, batch_candidates))
        if strict:
            gold.extend({(level, *span) for level, spans in enumerate(span_levels(eg.reference, ner.key, False))
                         for span in spans} for eg in batch)
        else:
            gold.extend({(s.start, s.end, s.label_) for s in gold_spans(eg.reference, ner.key)} for eg in batch)
        log(f"  {len(candidates)}/{len(examples)}")
    if not any(gold):
        raise ValueError(f"{dev} has no gold spans under doc.spans[{ner.key!r}] or doc.ents, so there is nothing "
                         f"to tune against; nothing was written. Check the file and the component's spans_key.")
    note = unknown_labels_note(examples, ner.key, ner.labels)
    if note:
        log(f"Warning: {note}")
    held = set(random.Random(0).sample(range(len(examples)), round(holdout * len(examples))))
    tuned_on = [i for i in range(len(examples)) if i not in held]
    if not tuned_on or not any(gold[i] for i in tuned_on):
        raise ValueError(f"holdout {holdout} leaves no gold spans to tune on; nothing was written. Lower it.")
    new_cfg, before, after = tune_decoding(part(candidates, tuned_on), part(gold, tuned_on), ner.cfg, ner.labels,
                                           part(maps, tuned_on), strict, label_thresholds=label_thresholds, log=log)
    figures.update({"before": before, "after": after})
    keys = ["decoding", "nested_decoding", "threshold", "nested_threshold", "label_thresholds"]
    name = "strict level-aware F1" if strict else "span F1"
    log(f"dev {name} (as spacy evaluate scores it) on {len(tuned_on)} docs, before: {100 * before:.2f}  "
        f"after: {100 * after:.2f}")
    if held:
        rows = sorted(held)
        figures["held_out_before"], figures["held_out_after"] = (
            span_f1(part(candidates, rows), part(gold, rows), levels_from(cfg), part(maps, rows), strict)
            for cfg in (ner.cfg, new_cfg))
        log(f"held-out dev ({len(rows)} docs, not searched on), before: {100 * figures['held_out_before']:.2f}  "
            f"after: {100 * figures['held_out_after']:.2f}")
    for key in keys:
        if ner.cfg[key] != new_cfg[key]:
            log(f"  {key}: {ner.cfg[key]} -> {new_cfg[key]}")
    ner.cfg.update({key: new_cfg[key] for key in keys})
    nlp.to_disk(output)
    log(f"Saved tuned pipeline to {output}")
    return figures
