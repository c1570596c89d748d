"""Corpus converters to .spacy (DocBin) files with gold in doc.spans[key] (and doc.ents).

Column files: one token per line, a token column and one IOB/BIO tag column per nesting
level (CoNLL-2003: `token POS chunk NER`, IOB1; GermEval 2014: `id token outer inner`,
BIO), blank lines between sentences, `#` comment lines skipped; a `-DOCSTART-` line starts a
document (`group_documents` joins a document's sentences into one doc, sentence starts kept).
JSON lines (`read_jsonl`): tokens with token-offset spans, or Prodigy/spaCy-style text with
character-offset spans, tokenized by a spaCy tokenizer. Readers yield `Record`s; with more
than one level the converter also writes each level to doc.spans[f"{key}_level{i}"] (i from
1, outer first), which the level-aware GermEval metric reads. Nothing is dropped or
repaired without being counted, per reason, in the report.
"""

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from spacy.tokens import Doc, DocBin, Span
from spacy.util import filter_spans
from spacy.vocab import Vocab

from ..pipeline.span_geometry import bounds_of, nested_flags
from .text_files import utf8_lines

SpanTuple = Tuple[int, int, str]


@dataclass
class Record:
    """One doc read from a corpus file: its words, its spans per level (outer first), and
    what the reader had to change: {reason: count} of spans dropped and of spans repaired."""

    words: List[str]
    levels: List[List[SpanTuple]]
    spaces: Optional[List[bool]] = None
    sent_starts: Optional[List[bool]] = None  # set on documents of several sentences
    doc_start: bool = False  # a `-DOCSTART-` line came before this sentence
    dropped: Counter = field(default_factory=Counter)
    repaired: Counter = field(default_factory=Counter)
    examples: List[str] = field(default_factory=list)  # where and what was dropped, for the report


@dataclass
class ConversionReport:
    """What a conversion saw: counts that tell whether the gold survived intact."""

    docs: int = 0
    tokens: int = 0
    spans: Counter = field(default_factory=Counter)
    longer_than_n: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)
    repaired: Counter = field(default_factory=Counter)
    examples: List[str] = field(default_factory=list)
    nested: int = 0
    max_length: int = 7
    SHOWN_EXAMPLES = 5

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
        for reason, n in sorted(self.repaired.items()):
            lines.append(f"repaired: {n} {reason}")
        for reason, n in sorted(self.dropped.items()):
            lines.append(f"DROPPED: {n} {reason}")
        lines += [f"  {example}" for example in self.examples[: self.SHOWN_EXAMPLES]]
        if len(self.examples) > self.SHOWN_EXAMPLES:
            lines.append(f"  ... and {len(self.examples) - self.SHOWN_EXAMPLES} more")
        return "\n".join(lines)


OUTSIDE_TAGS = ("O", "_")
REPAIRED_TAGS = "tag sequences where an I-/L-/E- could not continue a span and starts one"
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
    separator: Optional[str] = None, unread_tags: Optional[Dict[int, Counter]] = None,
) -> Iterator[Record]:
    """Yield a Record per sentence of a column file (a level per tag column).

    unread_tags: filled, once the file is read, with {column: tags per label} for each column not
    read whose every value is a tag and some an entity tag: a level the tag columns may have missed
    (GermEval's outer level under the default `-1`; CoNLL-2003's chunk tags look alike).
    """
    unread = UnreadTagColumns(token_column, tag_columns)
    words: List[str] = []
    rows: List[List[str]] = []
    line_numbers: List[int] = []
    entity_tags = 0
    doc_start = False
    columns: Optional[Tuple[int, int]] = None  # the first token line's number of columns, and its line

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
        repaired = Counter({REPAIRED_TAGS: invalid}) if invalid else Counter()
        return Record(list(words), levels, repaired=repaired, doc_start=doc_start)

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    for number, line in utf8_lines(path):
        if not line.strip():
            if words:
                yield flush()
                words, rows, line_numbers, doc_start = [], [], [], False
            continue
        cells = line.split(separator) if separator else line.split()
        if line.startswith("#") and not _has_tags(cells, tag_columns):
            continue  # a comment; a token "#" with valid tags is kept
        if len(cells) <= max(max(tag_columns), token_column, -min(min(tag_columns), token_column) - 1):
            raise ValueError(f"{path}:{number}: line {line!r} has {len(cells)} columns; expected the token in "
                             f"column {token_column} and tags in columns {list(tag_columns)}")
        if cells[token_column] == "-DOCSTART-":
            if words:  # a sentence with no blank line before the marker ends there
                yield flush()
                words, rows, line_numbers = [], [], []
            doc_start = True
            continue
        if columns is None:
            columns = (len(cells), number)
            read = [column % len(cells) for column in (token_column, *tag_columns)]
            if len(set(read)) < len(read):
                raise ValueError(f"{path}:{number}: of its {len(cells)} columns, token column {token_column} and tag "
                                 f"columns {list(tag_columns)} read one twice; each level needs a column of its own")
        elif len(cells) != columns[0]:
            tab = "\t" in line and not separator
            hint = " (a token with a space? the line has a tab: --separator tab)" if tab else ""
            raise ValueError(f"{path}:{number}: line {line!r} has {len(cells)} columns where line {columns[1]} has "
                             f"{columns[0]}{hint}; every token line needs the same columns, or a column would be "
                             "read as another")
        words.append(cells[token_column])
        rows.append(cells)
        line_numbers.append(number)
        unread.add(cells)
    if words:
        yield flush()
    if unread_tags is not None:
        unread_tags.update(unread.found())
    if entity_tags == 0:
        raise ValueError(f"{path}: tag columns {list(tag_columns)} hold no entity tags (every tag is O); nothing was "
                         "written. Choose the columns with --tag-columns.")


class UnreadTagColumns:
    """Which columns other than the token and tag columns hold tags alone, and their labels."""

    def __init__(self, token_column: int, tag_columns: Sequence[int]):
        self.read = [token_column, *tag_columns]
        self.labels: Dict[int, Counter] = {}
        self.not_tags: Set[int] = set()

    def add(self, cells: List[str]) -> None:
        read = {column % len(cells) for column in self.read}
        for column, value in enumerate(cells):
            if column in read or column in self.not_tags:
                continue
            labels = self.labels.setdefault(column, Counter())
            if value not in OUTSIDE_TAGS:
                match = TAG.match(value)
                if match is None:
                    self.not_tags.add(column)
                else:
                    labels[match.group(2)] += 1

    def found(self) -> Dict[int, Counter]:
        return {column: labels for column, labels in self.labels.items() if labels and column not in self.not_tags}


def group_documents(records: Iterable[Record], path: Path) -> Iterator[Record]:
    """Join the sentence records of each document (from one `-DOCSTART-` line to the next) into
    one record with its sentence starts, so a model can read context across sentences."""
    document: List[Record] = []
    seen_marker = False
    for record in records:
        seen_marker = seen_marker or record.doc_start
        if record.doc_start and document:
            yield join_sentences(document)
            document = []
        document.append(record)
    if not seen_marker:
        raise ValueError(f"{path}: no -DOCSTART- lines, so its documents cannot be told apart; convert it "
                         "without --docs (one doc per sentence)")
    if document:
        yield join_sentences(document)


def join_sentences(sentences: Sequence[Record]) -> Record:
    """One record of several sentences: words and spans in order, sentence starts marked. When the
    sentences' spacing is unknown (CoNLL columns), so is the document's: training and evaluation
    then keep the file's tokens, as they do for the sentences, instead of re-tokenizing the text."""
    known = any(sentence.spaces is not None for sentence in sentences)
    joined = Record([], [[] for _ in sentences[0].levels], spaces=[] if known else None, sent_starts=[],
                    doc_start=True)
    for sentence in sentences:
        offset = len(joined.words)
        joined.words.extend(sentence.words)
        if known:
            joined.spaces.extend(sentence.spaces or [True] * len(sentence.words))
        joined.sent_starts.extend([True] + [False] * (len(sentence.words) - 1))
        for level, spans in zip(joined.levels, sentence.levels):
            level.extend((start + offset, end + offset, label) for start, end, label in spans)
        joined.dropped.update(sentence.dropped)
        joined.repaired.update(sentence.repaired)
        joined.examples.extend(sentence.examples)
    return joined


def _has_tags(cells: List[str], tag_columns: Sequence[int]) -> bool:
    try:
        tags = [cells[c] for c in tag_columns]
    except IndexError:
        return False
    return all(t in OUTSIDE_TAGS or TAG.match(t) is not None for t in tags)


MISALIGNED = "spans whose character offsets do not fall on token boundaries"
DUPLICATE = "duplicate spans (same tokens and label as another span of the doc)"


def read_jsonl(path: Path, tokenizer: Optional[Callable[[str], Doc]] = None) -> Iterator[Record]:
    """Yield a Record per line of a JSON lines file; blank lines are skipped.

    A line is an object with either
    - "tokens": strings, or Prodigy-style objects with "text" (and "ws": a space follows),
      and "spans": [start, end, label] token offsets (end exclusive), or objects with
      "token_start" / "token_end" (Prodigy: end inclusive) and "label"; or
    - "text", tokenized with `tokenizer`, and "spans" (or spaCy v2's "entities") as
      [start, end, label] character offsets or objects with "start" / "end" / "label".
    A character span that does not fall on token boundaries is dropped and counted, with
    its line and text in the report. Malformed lines are errors naming the line, and so is a
    file with no records or with no spans in any record (as a column file with no entity tags).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    vocab = tokenizer.vocab if tokenizer is not None and hasattr(tokenizer, "vocab") else Vocab()
    records = spans = 0
    for number, line in utf8_lines(path):
        if line.strip():
            record = _jsonl_record(line, f"{path}:{number}", tokenizer, vocab)
            records += 1
            spans += sum(map(len, record.levels)) + sum(record.dropped.values())
            yield record
    if records == 0:
        raise ValueError(f"{path}: no records (every line is blank); nothing was written.")
    if spans == 0:
        raise ValueError(f"{path}: none of its {records} records has spans (under \"spans\" or \"entities\"); "
                         "nothing was written.")


def _jsonl_record(line: str, where: str, tokenizer, vocab: Vocab) -> Record:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON ({err.msg}, column {err.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a line must hold a JSON object, not {type(record).__name__}")
    if "tokens" in record:
        words, spaces = _tokens(record["tokens"], where)
        doc = Doc(vocab, words=words, spaces=spaces)
    elif isinstance(record.get("text"), str):
        if tokenizer is None:
            raise ValueError(f"{where}: a record with \"text\" and no \"tokens\" is split into tokens by a language's "
                             "tokenizer: give --lang (e.g. en) or --model (a pipeline whose tokenizer to use)")
        doc = tokenizer(record["text"])
        words, spaces = [t.text for t in doc], [bool(t.whitespace_) for t in doc]
    else:
        raise ValueError(f"{where}: a record needs \"tokens\" (a list) or \"text\" (a string); "
                         f"found keys {sorted(record)}")
    items = record.get("spans", record.get("entities", []))
    if not isinstance(items, list):
        raise ValueError(f"{where}: \"spans\" must be a list, not {type(items).__name__}")
    by_tokens = "tokens" in record
    out = Record(words, [], spaces)
    spans = []
    for item in items:
        span = _span(item, doc, by_tokens, where)
        if span is None:
            out.dropped[MISALIGNED] += 1
            start, end = _span_fields(item, where)[:2]
            out.examples.append(f"{where}: {record.get('text', doc.text)[start:end]!r} [{start}, {end}) "
                                f"does not fall on token boundaries")
        elif span in spans:
            out.dropped[DUPLICATE] += 1
        else:
            spans.append(span)
    out.levels = [sorted(spans)]
    return out


def _tokens(tokens, where: str) -> Tuple[List[str], List[bool]]:
    if not isinstance(tokens, list):
        raise ValueError(f"{where}: \"tokens\" must be a list, not {type(tokens).__name__}")
    words, spaces = [], []
    for token in tokens:
        if isinstance(token, str):
            words.append(token)
            spaces.append(True)
        elif isinstance(token, dict) and isinstance(token.get("text"), str):
            words.append(token["text"])
            spaces.append(bool(token.get("ws", True)))
        else:
            raise ValueError(f"{where}: a token must be a string or an object with \"text\", got {token!r}")
    if any(not word for word in words):
        raise ValueError(f"{where}: a token is the empty string")
    return words, spaces


def _span_fields(item, where: str, by_tokens: bool = False) -> Tuple[int, int, str]:
    """(start, end, label) of a span item; end exclusive, in tokens or characters."""
    if isinstance(item, (list, tuple)) and len(item) == 3:
        start, end, label = item
    elif isinstance(item, dict) and "label" in item and by_tokens and "token_start" in item and "token_end" in item:
        start, end, label = item["token_start"], item["token_end"] + 1, item["label"]  # Prodigy: end inclusive
    elif isinstance(item, dict) and "label" in item and "start" in item and "end" in item:
        start, end, label = item["start"], item["end"], item["label"]
    else:
        raise ValueError(f"{where}: a span must be [start, end, label] or an object with \"label\" and "
                         f"\"start\"/\"end\" (or \"token_start\"/\"token_end\"), got {item!r}")
    if not (isinstance(start, int) and isinstance(end, int) and isinstance(label, str) and label):
        raise ValueError(f"{where}: span {item!r} needs integer offsets and a non-empty label")
    return start, end, label


def _span(item, doc: Doc, by_tokens: bool, where: str) -> Optional[SpanTuple]:
    """The span's token offsets, or None when its character offsets miss token boundaries."""
    prodigy_tokens = isinstance(item, dict) and "token_start" in item
    start, end, label = _span_fields(item, where, by_tokens)
    if by_tokens and (not isinstance(item, dict) or prodigy_tokens):
        if not 0 <= start < end <= len(doc):
            raise ValueError(f"{where}: span [{start}, {end}) is outside the {len(doc)} tokens")
        return start, end, label
    if not 0 <= start < end <= len(doc.text):
        raise ValueError(f"{where}: span [{start}, {end}) is outside the text's {len(doc.text)} characters")
    span = doc.char_span(start, end, label=label)
    return None if span is None else (span.start, span.end, label)


def make_doc(vocab: Vocab, record: Record, spans_key: str, ents: bool) -> Doc:
    """A Doc with all spans in doc.spans[spans_key] (each level in its own group too when
    there are several) and, if asked, the outer level in doc.ents."""
    doc = Doc(vocab, words=record.words, spaces=record.spaces, sent_starts=record.sent_starts)
    levels = record.levels
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
    records: Iterable[Record], output: Path, spans_key: str = "sc", ents: bool = True, max_length: int = 7,
) -> ConversionReport:
    """Write records to a .spacy file and return what was written. Nothing is written when
    reading fails."""
    vocab = Vocab()
    report = ConversionReport(max_length=max_length)
    doc_bin = DocBin(store_user_data=True)
    for record in records:
        spans = sorted({span for level in record.levels for span in level})
        report.dropped.update(record.dropped)
        report.repaired.update(record.repaired)
        report.examples.extend(record.examples)
        report.nested += count_nested(spans)
        report.add(record.words, spans)
        doc_bin.add(make_doc(vocab, record, spans_key, ents))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output)
    return report
