"""Corpus converters to .spacy (DocBin) files with gold in doc.spans[key] (and doc.ents).

Column files: one token per line, a token column and one IOB/BIO tag column per nesting
level (CoNLL-2003: `token POS chunk NER`, IOB1; GermEval 2014: `id token outer inner`,
BIO), blank lines between sentences, `#` comment lines and `-DOCSTART-` lines skipped.
JSON lines: {"tokens": [...], "spans": [[start, end, label], ...]} (end exclusive).
Readers yield (words, spans of each level, invalid tag count); with more than one level
the converter also writes each level to doc.spans[f"{key}_level{i}"] (i from 1, outer
first), which the level-aware GermEval metric reads.
"""

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from spacy.tokens import Doc, DocBin, Span
from spacy.util import filter_spans
from spacy.vocab import Vocab

from .span_geometry import bounds_of, nested_flags

SpanTuple = Tuple[int, int, str]


@dataclass
class ConversionReport:
    """What a conversion saw: counts that tell whether the gold survived intact."""

    docs: int = 0
    tokens: int = 0
    spans: Counter = field(default_factory=Counter)
    longer_than_n: Counter = field(default_factory=Counter)
    invalid_tags: int = 0
    nested: int = 0
    max_length: int = 7

    def add(self, words: Sequence[str], spans: Sequence[SpanTuple]) -> None:
        self.docs += 1
        self.tokens += len(words)
        for start, end, label in spans:
            self.spans[label] += 1
            if end - start > self.max_length:
                self.longer_than_n[label] += 1

    def summary(self) -> str:
        total = sum(self.spans.values())
        lines = [f"{self.docs} docs, {self.tokens} tokens, {total} spans ({self.nested} nested inside another)"]
        lines += [f"  {label}: {n}" for label, n in sorted(self.spans.items())]
        longer = sum(self.longer_than_n.values())
        covered = 100.0 * (total - longer) / total if total else 100.0
        lines.append(f"spans longer than n={self.max_length}: {longer} ({covered:.2f}% covered)"
                     + "".join(f"; {label}: {n}" for label, n in sorted(self.longer_than_n.items())))
        if self.invalid_tags:
            lines.append(f"invalid tag sequences (I-/L-/E- that could not continue a span), read as a new span: "
                         f"{self.invalid_tags}")
        return "\n".join(lines)


OUTSIDE_TAGS = ("O", "_")
TAG = re.compile(r"^([BIES]|[LU])-(.+)$")


class NotATag(ValueError):
    """A value in a tag column that is no tag; `index` is its position in the column."""

    def __init__(self, tag: str, index: int):
        super().__init__(f"{tag!r} is not an IOB/BIO/IOBES/BILUO tag")
        self.index = index


def tags_to_spans(tags: Sequence[str], scheme: str = "iob2") -> Tuple[List[SpanTuple], int]:
    """Spans of an IOB1, IOB2 (BIO), IOBES or BILUO tag column, and how many tags had to be repaired.

    B- and U-/S- start a span (U-/S- also end it), I- continues it and L-/E- continue and end
    it. An I-/L-/E- that cannot continue (after O, another type, or a span already ended)
    starts a span: legal in IOB1 after O or another type, otherwise counted as repaired.
    spaCy's iob_utils raise on such sequences instead of counting them, hence this loop.
    Raises NotATag for a value of none of these forms.
    """
    spans: List[SpanTuple] = []
    repaired = 0
    start, label, open_span = 0, None, False  # open_span: the current span may still grow
    for i, tag in enumerate(tags):
        if tag in OUTSIDE_TAGS:
            prefix, tag_label = "O", None
        else:
            match = TAG.match(tag)
            if match is None:
                raise NotATag(tag, i)
            prefix, tag_label = match.groups()
        continues = prefix in ("I", "L", "E") and open_span and label == tag_label
        if label is not None and not continues:
            spans.append((start, i, label))
            label = None
        if prefix != "O" and not continues:
            if prefix in ("I", "L", "E") and not (scheme == "iob1" and prefix == "I" and not open_span):
                repaired += 1
            start, label = i, tag_label
        open_span = label is not None and prefix in ("B", "I")
    if label is not None:
        spans.append((start, len(tags), label))
    return spans, repaired


def read_columns(
    path: Path, token_column: int = 0, tag_columns: Sequence[int] = (-1,), scheme: str = "iob2",
    separator: Optional[str] = None,
) -> Iterator[Tuple[List[str], List[List[SpanTuple]], int]]:
    """Yield (words, spans of each tag column, invalid tag count) per sentence of a column file."""
    words: List[str] = []
    rows: List[List[str]] = []
    line_numbers: List[int] = []
    entity_tags = 0

    def flush():
        nonlocal entity_tags
        levels, invalid = [], 0
        for column in tag_columns:
            tags = [row[column] for row in rows]
            try:
                level_spans, level_invalid = tags_to_spans(tags, scheme)
            except NotATag as err:
                found = sorted(set(tags))[:8]
                where = f"{path}:{line_numbers[err.index]}"
                raise ValueError(f"{where}: column {column} is not a tag column ({err}); this sentence's values "
                                 f"there: {found}. Choose the columns with --tag-columns.") from None
            levels.append(level_spans)
            invalid += level_invalid
            entity_tags += sum(tag not in OUTSIDE_TAGS for tag in tags)
        return list(words), levels, invalid

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open(encoding="utf8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                if words:
                    yield flush()
                    words, rows, line_numbers = [], [], []
                continue
            cells = line.split(separator) if separator else line.split()
            if line.startswith("#") and not _has_tags(cells, tag_columns):
                continue  # a comment; a token "#" with valid tags is kept
            if len(cells) <= max(max(tag_columns), token_column, -min(min(tag_columns), token_column) - 1):
                raise ValueError(f"{path}: line {line!r} has {len(cells)} columns; expected the token in "
                                 f"column {token_column} and tags in columns {list(tag_columns)}")
            if cells[token_column] == "-DOCSTART-":
                continue
            words.append(cells[token_column])
            rows.append(cells)
            line_numbers.append(number)
    if words:
        yield flush()
    if entity_tags == 0:
        raise ValueError(f"{path}: tag columns {list(tag_columns)} hold no entity tags (every tag is O); nothing was "
                         "written. Choose the columns with --tag-columns.")


def _has_tags(cells: List[str], tag_columns: Sequence[int]) -> bool:
    try:
        tags = [cells[c] for c in tag_columns]
    except IndexError:
        return False
    return all(t in OUTSIDE_TAGS or TAG.match(t) is not None for t in tags)


def read_jsonl(path: Path) -> Iterator[Tuple[List[str], List[List[SpanTuple]], int]]:
    """Yield (words, [spans], 0) per line of a JSON lines file; blank lines are skipped."""
    with Path(path).open(encoding="utf8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            words = record["tokens"]
            spans = []
            for start, end, label in record.get("spans", []):
                if not 0 <= start < end <= len(words):
                    raise ValueError(f"{path}:{number}: span [{start}, {end}) is outside the {len(words)} tokens")
                spans.append((int(start), int(end), str(label)))
            yield words, [sorted(set(spans))], 0


def make_doc(vocab: Vocab, words: List[str], levels: List[List[SpanTuple]], spans_key: str, ents: bool) -> Doc:
    """A Doc with all spans in doc.spans[spans_key] (each level in its own group too when
    there are several) and, if asked, the outer level in doc.ents."""
    doc = Doc(vocab, words=words)
    spans = sorted({span for level in levels for span in level})
    doc.spans[spans_key] = [Span(doc, start, end, label=label) for start, end, label in spans]
    if len(levels) > 1:
        for i, level in enumerate(levels, 1):
            doc.spans[f"{spans_key}_level{i}"] = [Span(doc, s, e, label=label) for s, e, label in level]
    if ents:
        doc.ents = filter_spans(doc.spans[spans_key])
    return doc


def count_nested(spans: Sequence[SpanTuple]) -> int:
    """How many spans lie inside another span of the doc."""
    return sum(nested_flags(bounds_of(spans)))


def convert(
    records: Iterable[Tuple[List[str], List[List[SpanTuple]], int]], output: Path, spans_key: str = "sc",
    ents: bool = True, max_length: int = 7, lang: str = "xx",
) -> ConversionReport:
    """Write records to a .spacy file and return what was written."""
    vocab = Vocab()
    report = ConversionReport(max_length=max_length)
    doc_bin = DocBin(store_user_data=True)
    for words, levels, invalid in records:
        spans = sorted({span for level in levels for span in level})
        report.invalid_tags += invalid
        report.nested += count_nested(spans)
        report.add(words, spans)
        doc_bin.add(make_doc(vocab, words, levels, spans_key, ents))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output)
    return report
