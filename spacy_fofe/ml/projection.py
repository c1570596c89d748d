"""The scorer's first layer, computed on positions rather than on fragments.

Every fragment feature is a code read at one of the fragment's boundaries (or the mean of
its rows), and the layer is linear before its ReLU, so each code array is projected once
(one row per token) and a fragment's pre-activation is a sum of a few projected rows,
laid out on the (rows, n) grid of `fofe.py` (docs/architecture.md, section 4).
`project/scripts/bench_first_layer.py` measures this against the plain product over
gathered fragment features.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init
from thinc.types import Floats2d, Ints1d, Ints2d

from . import fofe
from .position_codes import CHAR_ALPHA_GRAD, Codes

# The column blocks of W, in order, for each feature group.
FEATURE_BLOCKS = {
    "left_context": ("left_incl", "left_excl"),
    "right_context": ("right_incl", "right_excl"),
    "bag_of_words": ("tokens",),
    "char_fofe": ("lr", "rl"),
}
CHAR_BLOCKS = ("lr", "rl")
# Every code array: the block of W it is multiplied by, and where on the fragment it is
# read: its "start" row, its "end" row, the "mean" over its rows, or start/end times
# -char_alpha ** (characters in the fragment) ("_decayed": the character FOFE of a fragment).
SOURCES = {
    "left_incl": ("left_incl", "end"),
    "left_excl": ("left_excl", "start"),
    "right_incl": ("right_incl", "start"),
    "right_excl": ("right_excl", "end"),
    "tokens": ("tokens", "mean"),
    "lr_end": ("lr", "end"),
    "lr_before": ("lr", "start_decayed"),
    "rl_start": ("rl", "start"),
    "rl_after": ("rl", "end_decayed"),
}

InT = Tuple[Codes, Ints2d]
# Inference reads the fragments' cells one by one, instead of building the grid of every cell
# of their rows, when they take less than 1 / SPARSE_SHARE of the grid's cells (a filtered batch).
SPARSE_SHARE = 3
# With a length bias, fragments of this many tokens or more share its last row.
LENGTH_ROWS = 16


@registry.layers("spacy_fofe.FragmentProjection.v1")
def FragmentProjection(
    blocks: Sequence[str],
    nO: Optional[int] = None,
    nI: Optional[int] = None,
    nC: int = 0,
    dropout: float = 0.0,
    nL: int = 0,
) -> Model[InT, Floats2d]:
    """ReLU(W . features + b + L[length]) of every fragment (doc index, start, end), from position codes.

    blocks: the column blocks of W in order (FEATURE_BLOCKS' values); nI: the token vector
    width (word blocks); nC: the character embedding width (character blocks); nL: rows of the
    length bias L, one per fragment length (0: none). No code tells the net a fragment's length
    (the bag of words is a mean), and a row per length costs one addition.
    """
    return Model(
        "fragment_projection",
        _forward,
        init=_init,
        dims={"nO": nO, "nI": nI, "nC": nC, "nL": nL},
        # L only where it is used: pipelines saved without it load, and count as initialized.
        params={"W": None, "b": None, **({"L": None} if nL else {})},
        attrs={"blocks": list(blocks), "dropout_rate": dropout},
    )


def _init(model: Model, X=None, Y=None) -> None:
    n_in = max(column.stop for column in columns(model).values())
    model.set_param("W", glorot_uniform_init(model.ops, (model.get_dim("nO"), n_in)))
    model.set_param("b", model.ops.alloc1f(model.get_dim("nO")))
    if length_rows(model):
        model.set_param("L", model.ops.alloc2f(length_rows(model), model.get_dim("nO")))


def length_rows(model: Model) -> int:
    """The rows of the length bias; 0 without one (pipelines saved before it lack the dim)."""
    return model.get_dim("nL") if model.has_dim("nL") else 0


def columns(model: Model) -> Dict[str, slice]:
    """The columns of W each block occupies."""
    nI, nC = model.get_dim("nI"), model.get_dim("nC")
    out, offset = {}, 0
    for block in model.attrs["blocks"]:
        width = nC if block in CHAR_BLOCKS else nI
        out[block] = slice(offset, offset + width)
        offset += width
    return out


def _forward(model: Model, inputs: InT, is_train: bool) -> Tuple[Floats2d, Callable]:
    """Training builds the grid of every row, so the backprop reaches every code; inference
    builds only the rows the given fragments start on (the caller passes a block of them)."""
    codes, fragments = inputs
    ops = model.ops
    nH = model.get_dim("nO")
    lengths = codes.lengths
    n_tokens = int(lengths.sum())
    fragments = numpy.asarray(fragments, dtype="int64").reshape((-1, 3))
    starts = codes.flat_starts(fragments)
    sizes = fragments[:, 2] - fragments[:, 1]
    if len(fragments) == 0:
        return ops.alloc2f(0, nH), lambda d_hidden: {name: ops.alloc2f(*a.shape) for name, a in codes.arrays.items()}
    n = int(sizes.max())
    begin, end = (0, n_tokens) if is_train else (int(starts.min()), int(starts.max()) + 1)
    if not is_train and len(fragments) * SPARSE_SHARE < (end - begin) * n:
        pre = _cells_of(model, codes, starts, sizes)
    else:
        placed, backprop_placed = _project(model, codes.arrays, slice(begin, min(end + n - 1, n_tokens)))
        # alpha ** (characters in the fragment) of each grid cell; training's backward reuses it (begin is 0).
        decay = _char_decay(codes, n, begin, end) if codes.char_bounds is not None else None
        grid = fofe.fragment_grid(placed, n, end - begin, decay)
        cells = ops.asarray((starts - begin) * n + sizes - 1)
        pre = grid.reshape((-1, nH))[cells]  # a copy: add and clip in place
    pre += model.get_param("b")
    lengths_at = None
    if length_rows(model):
        lengths_at = ops.asarray1i(numpy.minimum(sizes, length_rows(model)) - 1)
        pre += model.get_param("L")[lengths_at]
    if not is_train:
        return ops.relu(pre, inplace=True), _no_backprop
    hidden = ops.relu(pre)
    mask = ops.get_dropout_mask(hidden.shape, model.attrs["dropout_rate"])
    if mask is not None:
        hidden = hidden * mask

    def backprop(d_hidden: Floats2d) -> Dict[str, Floats2d]:
        if mask is not None:
            d_hidden = d_hidden * mask
        d_pre = ops.backprop_relu(d_hidden, pre)
        model.inc_grad("b", d_pre.sum(axis=0))
        if lengths_at is not None:
            d_L = ops.alloc2f(*model.get_param("L").shape)
            ops.scatter_add(d_L, lengths_at, d_pre)
            model.inc_grad("L", d_L)
        d_grid = ops.alloc2f(n_tokens * n, nH)
        d_grid[cells] = d_pre  # fragments are distinct, so are their cells: no scatter-add needed
        d_grid = d_grid.reshape((n_tokens, n, nH))
        learned_alpha = decay is not None and codes.char_alpha_learned
        d_placed, d_decay = fofe.fragment_grid_backward(d_grid, placed, n_tokens, decay, decay_grad=learned_alpha)
        d_alpha = _char_alpha_grad(codes, d_decay, decay, n, n_tokens) if learned_alpha else None
        d_arrays = backprop_placed(d_placed)
        if d_alpha is not None:
            d_arrays[CHAR_ALPHA_GRAD] = d_alpha
        return d_arrays

    return hidden, backprop


def _no_backprop(d_hidden):
    raise ValueError("fragment_projection: backprop called on a forward pass run with is_train=False")


def _cells_of(model: Model, codes: Codes, starts: numpy.ndarray, sizes: numpy.ndarray) -> Floats2d:
    """The fragments' pre-activations without the grid. Each code array is projected only on the
    rows the fragments read it at (their first rows, their last rows, or every row inside one for
    the mean): a filtered batch reads a quarter to a half of its rows."""
    xp = model.ops.xp
    n_rows = int(codes.lengths.sum())
    last = starts + sizes - 1
    first_rows = numpy.bincount(starts, minlength=n_rows) > 0
    last_rows = numpy.bincount(last, minlength=n_rows) > 0
    # A row is inside a fragment when more fragments start at or before it than end before it.
    opened = numpy.bincount(starts, minlength=n_rows + 1) - numpy.bincount(last + 1, minlength=n_rows + 1)
    read = {"start": first_rows, "start_decayed": first_rows, "end": last_rows, "end_decayed": last_rows,
            "mean": numpy.cumsum(opened[:n_rows]) > 0}
    places = {SOURCES[name][1] for name in codes.arrays}
    placed, _ = _project(model, codes.arrays, {place: xp.asarray(numpy.flatnonzero(read[place])) for place in places})
    # Row r of the grid is row positions[place][r] of placed[place].
    positions = {place: xp.asarray(numpy.cumsum(read[place]) - 1) for place in places}
    decay = None
    if codes.char_bounds is not None:
        decay = fofe.fragment_decay(*codes.char_bounds, xp.asarray(starts), xp.asarray(last), codes.char_alpha)
    return fofe.fragment_cells(placed, xp.asarray(starts), xp.asarray(sizes), decay, positions)


def _char_decay(codes: Codes, n: int, begin: int, end: int):
    return fofe.char_decay(*codes.char_bounds, n, codes.char_alpha, begin, end)


def _char_alpha_grad(codes: Codes, d_decay: Floats2d, decay: Floats2d, n: int, n_tokens: int):
    """dL/dalpha from the gradient of the fragments' decay alpha**L: d(alpha**L)/dalpha is
    L * alpha**L / alpha."""
    n_chars = fofe.fragment_char_lengths(*codes.char_bounds, n, 0, n_tokens)
    return (d_decay * decay * n_chars).sum(keepdims=True).reshape((1,)) / codes.char_alpha


def _project(model: Model, arrays: Dict[str, Floats2d], rows: Union[slice, Dict[str, Ints1d]]):
    """Some rows of every code array times its block of W, summed by where they are read.

    rows: the same rows of every array (a slice), or {place: row indices} for the arrays read
    there. Returns {place: (rows, nH)} and the backprop from {place: gradient} to {array name:
    gradient} (training projects all rows, so the slice is every row there).
    """
    ops = model.ops
    W = model.get_param("W")
    blocks = columns(model)
    placed: Dict[str, Floats2d] = {}
    for name, array in arrays.items():
        block, place = SOURCES[name]
        projected = ops.gemm(array[rows if isinstance(rows, slice) else rows[place]], W[:, blocks[block]],
                             trans2=True)
        placed[place] = placed[place] + projected if place in placed else projected

    def backprop(d_placed: Dict[str, Floats2d]) -> Dict[str, Floats2d]:
        d_W = ops.alloc2f(*W.shape)
        d_arrays = {}
        for name, array in arrays.items():
            block, place = SOURCES[name]
            d_W[:, blocks[block]] += ops.gemm(d_placed[place], array, trans1=True)
            d_arrays[name] = ops.gemm(d_placed[place], W[:, blocks[block]])
        model.inc_grad("W", d_W)
        return d_arrays

    return placed, backprop


def blocks_of(groups: List[str]) -> List[str]:
    """W's column blocks for the switched-on feature groups, in order."""
    return [block for group in groups for block in FEATURE_BLOCKS[group]]
