"""Gold spans: where they are read from, how they are aligned with the predicted tokens, and what
initialize reports about them. Used by the component, the scorer and the tuner."""

import warnings
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

from spacy.tokens import Doc, Span
from spacy.training import Example

from .span_geometry import contains


def gold_spans(doc: Doc, spans_key: str):
    """The spans of `doc` under `spans_key`, or its entities when it has no such group.

    The same rule serves training and scoring, so a flat corpus converted with
    `spacy convert` (gold in doc.ents) trains and scores without extra settings.
    """
    return doc.spans[spans_key] if spans_key in doc.spans else doc.ents


def unknown_labels_note(examples: Iterable[Example], spans_key: str, labels: Iterable[str]) -> Optional[str]:
    """A sentence on the gold spans whose label the model does not predict, or None when there are none.

    Such spans can only count as missed: with another label set (e.g. PERSON for PER) the
    scores drop for a reason no figure shows, so tune and evaluate say it.
    """
    known = set(labels)
    unknown = Counter(s.label_ for eg in examples for s in gold_spans(eg.reference, spans_key) if s.label_ not in known)
    if not unknown:
        return None
    per_label = ", ".join(f"{label}: {n}" for label, n in unknown.most_common())
    return (f"{sum(unknown.values())} gold spans have labels the model does not predict ({per_label}); they count "
            f"as missed. The model's labels: {', '.join(sorted(known))}.")


def on_whitespace(span: Span) -> bool:
    """Whether a span starts or ends on a whitespace token, where no prediction does. Read from
    the text, so it holds for docs of a bare Vocab() too (which has no lexeme flags)."""
    return len(span) > 0 and (span[0].text.isspace() or span[-1].text.isspace())


def same_tokens(a: Doc, b: Doc) -> bool:
    """Whether two docs have the same tokens at the same offsets (alignment is the identity)."""
    # Arrays, not doc.text: building the text walks every token in Python.
    attrs = ["ORTH", "IDX"]
    return len(a) == len(b) and bool((a.to_array(attrs) == b.to_array(attrs)).all())


def aligned_gold(eg: Example, spans_key: str) -> List[Span]:
    """The reference's gold spans on the predicted tokens; spans that do not align are left out."""
    spans = gold_spans(eg.reference, spans_key)
    if same_tokens(eg.predicted, eg.reference):
        return list(spans)  # alignment is the identity; skip its per-token work
    return eg.get_aligned_spans_y2x(spans, allow_overlap=True)


class GoldStats:
    """What initialize reports about the gold spans: labels, and spans the model cannot learn."""

    def __init__(self):
        self.labels: set = set()
        self.lengths: Counter = Counter()  # (label, tokens) -> spans
        self.nested = self.crossing = self.duplicates = self.multi_label = self.misaligned = self.on_space = 0

    def add(self, eg: Example, aligned: List[Span], original) -> None:
        self.misaligned += len(original) - len(aligned)
        seen: Dict[Tuple[int, int], str] = {}
        for span in aligned:
            self.labels.add(span.label_)
            self.lengths[span.label_, len(span)] += 1
            self.on_space += on_whitespace(span)
            key = (span.start, span.end)
            if key in seen:
                if seen[key] == span.label_:
                    self.duplicates += 1
                else:
                    self.multi_label += 1
            seen[key] = span.label_
        # Containers before their contents: by start, then longest first.
        bounds = sorted(seen, key=lambda b: (b[0], -b[1]))
        for i, outer in enumerate(bounds):
            j = i + 1
            while j < len(bounds) and bounds[j][0] < outer[1]:  # only the spans that start inside it
                if contains(outer, bounds[j]):
                    self.nested += 1
                else:
                    self.crossing += 1
                j += 1

    def covering_length(self, coverage: float, longest: int) -> Optional[int]:
        """The smallest n such that spans of at most n tokens are `coverage` of the spans, at most `longest`;
        None without spans."""
        per_length = Counter()
        for (_, length), count in self.lengths.items():
            per_length[length] += count
        total, covered = sum(per_length.values()), 0
        for length in sorted(per_length):
            covered += per_length[length]
            if covered >= coverage * total:
                return min(length, longest)
        return None

    def share_within(self, max_length: int) -> float:
        total = sum(self.lengths.values())
        return sum(n for (_, length), n in self.lengths.items() if length <= max_length) / total if total else 1.0

    def warn(self, name: str, max_length: int) -> None:
        too_long = Counter()
        for (label, length), count in self.lengths.items():
            if length > max_length:
                too_long[label] += count
        if too_long:
            per_label = ", ".join(f"{label}: {n}" for label, n in sorted(too_long.items()))
            warnings.warn(f"[{name}] {sum(too_long.values())} gold spans are longer than max_length="
                          f"{max_length} tokens and can never be predicted ({per_label}). "
                          "Raise max_length to cover them.", stacklevel=2)
        notes = [
            (self.crossing, "pairs of gold spans cross each other (overlap without nesting); both are "
                            "trained, but decoding keeps at most one of each pair"),
            (self.duplicates, "gold spans are duplicates; they count once"),
            (self.multi_label, "gold spans repeat an earlier span with another label; the first label is used"),
            (self.misaligned, "gold spans do not align with the predicted tokenization and are skipped"),
            (self.on_space, "gold spans start or end on a whitespace token; they are trained, but no prediction "
                            "starts or ends on whitespace (as with spaCy's ner): trim them"),
        ]
        for count, what in notes:
            if count:
                warnings.warn(f"[{name}] {count} {what}.", stacklevel=2)
