"""The FOFE-NER architecture: tok2vec -> FOFE features of every fragment -> feed-forward scorer.

Input is (docs, fragments) with fragments an (F, 3) int array of (doc index, start, end);
output is a (F, n_labels + 1) array of probabilities, column 0 being NONE.

The first layer is computed on positions, not on fragments (docs/architecture.md, section 4): every
fragment feature is a prefix code read at one of the fragment's boundaries (or the mean of
its rows), and the first layer is linear, so each code array is projected once (N rows) and
a fragment's pre-activation is a sum of a few projected rows laid out on the (N, n) grid
of `fofe.py`. `project/scripts/bench_first_layer.py` measures this against the plain product
over gathered fragment features.
"""

from typing import Dict, List, Optional, Tuple

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, Relu, Softmax, chain, glorot_uniform_init
from thinc.types import Floats2d, Ints2d

from . import fofe

InT = Tuple[List[Doc], Ints2d]

# Feature groups, in the order of W's column blocks.
FEATURE_GROUPS = {
    "left_context": ["left_incl", "left_excl"],
    "right_context": ["right_incl", "right_excl"],
    "bag_of_words": ["tokens"],
    "char_fofe": ["lr", "rl"],
}
# Every source array (a row per token): the block of W it is multiplied by, and where on
# the fragment it is read: its "start" row, its "end" row, the "mean" over its rows, or
# start/end times -char_alpha ** (characters in the fragment) ("_decayed": char FOFE).
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


@registry.architectures("spacy_fofe.FOFENER.v1")
def build_fofe_ner_model(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_width: int = 128,
    depth: int = 2,
    dropout: float = 0.2,
    word_alpha: float = 0.5,
    char_alpha: float = 0.8,
    char_width: int = 32,
    n_char_buckets: int = 2048,
    left_context: bool = True,
    right_context: bool = True,
    bag_of_words: bool = True,
    char_fofe: bool = True,
    nO: Optional[int] = None,
) -> Model[InT, Floats2d]:
    """Build the FOFE fragment scorer over any tok2vec.

    hidden_width, depth: the feed-forward net (depth hidden ReLU layers, the first being
        the FOFE projection), the main speed knob.
    word_alpha, char_alpha: forgetting factors of the word and character FOFE, in (0, 1).
    char_width, n_char_buckets: character embeddings; a character's row is its Unicode
        code point modulo n_char_buckets (so any text works; rare collisions are shared rows).
    left_context, right_context, bag_of_words, char_fofe: switch feature groups (ablations).
    """
    groups = [name for name, on in [("left_context", left_context), ("right_context", right_context),
                                    ("bag_of_words", bag_of_words), ("char_fofe", char_fofe)] if on]
    if not groups:
        raise ValueError("spacy_fofe.FOFENER.v1: at least one feature group must be switched on")
    _check_range("word_alpha", word_alpha, 0.0, 1.0, closed=False)
    _check_range("char_alpha", char_alpha, 0.0, 1.0, closed=False)
    _check_range("dropout", dropout, 0.0, 1.0)
    for name, value in [("hidden_width", hidden_width), ("depth", depth), ("char_width", char_width),
                        ("n_char_buckets", n_char_buckets)]:
        if value < 1:
            raise ValueError(f"spacy_fofe.FOFENER.v1: {name} must be >= 1, got {value}")
    hidden = [Relu(nO=hidden_width, nI=hidden_width, dropout=dropout) for _ in range(depth - 1)]
    output = Softmax(nO=nO, nI=hidden_width)
    scorer = chain(*hidden, output) if hidden else output
    return Model(
        "fofe_ner",
        forward,
        init=init,
        layers=[tok2vec, scorer],
        refs={"tok2vec": tok2vec, "scorer": scorer, "output": output},
        dims={"nO": nO, "nI": None, "nH": hidden_width, "nC": char_width if char_fofe else 0},
        attrs={"groups": groups, "word_alpha": word_alpha, "char_alpha": char_alpha,
               "n_char_buckets": n_char_buckets, "dropout_rate": dropout,
               # Inference builds the (rows, n, hidden) grid of pre-activations this many cells
               # (4 MB of float32) at a time, so its memory does not grow with the batch.
               "chunk_cells": 2**20, "context_tokens": _context_tokens(groups, word_alpha, char_alpha)},
    )


# Tokens of context a tok2vec is assumed to read on each side (a CNN's depth x window_size).
TOK2VEC_REACH = 64


def _context_tokens(groups: List[str], word_alpha: float, char_alpha: float) -> int:
    """How many tokens beyond a fragment its scores depend on: the FOFE scans' reach (a
    token has at least one character) plus the tok2vec's. Scoring a long doc in windows
    with this much context each side gives the scores of the whole doc."""
    reach = 0
    if "left_context" in groups or "right_context" in groups:
        reach = fofe.scan_reach(word_alpha)
    if "char_fofe" in groups:
        reach = max(reach, fofe.scan_reach(char_alpha))
    return reach + TOK2VEC_REACH


def _check_range(name, value, low, high, closed=True):
    ok = (low <= value <= high) if closed else (low < value < high)
    if not ok:
        bounds = f"[{low}, {high}]" if closed else f"({low}, {high})"
        raise ValueError(f"spacy_fofe.FOFENER.v1: {name} must be in {bounds}, got {value}")


def init(model: Model[InT, Floats2d], X: Optional[InT] = None, Y=None) -> None:
    tok2vec = model.get_ref("tok2vec")
    docs = X[0] if X is not None else None
    tok2vec.initialize(X=docs) if docs is not None else tok2vec.initialize()
    if model.has_dim("nI") is not True:
        model.set_dim("nI", _infer_width(tok2vec, docs))
    if model.has_dim("nO") is not True:
        raise ValueError("fofe_ner model: the number of outputs (labels + 1) must be set before initialize")
    model.get_ref("output").set_dim("nO", model.get_dim("nO"))
    model.get_ref("scorer").initialize()
    nH, nC = model.get_dim("nH"), model.get_dim("nC")
    n_in = max(column.stop for column in _columns(model).values())
    model.set_param("W", glorot_uniform_init(model.ops, (nH, n_in)))
    model.set_param("b", model.ops.alloc1f(nH))
    if nC:
        rng = numpy.random.default_rng(0)
        table = rng.uniform(-0.1, 0.1, (model.attrs["n_char_buckets"], nC)).astype("float32")
        model.set_param("E", model.ops.asarray(table))


def _infer_width(tok2vec: Model, docs: Optional[List[Doc]]) -> int:
    if tok2vec.has_dim("nO") is True:
        return tok2vec.get_dim("nO")
    if docs:
        vectors = tok2vec.predict(docs)
        for array in vectors:
            return array.shape[1]
    raise ValueError("fofe_ner model: cannot tell the tok2vec's output width; give it an nO "
                     "dimension or initialize with sample docs")


def _columns(model: Model) -> Dict[str, slice]:
    """The columns of W each block of the switched-on feature groups occupies, in order."""
    nI, nC = model.get_dim("nI"), model.get_dim("nC")
    columns, offset = {}, 0
    for group in model.attrs["groups"]:
        for block in FEATURE_GROUPS[group]:
            width = nC if block in ("lr", "rl") else nI
            columns[block] = slice(offset, offset + width)
            offset += width
    return columns


def forward(model: Model[InT, Floats2d], inputs: InT, is_train: bool):
    docs, fragments = inputs
    ops = model.ops
    nO = model.get_dim("nO")
    tokvecs, backprop_tok2vec = model.get_ref("tok2vec")(docs, is_train)
    lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")
    fragments = numpy.asarray(fragments, dtype="int64").reshape((-1, 3))
    n_tokens = int(lengths.sum())
    if fragments.shape[0] == 0 or n_tokens == 0:
        def backprop_nothing(d_scores):
            backprop_tok2vec([ops.alloc2f(*v.shape) for v in tokvecs])
            return []
        return ops.alloc2f(0, nO), backprop_nothing

    x = ops.flatten(list(tokvecs))
    drop_mask = ops.get_dropout_mask(x.shape, model.attrs["dropout_rate"]) if is_train else None
    if drop_mask is not None:
        x = x * drop_mask
    n = int((fragments[:, 2] - fragments[:, 1]).max())
    offsets = numpy.cumsum(lengths) - lengths
    cells = (offsets[fragments[:, 0]] + fragments[:, 1]) * n + (fragments[:, 2] - fragments[:, 1] - 1)
    sources, char_offsets, backprop_sources = _sources(model, docs, x, ops.asarray(lengths))
    b = model.get_param("b")

    def grid_rows(begin: int, end: int, placed=None):
        """Pre-activations of grid rows begin..end; projects only the rows they read."""
        if placed is None:
            placed, _ = _project(model, sources, begin, min(end + n - 1, n_tokens))
        grid = ops.alloc3f(end - begin, n, model.get_dim("nH"))
        for place, (grid_op, _) in fofe.GRID_OPS.items():
            if place in placed:
                grid += grid_op(placed[place], n, 0, end - begin)
        if char_offsets is not None:
            decay = fofe.char_decay(*char_offsets, n, model.attrs["char_alpha"], begin, end)
            decayed = fofe.grid_at_start(placed["start_decayed"], n, 0, end - begin)
            decayed += fofe.grid_at_end(placed["end_decayed"], n, 0, end - begin)
            grid -= decay[:, :, None] * decayed
        return grid

    if not is_train:
        return _predict_in_chunks(model, grid_rows, cells, n, n_tokens, b), _no_backprop

    placed, backprop_placed = _project(model, sources, 0, n_tokens)
    grid = grid_rows(0, n_tokens, placed)
    nH = grid.shape[2]
    cells_dev = ops.asarray(cells)
    pre = grid.reshape((-1, nH))[cells_dev] + b
    hidden = ops.relu(pre)
    hidden_mask = ops.get_dropout_mask(hidden.shape, model.attrs["dropout_rate"])
    if hidden_mask is not None:
        hidden = hidden * hidden_mask
    scores, backprop_scorer = model.get_ref("scorer")(hidden, is_train)

    def backprop(d_scores: Floats2d):
        d_hidden = backprop_scorer(d_scores)
        if hidden_mask is not None:
            d_hidden = d_hidden * hidden_mask
        d_pre = ops.backprop_relu(d_hidden, pre)
        model.inc_grad("b", d_pre.sum(axis=0))
        d_grid = ops.alloc2f(n_tokens * n, nH)
        d_grid[cells_dev] = d_pre  # cells are distinct: plain assignment, no scatter-add
        d_grid = d_grid.reshape((n_tokens, n, nH))
        d_placed = {}
        for place, (_, grid_backward) in fofe.GRID_OPS.items():
            if place in placed:
                d_placed[place] = grid_backward(d_grid, n_tokens)
        if char_offsets is not None:
            decay = fofe.char_decay(*char_offsets, n, model.attrs["char_alpha"], 0, n_tokens)
            d_decayed = -decay[:, :, None] * d_grid
            d_placed["start_decayed"] = fofe.grid_at_start_backward(d_decayed, n_tokens)
            d_placed["end_decayed"] = fofe.grid_at_end_backward(d_decayed, n_tokens)
        d_x = backprop_sources(backprop_placed(d_placed))
        if drop_mask is not None:
            d_x = d_x * drop_mask
        backprop_tok2vec(ops.unflatten(d_x, ops.asarray(lengths)))
        return []

    return scores, backprop


def _no_backprop(d_scores):
    raise ValueError("fofe_ner model: backprop called on a forward pass run with is_train=False")


def _predict_in_chunks(model, grid_rows, cells, n, n_tokens, b) -> Floats2d:
    """Score fragments a block of grid rows at a time, so memory stays bounded on long docs."""
    ops = model.ops
    scorer = model.get_ref("scorer")
    order = numpy.argsort(cells, kind="stable")
    sorted_cells = cells[order]
    rows_per_chunk = max(1, model.attrs["chunk_cells"] // (n * model.get_dim("nH")))
    scores = ops.alloc2f(len(cells), model.get_dim("nO"))
    for begin in range(0, n_tokens, rows_per_chunk):
        end = min(begin + rows_per_chunk, n_tokens)
        lo, hi = numpy.searchsorted(sorted_cells, [begin * n, end * n])
        if lo == hi:
            continue
        grid = grid_rows(begin, end).reshape((-1, model.get_dim("nH")))
        hidden = grid[ops.asarray(sorted_cells[lo:hi] - begin * n)]  # a copy: add and clip in place
        hidden += b
        hidden = ops.relu(hidden, inplace=True)
        scores[ops.asarray(order[lo:hi])] = scorer.predict(hidden)
    return scores


def _sources(model, docs, x, lengths):
    """The per-position arrays the fragment features are read from, the tokens' character
    offsets (None without character features), and the backprop to the token vectors."""
    alpha = model.attrs["word_alpha"]
    groups = model.attrs["groups"]
    sources = {}
    if "left_context" in groups:
        sources["left_incl"] = fofe.prefix_fofe(x, lengths, alpha)
        sources["left_excl"] = fofe.shift_within(sources["left_incl"], lengths, -1)
    if "right_context" in groups:
        sources["right_incl"] = fofe.prefix_fofe(x, lengths, alpha, reverse=True)
        sources["right_excl"] = fofe.shift_within(sources["right_incl"], lengths, 1)
    if "bag_of_words" in groups:
        sources["tokens"] = x
    char_backprop, char_offsets = None, None
    if "char_fofe" in groups:
        codes, char_backprop, char_offsets = _char_sources(model, docs)
        sources.update(codes)

    def backprop(d_sources):
        d_x = d_sources.get("tokens", model.ops.alloc2f(*x.shape))
        if "left_incl" in d_sources:
            d_forward = d_sources["left_incl"] + fofe.shift_within(d_sources["left_excl"], lengths, 1)
            d_x = d_x + fofe.prefix_fofe_backward(d_forward, lengths, alpha)
        if "right_incl" in d_sources:
            d_backward = d_sources["right_incl"] + fofe.shift_within(d_sources["right_excl"], lengths, -1)
            d_x = d_x + fofe.prefix_fofe_backward(d_backward, lengths, alpha, reverse=True)
        if char_backprop is not None:
            char_backprop(d_sources)
        return d_x

    return sources, char_offsets, backprop


def doc_characters(docs: List[Doc]):
    """Code points of each doc's text, flat, and each token's flat [start, end) character offsets."""
    texts = [numpy.frombuffer(doc.text.encode("utf-32-le"), dtype=numpy.uint32) for doc in docs]
    char_lengths = numpy.asarray([len(t) for t in texts], dtype="int64")
    char_offsets = numpy.cumsum(char_lengths) - char_lengths
    starts, ends = [], []
    for doc, offset in zip(docs, char_offsets):
        if len(doc):
            idx = doc.to_array("IDX").astype("int64") + offset
            starts.append(idx)
            ends.append(idx + doc.to_array("LENGTH").astype("int64"))
    empty = numpy.zeros((0,), dtype="int64")
    codepoints = numpy.concatenate(texts) if texts else numpy.zeros((0,), dtype=numpy.uint32)
    return (codepoints, char_lengths,
            numpy.concatenate(starts) if starts else empty, numpy.concatenate(ends) if ends else empty)


def _char_sources(model, docs):
    ops = model.ops
    alpha = model.attrs["char_alpha"]
    codepoints, char_lengths, token_starts, token_ends = doc_characters(docs)
    ids = ops.asarray((codepoints % model.attrs["n_char_buckets"]).astype("int64"))
    char_lengths, token_starts, token_ends = (ops.asarray(a) for a in (char_lengths, token_starts, token_ends))
    table = model.get_param("E")
    char_vectors = table[ids]
    names = ("lr_end", "lr_before", "rl_start", "rl_after")
    codes = fofe.char_boundary_codes(char_vectors, char_lengths, token_starts, token_ends, alpha)

    def backprop(d_sources):
        d_codes = tuple(d_sources[name] for name in names)
        d_chars = fofe.char_boundary_codes_backward(d_codes, char_lengths, token_starts, token_ends, alpha,
                                                    len(ids))
        d_table = ops.alloc2f(*table.shape)
        ops.scatter_add(d_table, ids, d_chars)
        model.inc_grad("E", d_table)

    return dict(zip(names, codes)), backprop, (token_starts, token_ends)


def _project(model, sources, begin: int, end: int):
    """Rows begin..end of every source times its block of W, summed by where they are read.

    Returns {place: (end - begin, nH)} and the backprop from {place: gradient} to
    {source: gradient} (the training pass projects all rows, so begin is 0 there).
    """
    ops = model.ops
    W = model.get_param("W")
    columns = _columns(model)
    placed: Dict[str, Floats2d] = {}
    for name, array in sources.items():
        block, place = SOURCES[name]
        projected = ops.gemm(array[begin:end], W[:, columns[block]], trans2=True)
        placed[place] = placed[place] + projected if place in placed else projected

    def backprop(d_placed):
        d_W = ops.alloc2f(*W.shape)
        d_sources = {}
        for name, array in sources.items():
            block, place = SOURCES[name]
            d_W[:, columns[block]] += ops.gemm(d_placed[place], array, trans1=True)
            d_sources[name] = ops.gemm(d_placed[place], W[:, columns[block]])
        model.inc_grad("W", d_W)
        return d_sources

    return placed, backprop
