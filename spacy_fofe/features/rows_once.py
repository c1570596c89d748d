"""Embed each distinct row of token features once per batch.

An embeddings-only tok2vec (spaCy's MultiHashEmbed without static vectors, the hash tables of
`WordDropoutHashEmbed` and `LexemeTablesEmbed`) gives a token a vector that depends on nothing
but the token's row of feature ids (NORM, PREFIX, SHAPE, ... hashes). Words repeat: in batches
of 1,000 CoNLL-2003 sentences about a quarter of the rows are distinct, so the hash tables and
the maxout that mixes them ran four times for every vector they made. `embed_rows_once` runs
them on the distinct rows only and copies each result to the tokens that share it (and sums
the tokens' gradients back onto it in training), which is the same function, computed once.
Predictions also keep the vectors of the rows they embedded (`KeptRows`), so a row seen in an earlier
batch (a frequent word's) costs a lookup, until the layers' weights change. Training counts its rows, and a
saved pipeline ships the ids of the most frequent (`MAX_SHIPPED_ROWS`), whose vectors its first prediction
makes at once: new text's frequent words are then lookups from its first doc, not only from their second sight.
"""

from typing import List, Optional, Sequence, Tuple, Union

import numpy
from spacy.attrs import intify_attr
from spacy.tokens import Doc
from thinc.api import Model, deserialize_attr, list2ragged, ragged2list, serialize_attr
from thinc.types import Floats2d, Ints2d

from .sorted_ids import SortedIndex, with_room
from .token_arrays import READS, per_doc, token_array

ROW_HASH_MULTIPLIER = numpy.uint64(0x9E3779B97F4A7C15)  # odd, so each step is a bijection of the hash
# Rows whose vectors predictions keep (with 64-wide vectors and 14 id columns, about 400 bytes each);
# past this the kept rows start afresh, so a process that sees ever more words does not grow without bound.
MAX_KEPT_ROWS = 50_000
# Training's most frequent rows, whose ids a saved pipeline ships (~110 bytes each) and whose vectors its first
# prediction makes: in CoNLL-2003 and GermEval 2014 they are most of a new text's tokens. The rest of
# MAX_KEPT_ROWS is room for the rows of the text predicted.
MAX_SHIPPED_ROWS = 30_000
# Distinct rows training counts (~120 bytes each); rows first seen past it are not counted.
MAX_COUNTED_ROWS = 300_000


def TokenIds(attrs: Sequence[Union[str, int]]) -> Model[List[Doc], List[numpy.ndarray]]:
    """Each doc's token attribute ids (spaCy's FeatureExtractor: the same node name and attrs), kept as
    numpy arrays on the host: `embed_rows_once` joins them and sends only the distinct rows to the
    model's device, so a batch costs the same array operations however many docs it has."""
    columns = [intify_attr(attr) for attr in attrs]
    return Model("extract_features", _ids_forward, attrs={"columns": columns, READS: columns})


def _ids_forward(model: Model, docs: List[Doc], is_train: bool):
    ids = token_array(docs, model.attrs["columns"])
    return per_doc(ids, [len(doc) for doc in docs]), lambda d_ids: []


def host_ids(ops, features: List) -> numpy.ndarray:
    """The docs' id arrays as one host array (one transfer when a layer before left them on a device)."""
    if all(isinstance(array, numpy.ndarray) for array in features):
        return numpy.concatenate(features) if features else numpy.zeros((0, 0), dtype="uint64")
    return ops.to_numpy(ops.xp.concatenate(features))


def embed_rows_once(extract: Model[List[Doc], List[Ints2d]], row_layers: Sequence[Model],
                    nO: int) -> Model[List[Doc], List[Floats2d]]:
    """chain(extract, list2ragged, *row_layers, ragged2list) run once per distinct feature row of a batch.

    extract gives each doc's (tokens, columns) feature ids; row_layers map each row on its own to nO columns
    (hash tables, maxout, layer norm; dropout there would mask repeated rows alike). The node has
    the layers of that chain, spaCy's MultiHashEmbed layout, so pipelines saved with it load.
    """
    layers = [extract, list2ragged(), *row_layers, ragged2list()]
    return Model("embed_rows_once", _forward, init=_init, layers=layers, dims={"nO": nO},
                 attrs={"kept_rows": KeptRows()})


def _init(model: Model, X=None, Y=None) -> None:
    """As thinc's chain initializes the same layers: each with a sample of its input, when given."""
    if X is None:
        for layer in model.layers:
            layer.initialize()
        return
    for layer in model.layers:
        layer.initialize(X=X)
        X = layer.predict(X)


def distinct_rows(ids: numpy.ndarray):
    """(the distinct rows of a 2d uint64 array, the index of each row's distinct row).

    Rows are sorted by a 64-bit hash of their ids, ten times faster than numpy.unique's row sort;
    a hash shared by two different rows is caught by the check and falls back to that sort.
    """
    if len(ids) == 0:
        return ids, numpy.zeros((0,), dtype="int64")
    ids = numpy.ascontiguousarray(ids, dtype="uint64")
    _, first, inverse = numpy.unique(row_keys(ids), return_index=True, return_inverse=True)
    rows, inverse = ids[first], inverse.reshape(-1)
    if not numpy.array_equal(rows[inverse], ids):
        rows, inverse = numpy.unique(ids, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    return rows, inverse


def row_keys(ids: numpy.ndarray) -> numpy.ndarray:
    """A 64-bit hash of each row of a 2d uint64 array (two different rows may share one)."""
    keys = ids[:, 0].copy()
    for column in range(1, ids.shape[1]):
        keys = keys * ROW_HASH_MULTIPLIER + ids[:, column]  # wraps modulo 2**64
    return keys


class RowCounts:
    """How many tokens of training had each feature row, by the row's hash (`row_keys`; of two rows
    sharing one, the first counted keeps the count), for up to MAX_COUNTED_ROWS rows."""

    def __init__(self, ids: Optional[numpy.ndarray] = None, counts: Optional[numpy.ndarray] = None):
        self.index, self.ids, self.counts, self.n_rows = SortedIndex(), None, numpy.zeros(0, "int64"), 0
        if ids is not None and len(ids):
            self.add(numpy.asarray(ids, dtype="uint64"), numpy.asarray(counts, dtype="int64"))

    def add(self, rows: numpy.ndarray, counts: numpy.ndarray) -> None:
        """Count the distinct `rows` (host ids) `counts` times each."""
        keys = row_keys(rows)
        slots = self.index.find(keys)
        seen = slots >= 0
        numpy.add.at(self.counts, slots[seen], counts[seen])
        _, first = numpy.unique(keys, return_index=True)  # one slot a hash
        new = first[~seen[first]][:MAX_COUNTED_ROWS - self.n_rows]
        if len(new) == 0:
            return
        if self.ids is None:
            self.ids = numpy.zeros((0, rows.shape[1]), dtype="uint64")
        self.ids = with_room(self.ids, self.n_rows, len(new), MAX_COUNTED_ROWS)
        self.counts = with_room(self.counts, self.n_rows, len(new), MAX_COUNTED_ROWS)
        at = numpy.arange(self.n_rows, self.n_rows + len(new))
        self.ids[at], self.counts[at] = rows[new], counts[new]
        self.index.add(keys[new], at)
        self.n_rows += len(new)

    def most_frequent(self, n: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The ids and counts of the `n` most frequent rows, most frequent first (ties by hash: the same
        rows whatever order training saw them in)."""
        if self.ids is None:
            return numpy.zeros((0, 0), dtype="uint64"), numpy.zeros(0, dtype="int64")
        ids, counts = self.ids[:self.n_rows], self.counts[:self.n_rows]
        order = numpy.lexsort((row_keys(ids), -counts))[:n]
        return ids[order], counts[order]


class KeptRows:
    """The vectors of the rows earlier predictions embedded, found by their hash (`row_keys`) and told
    apart by their ids where two share one. They hold while the row layers' weights are those they were
    made with: training clears them, and other weights (loaded, averaged parameters in use) are told by
    `weights_mark`. After a clear, the first prediction embeds training's most frequent rows (`counted`,
    saved with the model) before its own. A kept vector is the one embedding the row anew gives, up to float
    rounding (a product's rounding may depend on the other rows of its batch)."""

    def __init__(self, counted: Optional[RowCounts] = None):
        self.counted = RowCounts() if counted is None else counted
        self.clear()

    def __reduce__(self):  # a pickled or copied model keeps the counts, not the vectors
        return (KeptRows.from_dict, (self.to_dict(),))

    def clear(self, mark: Optional[Tuple] = None) -> None:
        self.index, self.ids, self.vectors, self.n_rows, self.n_shipped, self.mark = \
            SortedIndex(), None, None, 0, 0, mark

    def to_dict(self) -> dict:
        """The most frequent training rows' ids and counts, as a saved pipeline ships them."""
        ids, counts = self.counted.most_frequent(MAX_SHIPPED_ROWS)
        return {"ids": ids, "counts": counts}

    @classmethod
    def from_dict(cls, msg: dict) -> "KeptRows":
        return cls(RowCounts(msg["ids"], msg["counts"]))

    def vectors_of(self, rows: numpy.ndarray, row_layers: Sequence[Model], ops) -> Floats2d:
        """The row layers' output for the distinct `rows` (host ids): the kept rows' vectors, and the
        others computed by the layers in turn, then kept."""
        mark = weights_mark(row_layers)
        if mark != self.mark or (self.ids is not None and self.ids.shape[1] != rows.shape[1]):
            self.clear(mark)
            self._keep_shipped(rows.shape[1], row_layers, ops)
        keys = row_keys(rows)
        slots = self.index.find(keys)
        if self.n_rows:
            kept = numpy.flatnonzero(slots >= 0)
            slots[kept[(self.ids[slots[kept]] != rows[kept]).any(axis=1)]] = -1  # another row's hash
        new = numpy.flatnonzero(slots < 0)
        if len(new) == 0:
            return self.vectors[ops.asarray1i(slots)]
        vectors = _embed(ops.asarray(rows[new]), row_layers)
        out = self.vectors[ops.asarray1i(numpy.maximum(slots, 0))] if self.n_rows else \
            ops.alloc2f(len(rows), vectors.shape[1])
        out[ops.asarray1i(new)] = vectors
        self._keep(keys[new], rows[new], vectors, ops)
        return out

    def _keep_shipped(self, n_columns: int, row_layers: Sequence[Model], ops) -> None:
        """Keep the vectors of training's most frequent rows (those of another feature layout: none)."""
        shipped, _ = self.counted.most_frequent(MAX_SHIPPED_ROWS)
        if len(shipped) and shipped.shape[1] == n_columns:
            blocks = [_embed(ops.asarray(shipped[start:start + _SHIPPED_BLOCK]), row_layers)
                      for start in range(0, len(shipped), _SHIPPED_BLOCK)]
            self._keep(row_keys(shipped), shipped, ops.xp.concatenate(blocks), ops)
            self.n_shipped = self.n_rows

    def _keep(self, keys: numpy.ndarray, rows: numpy.ndarray, vectors: Floats2d, ops) -> None:
        room = MAX_KEPT_ROWS - self.n_shipped
        if self.n_rows + len(keys) > MAX_KEPT_ROWS:  # start afresh from the shipped rows, with this batch's new
            self.n_rows = self.n_shipped
            self.index = SortedIndex(row_keys(self.ids[:self.n_rows]) if self.n_rows else ())
            keys, rows, vectors = keys[:room], rows[:room], vectors[:room]
        if self.ids is None:
            self.ids, self.vectors = numpy.zeros((0, rows.shape[1]), rows.dtype), ops.alloc2f(0, vectors.shape[1])
        self.ids = with_room(self.ids, self.n_rows, len(keys), MAX_KEPT_ROWS)
        self.vectors = with_room(self.vectors, self.n_rows, len(keys), MAX_KEPT_ROWS)
        at = numpy.arange(self.n_rows, self.n_rows + len(keys))
        self.ids[at], self.vectors[self.n_rows:self.n_rows + len(keys)] = rows, vectors
        self.index.add(keys, at)  # a hash kept for another row moves to this one
        self.n_rows += len(keys)


_SHIPPED_BLOCK = 10_000  # shipped rows embedded at a time, so the layers' temporaries stay a few MB


def _embed(rows, row_layers: Sequence[Model]) -> Floats2d:
    for layer in row_layers:
        rows = layer.predict(rows)
    return rows


# Saved as a dict inside the model's message (its arrays as msgpack-numpy does), as spaCy saves a pipeline.
@serialize_attr.register(KeptRows)
def _serialize_kept_rows(_, value: KeptRows, name: str, model: Model) -> dict:
    return value.to_dict()


@deserialize_attr.register(KeptRows)
def _deserialize_kept_rows(_, value: dict, name: str, model: Model) -> KeptRows:
    return KeptRows.from_dict(value)


def weights_mark(layers: Sequence[Model]) -> Tuple:
    """What tells the layers' weights apart: each parameter array's identity and shape, and a sum of a
    sample of its numbers (an array changed in place, or a new one where a freed one was)."""
    mark = []
    for layer in layers:
        for node in layer.walk():
            for name in node.param_names:
                if node.has_param(name):
                    param = node.get_param(name)
                    mark.append((node.id, name, id(param), param.shape, float(param.ravel()[::997].sum())))
    return tuple(mark)


def _forward(model: Model, docs: List[Doc], is_train: bool):
    extract, _to_ragged, *row_layers, _to_list = model.layers
    ops = model.ops
    features, _ = extract(docs, is_train)  # ids: nothing to backpropagate to
    lengths = [len(doc_features) for doc_features in features]
    if sum(lengths) == 0:
        width = model.get_dim("nO")
        return [ops.alloc2f(n, width) for n in lengths], lambda d_vectors: []
    ids = host_ids(ops, features)
    rows, inverse = distinct_rows(ids)
    index = ops.asarray1i(inverse)
    if not is_train:
        return per_doc(model.attrs["kept_rows"].vectors_of(rows, row_layers, ops)[index], lengths), _no_backprop
    kept = model.attrs["kept_rows"]
    kept.clear()  # the weights are about to change
    kept.counted.add(rows, numpy.bincount(inverse, minlength=len(rows)))
    vectors = ops.asarray(rows)
    backprops = []
    for layer in row_layers:
        vectors, backprop_layer = layer(vectors, is_train)
        backprops.append(backprop_layer)
    tokens = vectors[index]

    def backprop(d_tokens: List[Floats2d]) -> List[Doc]:
        d_flat = ops.xp.concatenate(d_tokens)
        d_rows = ops.alloc2f(len(rows), d_flat.shape[1])
        ops.scatter_add(d_rows, index, d_flat)
        for backprop_layer in reversed(backprops):
            d_rows = backprop_layer(d_rows)
        return []

    return per_doc(tokens, lengths), backprop


def _no_backprop(d_vectors):
    raise ValueError("embed_rows_once: backprop called on a forward pass run with is_train=False")
