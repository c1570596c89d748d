"""A character CNN of each fragment, next to the character FOFE (Xu et al. 2017).

`CharCNNCodes` embeds every token's characters, convolves a window of characters that stops
at the token's edges, and max-pools over the token: one row per token. A fragment's feature
is the max of those rows over its tokens (`fragment_max`), which is the max over all the
fragment's characters of that convolution. Max is not linear, so unlike the FOFE codes this
feature cannot be projected once per token; `project_fragment_max` gathers it per fragment,
which costs fragments x n x width: linear in the tokens, with no Python loop per token or
fragment (log-step scans over characters, n steps over fragments), on numpy or cupy.
"""

from typing import Callable, List, Tuple

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, get_array_module, glorot_uniform_init
from thinc.types import Floats2d, Ints1d, Ints2d

from .dense import backprop_relu, gemm, relu
from .fofe import segment_positions, shift_within
from .position_codes import Codes, Gradients, doc_characters

# The code array CharCNNCodes writes: one row per token.
CHAR_CNN = "char_cnn"


@registry.layers("spacy_fofe.CharCNNCodes.v1")
def CharCNNCodes(nO: int = 32, nE: int = 16, nV: int = 2048, window: int = 1) -> Model[List[Doc], Codes]:
    """Max-pooled character convolution of every token.

    nO: filters; nE: character embedding width; nV: rows of the embedding table (a
    character's row is its code point modulo nV); window: characters each side the filter
    sees (within the token; zeros past its edges).
    """
    if min(nO, nE, nV) < 1 or window < 0:
        raise ValueError(f"spacy_fofe.CharCNNCodes: nO, nE and nV must be >= 1 and window >= 0, "
                         f"got nO={nO}, nE={nE}, nV={nV}, window={window}")
    return Model("char_cnn_codes", _forward, init=_init, dims={"nO": nO, "nE": nE, "nV": nV},
                 params={"E": None, "W": None, "b": None}, attrs={"window": window})


def _init(model: Model, X=None, Y=None) -> None:
    # Its own generator, so the table does not depend on what else was initialized first.
    rng = numpy.random.default_rng(1)
    nE, nO = model.get_dim("nE"), model.get_dim("nO")
    table = rng.uniform(-0.1, 0.1, (model.get_dim("nV"), nE)).astype("float32")
    model.set_param("E", model.ops.asarray(table))
    model.set_param("W", glorot_uniform_init(model.ops, (nO, nE * (2 * model.attrs["window"] + 1))))
    model.set_param("b", model.ops.alloc1f(nO))


def token_characters(docs: List[Doc]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The code points of every token's characters, token after token (whitespace between
    tokens left out), and the number of characters of each token."""
    codepoints, _, starts, ends = doc_characters(docs)
    lengths = ends - starts
    from_start, _ = segment_positions(lengths)
    rows = numpy.repeat(starts, lengths) + from_start
    return codepoints[rows], lengths


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Codes, Callable]:
    ops = model.ops
    E, W, b = (model.get_param(name) for name in ("E", "W", "b"))
    window = model.attrs["window"]
    codepoints, char_lengths = token_characters(docs)
    lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")
    nO = model.get_dim("nO")
    if len(codepoints) == 0:
        return Codes(lengths, {CHAR_CNN: ops.alloc2f(0, nO)}), lambda d_arrays: []
    ids = ops.asarray((codepoints % model.get_dim("nV")).astype("int64"))
    char_lengths = ops.asarray(char_lengths)
    x = E[ids]
    columns = ops.xp.concatenate([shifted(x, char_lengths, k) for k in range(-window, window + 1)], axis=1)
    pre = gemm(ops, columns, W, trans2=True)
    pre += b
    h = relu(ops, pre)
    pooled, which = segment_max(h, char_lengths)

    def backprop(d_arrays: Gradients) -> List[Doc]:
        d_h = ops.alloc2f(*h.shape)
        # A token's maxima are on its own rows, so the rows are distinct: assign, no scatter-add.
        d_h.ravel()[(which * nO + ops.xp.arange(nO)).ravel()] = d_arrays[CHAR_CNN].ravel()
        d_pre = backprop_relu(ops, d_h, h)
        model.inc_grad("W", gemm(ops, d_pre, columns, trans1=True))
        model.inc_grad("b", d_pre.sum(axis=0))
        d_columns = gemm(ops, d_pre, W)
        nE = x.shape[1]
        d_x = ops.alloc2f(*x.shape)
        for i, k in enumerate(range(-window, window + 1)):
            d_x += shifted(d_columns[:, i * nE:(i + 1) * nE], char_lengths, -k)
        d_E = ops.alloc2f(*E.shape)
        ops.scatter_add(d_E, ids, d_x)
        model.inc_grad("E", d_E)
        return []

    return Codes(lengths, {CHAR_CNN: pooled}), backprop


def shifted(x: Floats2d, lengths: Ints1d, k: int) -> Floats2d:
    """Row t gets x[t + k] when that row is in the same sequence, else zeros; its gradient is
    `shifted(d, lengths, -k)`."""
    step = 1 if k > 0 else -1
    for _ in range(abs(k)):
        x = shift_within(x, lengths, step)
    return x if k else x.copy()


def segment_max(x: Floats2d, lengths: Ints1d) -> Tuple[Floats2d, Ints2d]:
    """The max of every sequence's rows (column by column) and the row each came from.

    A segmented Hillis-Steele scan of running maxima (log2 of the longest sequence steps),
    read at each sequence's last row. Every length must be >= 1.
    """
    xp = get_array_module(x)
    lengths = xp.asarray(lengths, dtype="int64")
    from_start, _ = segment_positions(lengths)
    best = x.copy()
    where = xp.repeat(xp.arange(x.shape[0], dtype="int64")[:, None], x.shape[1], axis=1)
    step, longest = 1, int(lengths.max())
    while step < longest:
        take = (from_start[step:] >= step)[:, None] & (best[:-step] > best[step:])
        best[step:] = xp.where(take, best[:-step], best[step:])
        where[step:] = xp.where(take, where[:-step], where[step:])
        step *= 2
    last = xp.cumsum(lengths) - 1
    return best[last], where[last]


def fragment_max(v: Floats2d, starts: Ints1d, sizes: Ints1d) -> Tuple[Floats2d, Ints2d]:
    """For fragments of rows [start, start + size): the max of v's rows (column by column)
    and the row each came from. n (the longest size) whole-array steps."""
    xp = get_array_module(v)
    best = v[starts]
    where = xp.repeat(starts[:, None], v.shape[1], axis=1)
    for k in range(1, int(sizes.max())):
        rows = starts + xp.minimum(k, sizes - 1)  # a shorter fragment rereads its last row
        candidate = v[rows]
        take = candidate > best
        best = xp.where(take, candidate, best)
        where = xp.where(take, rows[:, None], where)
    return best, where


def project_fragment_max(ops, v: Floats2d, W: Floats2d, starts: Ints1d, sizes: Ints1d):
    """fragment_max(v) of each fragment times W (nH, width): (fragments, nH) pre-activations,
    and the backprop from their gradient to (dW, dv)."""
    starts, sizes = ops.asarray(starts), ops.asarray(sizes)
    features, where = fragment_max(v, starts, sizes)
    out = gemm(ops, features, W, trans2=True)

    def backprop(d_out: Floats2d) -> Tuple[Floats2d, Floats2d]:
        d_features = gemm(ops, d_out, W)
        d_v = ops.alloc2f(*v.shape)
        width = v.shape[1]
        # Fragments overlap, so several can take their max from the same row: scatter-add.
        ops.scatter_add(d_v.ravel(), (where * width + ops.xp.arange(width)).ravel(), d_features.ravel())
        return gemm(ops, d_out, features, trans1=True), d_v

    return out, backprop
