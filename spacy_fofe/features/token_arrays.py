"""A batch's token attributes read once: the layers that read the same docs' attributes (the hash
embeddings' ids, the lexeme tables' words, the USE words, the FOFE codes' words) share one
`doc.to_array` per doc instead of making one each: a call's own cost is about that of reading three
attributes more. What several layers derive from the same column (the batch's distinct words, for the
USE features and the character codes) is made once per batch too (`once_per_batch`), and a layer's rows
for the whole batch become per-doc arrays by slicing (`per_doc`).

A layer names the attributes it reads in its attrs (`READS`); a model's forward reads the union of
its layers' once per doc, for the docs it was given, while it runs (`reading_once`). A layer given
other docs (a window of a long doc) or asking for an attribute no layer named reads its own."""

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc
from thinc.api import Model

# The attrs key under which a layer lists the token attributes (ids) it reads.
READS = "token_attrs"


class _Batch:
    def __init__(self, docs: List[Doc], attrs: Sequence[int]):
        self.docs, self.attrs = docs, list(attrs)
        self.table: Optional[numpy.ndarray] = None
        self.made: Dict[Hashable, Any] = {}


_BATCH: ContextVar[Optional[_Batch]] = ContextVar("spacy_fofe_token_arrays", default=None)


def reads(model: Model) -> List[int]:
    """The token attributes that `model`'s layers name (`READS`), each once, in the order met."""
    attrs: List[int] = []
    for node in model.walk():
        attrs.extend(attr for attr in node.attrs.get(READS, ()) if attr not in attrs)
    return attrs


@contextmanager
def reading_once(model: Model, docs: List[Doc]) -> Iterator[None]:
    """While in it, `token_array(docs, ...)` for these docs reads the attributes `model`'s layers name
    with one `doc.to_array` per doc, at the first call, and gives later calls columns of that table."""
    attrs = reads(model)
    token = _BATCH.set(_Batch(docs, attrs) if attrs else None)
    try:
        yield
    finally:
        _BATCH.reset(token)


def token_array(docs: List[Doc], attrs: Sequence[int]) -> numpy.ndarray:
    """(tokens, len(attrs)) uint64: the attributes `attrs` of the docs' tokens, doc after doc, as
    `doc.to_array` gives them; from the batch's table where a `reading_once` holds one for these docs."""
    batch = _BATCH.get()
    if batch is not None and batch.docs is docs and all(attr in batch.attrs for attr in attrs):
        if batch.table is None:
            batch.table = _read(docs, batch.attrs)
        return batch.table[:, [batch.attrs.index(attr) for attr in attrs]]
    return _read(docs, attrs)


def once_per_batch(docs: List[Doc], key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()`, made once for these docs while a `reading_once` holds them and given again to later calls
    with the same `key` (the callers must not change what it gives); made afresh outside one."""
    batch = _BATCH.get()
    if batch is None or batch.docs is not docs:
        return make()
    if key not in batch.made:
        batch.made[key] = make()
    return batch.made[key]


def distinct_values(docs: List[Doc], attr: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The distinct values of the token attribute `attr` in the docs (sorted) and each token's index into
    them, doc after doc, as `numpy.unique(..., return_inverse=True)` gives them: once per batch."""
    def make():
        values, inverse = numpy.unique(token_array(docs, [attr])[:, 0], return_inverse=True)
        return values, inverse.reshape(-1)

    return once_per_batch(docs, ("distinct", attr), make)


def per_doc(rows, lengths: Sequence[int]) -> list:
    """Each doc's rows of `rows` (the docs' rows one after the other, `lengths[i]` for doc i), as views:
    what `numpy.split` gives, without its per-section overhead (a slice a doc), for numpy and cupy arrays."""
    ends = numpy.cumsum(numpy.asarray(lengths, dtype="int64")).tolist()
    return [rows[start:end] for start, end in zip([0] + ends[:-1], ends)]


def _read(docs: List[Doc], attrs: Sequence[int]) -> numpy.ndarray:
    attrs = list(attrs)
    if not docs:
        return numpy.zeros((0, len(attrs)), dtype="uint64")
    return numpy.concatenate([numpy.asarray(doc.to_array(attrs), dtype="uint64").reshape((len(doc), len(attrs)))
                              for doc in docs])
