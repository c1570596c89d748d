"""A training corpus reader that deserializes its .spacy files once per process.

spaCy's Corpus.v1 reads the DocBin again on every pass: each training epoch and each dev
evaluation. For docs with `doc.spans` that is slow, because every span group goes through
`srsly.msgpack_loads`, which looks up srsly's msgpack decoders (an entry-point scan of all
installed distributions) on each call: GermEval's 24,000 training sentences take 26 s to read
here, every epoch, and longer where more packages are installed. CachedCorpus is Corpus.v1
with the reference docs kept after the first read; the Examples are still made fresh on each
pass, exactly as Corpus.v1 makes them, so training sees the same data in the same order.
"""

from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Tuple, Union

from spacy.errors import Errors
from spacy.tokens import Doc
from spacy.training import Corpus
from spacy.util import registry
from spacy.vocab import Vocab


class CachedCorpus(Corpus):
    """spaCy's Corpus whose reference docs are read from disk once and then kept in memory."""

    def __init__(self, path: Union[str, Path], **settings) -> None:
        super().__init__(path, **settings)
        self._cache: Optional[Tuple[Vocab, List[Doc]]] = None  # docs belong to one vocab's StringStore

    def read_docbin(self, vocab: Vocab, locs: Iterable[Union[str, Path]]) -> Iterator[Doc]:
        if self._cache is None or self._cache[0] is not vocab:
            self._cache = (vocab, list(super().read_docbin(vocab, locs)))
        yield from self._cache[1]


@registry.readers("spacy_fofe.CachedCorpus.v1")
def create_cached_docbin_reader(
    path: Optional[Path],
    gold_preproc: bool,
    max_length: int = 0,
    limit: int = 0,
    augmenter: Optional[Callable] = None,
) -> CachedCorpus:
    """spacy.Corpus.v1's arguments and results; the .spacy files are read only once."""
    if path is None:
        raise ValueError(Errors.E913)
    return CachedCorpus(path, gold_preproc=gold_preproc, max_length=max_length, limit=limit, augmenter=augmenter)
