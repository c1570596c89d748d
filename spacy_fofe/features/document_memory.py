"""Document memory: what the rest of a document says about each word.

A name is often hard to type where it stands ("Lebed" at the start of a headline) and easy
elsewhere in the same story ("Alexander Lebed said", "General Lebed"). `DocumentMemory`
wraps any tok2vec and appends to each token's vector a learned projection of the mean
context of the word's other occurrences in its doc: at each occurrence, the mean of the
token vectors `window` tokens to its left and, apart, to its right, within its sentence,
averaged over every other token of the doc with the same `attr` (LOWER: "Lebed", "LEBED"),
plus log(occurrences). A word met once in its doc gets no memory, and one-sentence docs
have few repeated words, so the memory is worth its cost on whole documents (`spacy fofe
convert --docs`). Cost: linear in the doc; one product of the token vectors with the
(d, 2 x width) weights, then window and group sums of (tokens, width) arrays.
"""

from typing import Callable, List, Tuple

import numpy
from spacy.attrs import intify_attr
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from ..ml.fofe import shift_within
from ..ml.position_codes import sentence_lengths
from .token_arrays import per_doc


@registry.layers("spacy_fofe.DocumentMemory.v1")
def DocumentMemory(
    tok2vec: Model[List[Doc], List[Floats2d]],
    width: int = 64,
    window: int = 2,
    attr: str = "LOWER",
) -> Model[List[Doc], List[Floats2d]]:
    """tok2vec's vectors, each followed by `width` columns of document memory (module docstring)."""
    name = "spacy_fofe.DocumentMemory.v1"
    if width < 1 or window < 1:
        raise ValueError(f"{name}: width and window must be >= 1, got width {width}, window {window}")
    attr_id = intify_attr(attr)
    if attr_id is None:
        raise ValueError(f"{name}: unknown token attribute {attr!r}")
    return Model("document_memory", _forward, init=_init, layers=[tok2vec], refs={"tok2vec": tok2vec},
                 params={"W": None, "b": None}, dims={"nO": None, "nM": width, "nI": None},
                 attrs={"window": window, "attr": attr_id})


def _init(model: Model, X=None, Y=None) -> None:
    tok2vec = model.layers[0]
    tok2vec.initialize(X=X) if X is not None else tok2vec.initialize()
    if tok2vec.has_dim("nO") is True:
        n_in = tok2vec.get_dim("nO")
    elif X:
        n_in = tok2vec.predict(X[:1])[0].shape[1]
    else:
        raise ValueError("spacy_fofe.DocumentMemory.v1: cannot tell the tok2vec's output width; "
                         "give it an nO dimension or initialize with sample docs")
    n_mem = model.get_dim("nM")
    model.set_dim("nI", n_in)
    model.set_dim("nO", n_in + n_mem)
    # Small weights: the memory starts as a faint addition to the vectors it is put next to.
    W = model.ops.asarray2f(numpy.random.normal(0.0, 0.1 / numpy.sqrt(2 * n_in + 1), (2 * n_in + 1, n_mem)))
    model.set_param("W", W)
    model.set_param("b", model.ops.alloc1f(n_mem))


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    """The memory is linear in the token vectors: W's rows for the left and right windows are
    applied to X first, so the window sums and the group sums run on `width` columns, not 2 x d."""
    vectors, backprop_tok2vec = model.layers[0](docs, is_train)
    ops = model.ops
    lengths = [len(doc) for doc in docs]
    if sum(lengths) == 0:
        return [ops.alloc2f(n, model.get_dim("nO")) for n in lengths], lambda d: backprop_tok2vec(
            [ops.alloc2f(n, model.get_dim("nI")) for n in lengths])
    X = ops.flatten(list(vectors))
    n_in, n_mem, window = X.shape[1], model.get_dim("nM"), model.attrs["window"]
    W, b = model.get_param("W"), model.get_param("b")
    W_sides = ops.xp.hstack([W[:n_in], W[n_in:2 * n_in]])  # (d, 2 x width): left, then right window
    sides = X @ W_sides
    sentences = sentence_lengths(docs)
    groups, counts = _word_groups(docs, model.attrs["attr"])
    context, backprop_context = _window_means(ops, sides, sentences, window)
    memory, backprop_memory = _others_mean(ops, context, groups, counts)
    log_count = ops.asarray2f(numpy.log(counts[groups]).reshape((-1, 1)))
    output = ops.xp.hstack([X, memory + log_count * W[2 * n_in] + b])

    def backprop(d_outputs: List[Floats2d]):
        d_output = ops.flatten(list(d_outputs))
        d_memory = ops.xp.ascontiguousarray(d_output[:, n_in:])
        d_sides = backprop_context(backprop_memory(d_memory))
        d_W_sides = X.T @ d_sides
        d_W = ops.xp.vstack([d_W_sides[:, :n_mem], d_W_sides[:, n_mem:], log_count.T @ d_memory])
        model.inc_grad("W", d_W)
        model.inc_grad("b", d_memory.sum(axis=0))
        d_X = d_output[:, :n_in] + d_sides @ W_sides.T
        return backprop_tok2vec(ops.unflatten(d_X, ops.asarray1i(lengths)))

    return per_doc(output, lengths), backprop


def _word_groups(docs: List[Doc], attr: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """A group id per token (the same word in the same doc; numbered by doc, then by word) and the
    size of each group: one sort of the batch's (doc, word) pairs."""
    words = numpy.concatenate([doc.to_array([attr]).reshape(-1) for doc in docs])
    doc_of_token = numpy.repeat(numpy.arange(len(docs)), [len(doc) for doc in docs])
    order = numpy.lexsort((words, doc_of_token))
    words, doc_of_token = words[order], doc_of_token[order]
    starts_group = numpy.ones(len(order), dtype=bool)
    starts_group[1:] = (words[1:] != words[:-1]) | (doc_of_token[1:] != doc_of_token[:-1])
    groups = numpy.empty(len(order), dtype="int64")
    groups[order] = numpy.cumsum(starts_group) - 1
    return groups, numpy.bincount(groups)


def _window_means(ops, sides: Floats2d, sentences: numpy.ndarray, window: int):
    """Per token, the mean of the left half of `sides`' rows over the `window` tokens before it
    plus that of the right half over the `window` tokens after it, within its sentence (missing
    neighbours count as zeros; `sentences`: the batch's sentence lengths), and the backprop."""
    half = sides.shape[1] // 2

    def mean_of_shifts(x: Floats2d, step: int) -> Floats2d:
        """Sum over k in 1..window of x's row t + k * step within its sentence, over window."""
        total = ops.alloc2f(*x.shape)
        for k in range(1, window + 1):
            total += shift_within(x, sentences, k * step)
        return total / window

    def backprop(d_context: Floats2d) -> Floats2d:
        # a shift's gradient is the shift the other way
        return ops.xp.hstack([mean_of_shifts(d_context, 1), mean_of_shifts(d_context, -1)])

    return mean_of_shifts(sides[:, :half], -1) + mean_of_shifts(sides[:, half:], 1), backprop


def _others_mean(ops, values: Floats2d, groups: numpy.ndarray, counts: numpy.ndarray):
    """Per token, the mean of `values` over the other tokens of its group (zeros when it has
    none), and the backprop; the map is symmetric, so the backprop is the same map."""
    index = ops.asarray1i(groups)
    inverse = ops.asarray2f((1.0 / numpy.maximum(counts - 1, 1)).astype("float32")[groups].reshape((-1, 1)))

    def others_mean(rows: Floats2d) -> Floats2d:
        sums = ops.alloc2f(len(counts), rows.shape[1])
        ops.scatter_add(sums, index, rows)
        return (sums[index] - rows) * inverse

    return others_mean(values), others_mean
