"""Embed each distinct row of token features once per batch.

An embeddings-only tok2vec (spaCy's MultiHashEmbed without static vectors, the hash tables of
`WordDropoutHashEmbed` and `LexemeTablesEmbed`) gives a token a vector that depends on nothing
but the token's row of feature ids (NORM, PREFIX, SHAPE, ... hashes). Words repeat: in batches
of 1,000 CoNLL-2003 sentences about a quarter of the rows are distinct, so the hash tables and
the maxout that mixes them ran four times for every vector they made. `embed_rows_once` runs
them on the distinct rows only and copies each result to the tokens that share it (and sums
the tokens' gradients back onto it in training), which is the same function, computed once.
"""

from typing import List, Sequence, Union

import numpy
from spacy.attrs import intify_attr
from spacy.tokens import Doc
from thinc.api import Model, list2ragged, ragged2list
from thinc.types import Floats2d, Ints2d

ROW_HASH_MULTIPLIER = numpy.uint64(0x9E3779B97F4A7C15)  # odd, so each step is a bijection of the hash


def TokenIds(attrs: Sequence[Union[str, int]]) -> Model[List[Doc], List[numpy.ndarray]]:
    """Each doc's token attribute ids (spaCy's FeatureExtractor: the same node name and attrs), kept as
    numpy arrays on the host: `embed_rows_once` joins them and sends only the distinct rows to the
    model's device, so a batch costs the same array operations however many docs it has."""
    return Model("extract_features", _ids_forward, attrs={"columns": [intify_attr(attr) for attr in attrs]})


def _ids_forward(model: Model, docs: List[Doc], is_train: bool):
    columns = model.attrs["columns"]
    ids = [doc.to_array(columns).reshape((len(doc), len(columns))).astype("uint64", copy=False) for doc in docs]
    return ids, lambda d_ids: []


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
    return Model("embed_rows_once", _forward, init=_init, layers=layers, dims={"nO": nO})


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
    keys = ids[:, 0].copy()
    for column in range(1, ids.shape[1]):
        keys = keys * ROW_HASH_MULTIPLIER + ids[:, column]  # wraps modulo 2**64
    _, first, inverse = numpy.unique(keys, return_index=True, return_inverse=True)
    rows, inverse = ids[first], inverse.reshape(-1)
    if not numpy.array_equal(rows[inverse], ids):
        rows, inverse = numpy.unique(ids, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    return rows, inverse


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
    vectors = ops.asarray(rows)
    backprops = []
    for layer in row_layers:
        vectors, backprop_layer = layer(vectors, is_train)
        backprops.append(backprop_layer)
    index = ops.asarray1i(inverse)
    tokens = vectors[index]
    splits = numpy.cumsum(lengths)[:-1].tolist()

    def backprop(d_tokens: List[Floats2d]) -> List[Doc]:
        d_flat = ops.xp.concatenate(d_tokens)
        d_rows = ops.alloc2f(len(rows), d_flat.shape[1])
        ops.scatter_add(d_rows, index, d_flat)
        for backprop_layer in reversed(backprops):
            d_rows = backprop_layer(d_rows)
        return []

    return ops.xp.split(tokens, splits), backprop
