"""Mention replacement, a training-data augmenter: an entity mention of a training doc is swapped
for another mention of the same label seen in the training data (Dai and Adel 2020), so that the
scorer learns from a name's context and not only from names it has seen.

Mentions are the outer spans of the span group the component trains on (for flat data, all of
them). A swapped mention brings its own inner spans (the nested levels), and every other span of
the doc, its entities and sentence starts move with their tokens. The pool of mentions grows as the
corpus is read, so the first epoch draws from the mentions read so far and later ones from all.
"""

import random
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry

from .gold import same_tokens

# (start, end, label) relative to the mention's first token
_Relative = Tuple[Tuple[int, int, str], ...]


class Mention:
    """A mention's label, words and whitespace, with the spans of each span group (and the
    entities, under the name None) that lie inside it, relative to its first token."""

    def __init__(self, span: Span, inside: Dict[Optional[str], _Relative]):
        self.label = span.label_
        self.words = tuple(token.text for token in span)
        self.spaces = tuple(bool(token.whitespace_) for token in span)
        self.inside = inside


class MentionPool:
    """The distinct mentions read so far, by label; a draw is uniform over a label's other mentions."""

    def __init__(self):
        self.by_label: Dict[str, List[Mention]] = {}
        self._index: Dict[Tuple[str, Tuple[str, ...]], int] = {}  # (label, words) -> place in by_label

    def add(self, mention: Mention) -> None:
        key = (mention.label, mention.words)
        if key not in self._index:
            mentions = self.by_label.setdefault(mention.label, [])
            self._index[key] = len(mentions)
            mentions.append(mention)

    def draw(self, label: str, words: Tuple[str, ...]) -> Optional[Mention]:
        """A mention of `label` whose words are not `words`, or None if there is none."""
        mentions = self.by_label.get(label, [])
        own = self._index.get((label, words))
        choices = len(mentions) - (own is not None)
        if choices < 1:
            return None
        pick = random.randrange(choices)
        return mentions[pick + 1 if own is not None and pick >= own else pick]


@registry.augmenters("spacy_fofe.mention_replacement.v1")
def create_mention_replacement(level: float = 0.3, spans_key: str = "sc") -> Callable[[Language, Example],
                                                                                         Iterator[Example]]:
    """An augmenter for a corpus reader's `augmenter` setting: each mention of doc.spans[spans_key]
    (doc.ents when the doc has no such group) is swapped with probability `level`. Docs keep their
    words, whitespace, sentence starts, span groups and entities; other token annotation (tags,
    parses, lemmas) is missing in a changed doc, which spaCy's components treat as unannotated."""
    if not 0.0 <= level <= 1.0:
        raise ValueError(f"mention_replacement: level must lie between 0 and 1 (got {level}).")
    pool = MentionPool()

    def augment(nlp: Language, example: Example) -> Iterator[Example]:
        doc = example.reference
        groups: Dict[Optional[str], List[Span]] = {name: list(group) for name, group in doc.spans.items()}
        if doc.has_annotation("ENT_IOB"):
            groups[None] = list(doc.ents)
        mentions = outer_spans(groups.get(spans_key, groups.get(None, [])))
        owner = numpy.full(len(doc) + 1, -1)  # the mention each token lies in
        for i, span in enumerate(mentions):
            owner[span.start:span.end] = i
        inside, movable = spans_inside(mentions, owner, groups)
        chosen: Dict[int, Mention] = {}
        for i, span in enumerate(mentions):
            if not movable[i]:
                continue
            mention = Mention(span, inside[i])
            pool.add(mention)
            if random.random() < level and (other := pool.draw(mention.label, mention.words)) is not None:
                chosen[i] = other
        replaced = replace_mentions(doc, groups, mentions, owner, chosen) if chosen else None
        if replaced is None:
            yield example
        elif same_tokens(example.predicted, doc):  # e.g. gold_preproc: the reference's tokens
            yield Example(Doc(nlp.vocab, words=[t.text for t in replaced],
                              spaces=[bool(t.whitespace_) for t in replaced]), replaced)
        else:
            yield Example(nlp.make_doc(replaced.text), replaced)

    return augment


def outer_spans(spans: List[Span]) -> List[Span]:
    """The spans within no other span, in order; none at all where two of them cross (they have no
    one outer level to swap)."""
    ordered = sorted({(s.start, -s.end): s for s in spans}.values(), key=lambda s: (s.start, -s.end))
    outer: List[Span] = []
    for span in ordered:
        if outer and span.start < outer[-1].end:
            if span.end > outer[-1].end:
                return []
            continue
        outer.append(span)
    return outer


def spans_inside(mentions: List[Span], owner: numpy.ndarray, groups: Dict[Optional[str], List[Span]]
                 ) -> Tuple[List[Dict[Optional[str], _Relative]], List[bool]]:
    """For each mention, the spans of each group inside it (relative), and whether it can be
    swapped: no span starts or ends inside it while reaching beyond it. One pass over the spans."""
    inside: List[Dict[Optional[str], list]] = [{name: [] for name in groups} for _ in mentions]
    movable = [True] * len(mentions)
    for name, spans in groups.items():
        for s in spans:
            first, last = owner[s.start], owner[s.end - 1]
            if first != -1 and first == last:
                inside[first][name].append((s.start - mentions[first].start, s.end - mentions[first].start, s.label_))
                continue
            if first != -1 and s.start != mentions[first].start:
                movable[first] = False
            if last != -1 and s.end != mentions[last].end:
                movable[last] = False
    return [{name: tuple(spans) for name, spans in by_group.items()} for by_group in inside], movable


def replace_mentions(doc: Doc, groups: Dict[Optional[str], List[Span]], mentions: List[Span],
                     owner: numpy.ndarray, chosen: Dict[int, Mention]) -> Optional[Doc]:
    """A copy of `doc` with the mentions numbered in `chosen` swapped for theirs; None where the
    entities would overlap (an entity around a swapped mention that brings entities of its own)."""
    words: List[str] = []
    spaces: List[bool] = []
    sent_starts: List[Optional[bool]] = []
    new_index = numpy.zeros(len(doc) + 1, dtype=int)  # new position of each old token boundary
    placed: Dict[int, int] = {}
    has_starts = doc.has_annotation("SENT_START")
    i = 0
    while i < len(doc):
        new_index[i] = len(words)
        if owner[i] == -1 or owner[i] not in chosen or mentions[owner[i]].start != i:
            words.append(doc[i].text)
            spaces.append(bool(doc[i].whitespace_))
            sent_starts.append(doc[i].is_sent_start)
            i += 1
            continue
        mention, end = chosen[owner[i]], mentions[owner[i]].end
        placed[owner[i]] = len(words)
        words.extend(mention.words)
        spaces.extend(mention.spaces[:-1] + (bool(doc[end - 1].whitespace_),))
        sent_starts.extend([doc[i].is_sent_start] + [False] * (len(mention.words) - 1))
        i = end
    new_index[len(doc)] = len(words)
    new = Doc(doc.vocab, words=words, spaces=spaces, sent_starts=sent_starts if has_starts else None)
    moved: Dict[Optional[str], List[Span]] = {}
    for name, spans in groups.items():
        kept = [Span(new, new_index[s.start], new_index[s.end], label=s.label_) for s in spans
                if not (owner[s.start] in chosen and owner[s.start] == owner[s.end - 1])]
        for i, mention in chosen.items():
            kept.extend(Span(new, placed[i] + start, placed[i] + end, label=label)
                        for start, end, label in mention.inside.get(name, ()))
        moved[name] = sorted(kept, key=lambda s: (s.start, -s.end))
    for name in doc.spans:
        new.spans[name] = moved[name]
    if None in moved:
        try:
            new.set_ents(moved[None], default="outside")
        except ValueError:
            return None
    return new
