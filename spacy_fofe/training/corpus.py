"""A training corpus reader that deserializes each .spacy file once per process.

spaCy's Corpus.v1 reads the DocBin again on every pass: each training epoch and each dev
evaluation. For docs with `doc.spans` that is slow, because srsly looks its msgpack decoders up
(an entry-point scan of all installed distributions) for every span group it unpacks: GermEval's
24,000 training sentences take 26 s to read. CachedCorpus is Corpus.v1 with the reference docs
kept after the first read; the Examples are still made fresh on each pass, exactly as Corpus.v1
makes them, so training sees the same data in the same order.

The kept docs are shared by all CachedCorpus objects of the process, because `spacy train`
builds its corpora twice (once to initialize the pipeline, once for the training loop).
"""

import os
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy
from spacy.attrs import SENT_START
from spacy.errors import Errors
from spacy.tokens import Doc, DocBin
from spacy.training import Corpus, Example
from spacy.util import registry
from spacy.vocab import Vocab

# (file path, modification time, size) of each file read, and the limit -> the docs read.
_CacheKey = Tuple[Tuple[Tuple[str, int, int], ...], int]


class CachedCorpus(Corpus):
    """spaCy's Corpus whose reference docs are read from disk once and then kept in memory; with
    `sentence_starts`, the predicted docs also get the reference's sentence starts."""

    # Docs belong to one vocab's StringStore, so only the last vocab's docs are kept: a process
    # that trains several pipelines one after another holds one pipeline's corpora, not all.
    _vocab: Optional[Vocab] = None
    _docs: Dict[_CacheKey, List[Doc]] = {}

    def __init__(self, path, *args, sentence_starts: bool = False, **kwargs):
        check_docbin_path(path)
        super().__init__(path, *args, **kwargs)
        self.sentence_starts = sentence_starts

    def __call__(self, nlp) -> Iterator[Example]:
        examples = super().__call__(nlp)
        yield from with_sentence_starts(examples) if self.sentence_starts else examples

    def read_docbin(self, vocab: Vocab, locs: Iterable[Union[str, Path]]) -> Iterator[Doc]:
        paths = [Path(loc) for loc in locs]
        # a file rewritten since it was read is read again, never served stale
        key = (tuple((str(path.resolve()), *_stamp(path)) for path in paths), self.limit)
        if CachedCorpus._vocab is not vocab:
            CachedCorpus._vocab, CachedCorpus._docs = vocab, {}
        if key not in CachedCorpus._docs:
            CachedCorpus._docs[key] = list(super().read_docbin(vocab, paths))
        yield from CachedCorpus._docs[key]


def docbin_docs(path: Union[str, Path], vocab: Vocab) -> Iterator[Doc]:
    """The docs of a .spacy file, read one at a time."""
    yield from DocBin().from_disk(path).get_docs(vocab)


def check_docbin_path(path: Optional[Union[str, Path]]) -> None:
    """A file that spaCy's reader would skip with only a warning (W090), reading no docs, is an error."""
    if path is not None and Path(path).is_file() and Path(path).suffix != ".spacy":
        raise ValueError(f"{path} is not a .spacy file (spaCy's corpus reader would read no docs from it); "
                         "convert it first, e.g. with `python -m spacy fofe convert`.")


def read_examples(path: Union[str, Path], nlp, sentence_starts: bool = False) -> List[Example]:
    """The examples of a .spacy file (or a folder of them) as spaCy's Corpus reads them, for the
    commands that score a model on them; no docs at all is an error rather than zero scores."""
    check_docbin_path(path)
    examples = list(Corpus(path)(nlp))
    if not examples:
        raise ValueError(f"{path} holds no docs with tokens (spaCy's reader skips empty ones; a .spacy file, or a "
                         "folder of them, is expected).")
    return list(with_sentence_starts(examples)) if sentence_starts else examples


def with_sentence_starts(examples: Iterable[Example]) -> Iterator[Example]:
    """The examples with their reference's sentence starts set on the predicted docs (spaCy's
    `Example.get_aligned_sent_starts`), as a senter before fofe_ner would set them: documents whose
    sentences are known (CoNLL's) can then be read whole, with `stop_at_sentences` codes. A
    reference without sentence starts passes as is."""
    for eg in examples:
        if len(eg.predicted) and eg.reference.has_annotation("SENT_START"):
            starts = numpy.where(eg.get_aligned_sent_starts(), 1, -1).astype("uint64")  # -1: not a start
            eg.predicted.from_array([SENT_START], starts[:, None])
        yield eg


def _stamp(path: Path) -> Tuple[int, int]:
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


@registry.readers("spacy_fofe.CachedCorpus.v1")
def create_cached_docbin_reader(
    path: Optional[Path],
    gold_preproc: bool,
    max_length: int = 0,
    limit: int = 0,
    augmenter: Optional[Callable] = None,
    sentence_starts: bool = False,
) -> CachedCorpus:
    """spacy.Corpus.v1's arguments and results; the .spacy files are read only once.
    sentence_starts: give the predicted docs the data's sentence starts (`with_sentence_starts`)."""
    if path is None:
        raise ValueError(Errors.E913)
    return CachedCorpus(path, gold_preproc=gold_preproc, max_length=max_length, limit=limit, augmenter=augmenter,
                        sentence_starts=sentence_starts)
