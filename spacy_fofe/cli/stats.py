"""What `spacy debug data` would say about the gold spans of .spacy files: counts per label and
nesting level, depth, lengths against max_length, and the overlap between train and dev."""

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Set, Tuple

from spacy.vocab import Vocab

from ..pipeline.gold import gold_spans, on_whitespace
from ..pipeline.span_geometry import bounds_of, crosses, depths
from ..training.corpus import docbin_docs


@dataclass
class SpanStats:
    """Gold span statistics of one corpus."""

    docs: int = 0
    tokens: int = 0
    per_label_depth: Counter = field(default_factory=Counter)  # (label, depth) -> spans
    lengths: Counter = field(default_factory=Counter)  # tokens -> spans
    crossing: int = 0  # pairs of spans that overlap without nesting
    on_space: int = 0  # spans that start or end on a whitespace token (never predicted)
    texts: Set[str] = field(default_factory=set)  # doc texts, for the overlap between corpora
    mentions: Set[Tuple[str, str]] = field(default_factory=set)  # (span text, label)

    @property
    def spans(self) -> int:
        return sum(self.per_label_depth.values())

    def longer_than(self, n: int) -> Counter:
        return Counter({length: count for length, count in self.lengths.items() if length > n})


def corpus_stats(path: Path, spans_key: str = "sc") -> SpanStats:
    """Read a .spacy file and count its gold spans (doc.spans[spans_key], or doc.ents)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    stats = SpanStats()
    for doc in docbin_docs(path, Vocab()):
        spans = list(gold_spans(doc, spans_key))
        stats.docs += 1
        stats.tokens += len(doc)
        stats.texts.add(doc.text)
        bounds = bounds_of(spans)
        for span, depth in zip(spans, depths(bounds)):
            stats.per_label_depth[span.label_, depth] += 1
            stats.lengths[len(span)] += 1
            stats.mentions.add((span.text, span.label_))
            stats.on_space += on_whitespace(span)
        stats.crossing += _crossing_pairs(sorted(bounds))
    return stats


def _crossing_pairs(bounds) -> int:
    """Pairs of spans that cross; each span is compared only with the spans that start inside it."""
    count = 0
    for i, a in enumerate(bounds):
        j = i + 1
        while j < len(bounds) and bounds[j][0] < a[1]:
            count += crosses(a, bounds[j])
            j += 1
    return count


def overlap(train: SpanStats, dev: SpanStats) -> Dict[str, float]:
    """Dev docs whose text is also in train, and the share of dev mentions (text and label) seen in train."""
    return {"docs_in_both": len(dev.texts & train.texts),
            "dev_mentions_seen": len(dev.mentions & train.mentions) / len(dev.mentions) if dev.mentions else 0.0}


def label_table(stats: SpanStats) -> Tuple[list, list]:
    """Rows of (label, spans per depth..., total) and the header, for a console table."""
    max_depth = max((depth for _, depth in stats.per_label_depth), default=0)
    header = ["label"] + ["outer" if d == 0 else f"depth {d}" for d in range(max_depth + 1)] + ["total"]
    labels = sorted({label for label, _ in stats.per_label_depth})
    rows = []
    for label in labels:
        counts = [stats.per_label_depth[label, d] for d in range(max_depth + 1)]
        rows.append([label] + counts + [sum(counts)])
    return rows, header


def length_summary(stats: SpanStats, max_length: Optional[int]) -> str:
    total = stats.spans
    if not total:
        return "no spans"
    longest = max(stats.lengths)
    mean = sum(length * n for length, n in stats.lengths.items()) / total
    text = f"lengths: mean {mean:.2f} tokens, longest {longest}"
    if max_length is not None:
        longer = sum(stats.longer_than(max_length).values())
        text += f"; {longer} spans ({100 * longer / total:.2f}%) are longer than max_length={max_length}"
    return text
