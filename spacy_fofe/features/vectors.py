"""Word rows from the pipeline's pretrained vectors, looked up by a token attribute.

spaCy's StaticVectors reads `vocab.vectors` by the attribute the table was built with, which
spaCy does not save with a default-mode table (it reads ORTH again after loading), so a table
built with `spacy init vectors --attr LOWER`, as GloVe is, then misses every capitalised word.
This layer names its attribute itself (LOWER by default). Tokens without a vector share one
learned row. With `word_dropout`, training sends a random share of the tokens to that row too,
so the net learns to read a word it has no vector for from its affixes, shape and context (word
dropout, as WordDropoutHashEmbed does for hash rows).

By default the vectors are read as they are (frozen) and only the unknown row learns: a word
that is missing from the training data then has its row in the same space as the words the
net was trained on, and training does not update a table of every word each step, which made
it several times slower. With `fine_tune` the table is copied into the model at initialize and
trained, as the FOFE paper does (`TunedVectors.v1`, kept for the pipelines and configs that
name it). The two can sit side by side in one tok2vec, as in configs/conll_vectors.cfg: the tuned
rows fit the training data's words, the frozen ones keep unseen words where the vectors put them.
Frozen rows also come from floret tables (`spacy init vectors --mode floret`), which give every
word a vector from its character n-grams. Either way the vocab's vectors must stay the ones the
model was trained with.
"""

from typing import Callable, Dict, List, Optional, Tuple

import numpy
from spacy.attrs import intify_attr
from spacy.tokens import Doc
from spacy.util import registry
from spacy.vectors import Vectors
from thinc.api import Model, get_array_module, to_numpy
from thinc.types import Floats2d

from .sorted_ids import SortedIndex
from .token_arrays import per_doc


@registry.layers("spacy_fofe.WordVectors.v1")
def WordVectors(attr: str = "LOWER", word_dropout: float = 0.0,
                fine_tune: bool = False) -> Model[List[Doc], List[Floats2d]]:
    """Token rows from vocab.vectors (width = the vectors' width), frozen unless `fine_tune`.

    word_dropout: the share of tokens that get the unknown row in training, in [0, 1).
    """
    if intify_attr(attr) is None:
        raise ValueError(f"spacy_fofe.WordVectors.v1: unknown token attribute {attr!r}")
    if not 0.0 <= word_dropout < 1.0:
        raise ValueError(f"spacy_fofe.WordVectors.v1: word_dropout must be in [0, 1), got {word_dropout}")
    if fine_tune:
        return Model("tuned_vectors", _tuned_forward, init=_tuned_init,
                     attrs={"attr": attr, "word_dropout": word_dropout}, dims={"nO": None})
    return Model("word_vectors", _frozen_forward, init=_frozen_init,
                 attrs={"attr": attr, "word_dropout": word_dropout}, dims={"nO": None}, params={"U": None})


@registry.layers("spacy_fofe.TunedVectors.v1")
def TunedVectors(attr: str = "LOWER", word_dropout: float = 0.0) -> Model[List[Doc], List[Floats2d]]:
    """WordVectors with fine_tune: a trained copy of vocab.vectors."""
    return WordVectors(attr, word_dropout, fine_tune=True)


def _vectors(docs: Optional[List[Doc]]):
    if not docs:
        raise ValueError("spacy_fofe.WordVectors.v1 needs sample docs to find the vocab's vectors")
    vectors = docs[0].vocab.vectors
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise ValueError("spacy_fofe.WordVectors.v1: the pipeline has no vectors. Set [initialize] vectors "
                         "(or --paths.vectors), e.g. to GloVe built with `spacy init vectors ... --attr LOWER`.")
    return vectors


def _frozen_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    if model.has_param("U") is True:
        return
    width = _vectors(X).shape[1]
    model.set_dim("nO", width)
    model.set_param("U", model.ops.alloc2f(1, width))


def _tuned_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    if model.has_param("E") is True:
        return
    vectors = _vectors(X)
    if vectors.mode == "floret":
        raise ValueError("spacy_fofe.WordVectors.v1: fine_tune needs a table with a row per word; floret "
                         "vectors build a word's row from its n-grams, so read them frozen (fine_tune = false)")
    table = to_numpy(vectors.data).astype("float32")  # the vocab's table may live on either device
    unknown = numpy.zeros((1, table.shape[1]), dtype="float32")
    model.set_dim("nO", table.shape[1])
    model.set_param("E", model.ops.asarray(numpy.concatenate([table, unknown])))


def _keys(model: Model, docs: List[Doc]) -> numpy.ndarray:
    return numpy.concatenate([doc.to_array(intify_attr(model.attrs["attr"])) for doc in docs])


def _rows(model: Model, vectors, keys: numpy.ndarray, is_train: bool) -> numpy.ndarray:
    """Each key's row in `vectors`; -1 for a key without a vector or dropped in training."""
    if vectors.mode == "floret":  # every word has a vector; 0 only marks it found
        rows = numpy.zeros(len(keys), dtype="int64")
    else:
        rows = _key_rows(vectors).find(keys)
    rate = model.attrs.get("word_dropout", 0.0)  # pipelines saved before the setting lack it
    if is_train and rate > 0.0:
        rows[numpy.random.uniform(size=len(rows)) < rate] = -1
    return rows


# The last vectors table's keys and rows, by what tells that table apart (`_key_rows`).
_KEY_ROWS: Dict[tuple, SortedIndex] = {}


def _key_rows(vectors: Vectors) -> SortedIndex:
    """The table's keys and their rows as a SortedIndex, made when a batch first reads the table: a batch's
    rows are then one binary search per distinct key, where `Vectors.find` looks each token's key up in
    Python. Made again for another table, or one with other keys (its key2row another dict or size)."""
    key2row = vectors.key2row
    mark = (id(vectors), id(key2row), len(key2row), vectors.shape)
    index = _KEY_ROWS.get(mark)
    if index is None:
        keys = numpy.fromiter(key2row.keys(), dtype=numpy.uint64, count=len(key2row))
        rows = numpy.fromiter(key2row.values(), dtype=numpy.int64, count=len(key2row))
        index = SortedIndex(keys, rows)
        _KEY_ROWS.clear()  # one table at a time: a pipeline reads its vocab's
        _KEY_ROWS[mark] = index
    return index


def _frozen_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    unknown = model.get_param("U")
    lengths = [len(doc) for doc in docs]
    if not docs or sum(lengths) == 0:
        return [model.ops.alloc2f(n, unknown.shape[1]) for n in lengths], lambda d: []
    vectors = docs[0].vocab.vectors
    if vectors.shape[1] != unknown.shape[1]:
        raise ValueError(f"spacy_fofe.WordVectors.v1: the vocab's vectors are {vectors.shape[1]} wide, the "
                         f"model was trained on {unknown.shape[1]}-wide ones; load the pipeline's own vectors")
    keys = _keys(model, docs)
    rows = _rows(model, vectors, keys, is_train)
    if vectors.mode == "floret":
        found = vectors.get_batch(keys[rows >= 0])
    else:  # gathered where the table lives
        found = vectors.data[get_array_module(vectors.data).asarray(rows[rows >= 0])]
    missing = model.ops.asarray(rows < 0)
    flat = model.ops.alloc2f(len(rows), unknown.shape[1])
    flat[~missing] = model.ops.asarray(to_numpy(found) if model.ops.xp is numpy else found)
    flat[missing] = unknown
    output = per_doc(flat, lengths)

    def backprop(d_output: List[Floats2d]) -> List[Doc]:
        model.inc_grad("U", model.ops.flatten(d_output)[missing].sum(axis=0, keepdims=True))
        return []

    return output, backprop


def _tuned_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    table = model.get_param("E")
    lengths = [len(doc) for doc in docs]
    if not docs or sum(lengths) == 0:
        return [model.ops.alloc2f(n, table.shape[1]) for n in lengths], lambda d: []
    rows = _rows(model, docs[0].vocab.vectors, _keys(model, docs), is_train)
    rows[rows < 0] = table.shape[0] - 1
    rows = model.ops.asarray(rows)
    output = per_doc(table[rows], lengths)

    def backprop(d_output: List[Floats2d]) -> List[Doc]:
        d_table = model.ops.alloc2f(*table.shape)
        model.ops.scatter_add(d_table, rows, model.ops.flatten(d_output))
        model.inc_grad("E", d_table)
        return []

    return output, backprop


def same_vectors(a: Vectors, b: Vectors) -> bool:
    """Whether two vector tables hold the same keys and values."""
    if a.shape != b.shape or a.mode != b.mode or dict(a.key2row) != dict(b.key2row):
        return False
    return bool(numpy.array_equal(to_numpy(a.data), to_numpy(b.data)))
