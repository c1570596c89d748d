"""The fragment filter: a per-token boundary scorer that drops implausible fragments before scoring.

`BoundaryScorer` reads the word codes the fragment scorer already has at every token (the
context left of it, the token, the context right of it) and gives two logits per token: that
an entity starts there, and that one ends there. It costs one small product per token. FOFENER
trains it beside the scorer (a logistic loss on the tokens that start and end gold spans; its
gradient stops at the codes, which trained along lost dev F1 on CoNLL-2003) and,
at inference, scores only the fragments whose first token passes `threshold` as a start and
whose last token passes it as an end; the others get NONE. `spacy fofe tune` sets the threshold
on dev to the highest one that keeps `RECALL` of the gold spans.
"""

from typing import Callable, Dict, Tuple

import numpy
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init
from thinc.types import Floats2d

from .fragments import flat_bounds
from .position_codes import Codes

# The word code arrays read, when the scorer's codes have them (all FOFENER.v3 models do).
SOURCES = ("left_excl", "tokens", "right_excl")
# The share of dev's gold spans that tune's threshold keeps.
RECALL = 0.995
MARGIN = 1e-3


@registry.layers("spacy_fofe.BoundaryScorer.v1")
def BoundaryScorer(threshold: float = 0.001) -> Model[Codes, Floats2d]:
    """Per token, the logits of starting and of ending a span, from the word codes.

    threshold: the probability a fragment's first token (as a start) and last token (as an
        end) must each reach for the fragment to be scored; 0 scores every fragment. `tune`
        replaces it with the highest that keeps RECALL of dev's gold spans.
    """
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"spacy_fofe.BoundaryScorer: threshold must be in [0.0, 1.0), got {threshold}")
    return Model("boundary_scorer", _forward, init=_init, dims={"nI": None}, params={"W": None, "b": None},
                 attrs={"threshold": float(threshold)})


def _init(model: Model, X=None, Y=None) -> None:
    model.set_param("W", glorot_uniform_init(model.ops, (2, len(SOURCES) * model.get_dim("nI"))))
    model.set_param("b", model.ops.alloc1f(2))


def _forward(model: Model, codes: Codes, is_train: bool) -> Tuple[Floats2d, Callable]:
    """(tokens, 2) logits: start, end. The backprop returns the gradients of the code arrays read."""
    ops = model.ops
    W, nI = model.get_param("W"), model.get_dim("nI")
    names = [name for name in SOURCES if name in codes.arrays]
    blocks = {name: W[:, i * nI:(i + 1) * nI] for i, name in enumerate(SOURCES)}
    logits = sum(ops.gemm(codes.arrays[name], blocks[name], trans2=True) for name in names) + model.get_param("b")

    def backprop(d_logits: Floats2d) -> Dict[str, Floats2d]:
        d_W = ops.alloc2f(*W.shape)
        d_arrays = {}
        for i, name in enumerate(SOURCES):
            if name in names:
                d_W[:, i * nI:(i + 1) * nI] = ops.gemm(d_logits, codes.arrays[name], trans1=True)
                d_arrays[name] = ops.gemm(d_logits, blocks[name])
        model.inc_grad("W", d_W)
        model.inc_grad("b", d_logits.sum(axis=0))
        return d_arrays

    return logits, backprop


def sigmoid(ops, logits: Floats2d) -> numpy.ndarray:
    """The probabilities of the logits, on the CPU."""
    return ops.to_numpy(_sigmoid(ops, logits))


def _sigmoid(ops, logits: Floats2d) -> Floats2d:
    # By tanh, which no logit overflows (exp(-x) does below -88 in float32).
    return 0.5 * (1.0 + ops.xp.tanh(0.5 * logits))


def targets(lengths: numpy.ndarray, fragments: numpy.ndarray, is_entity: numpy.ndarray) -> numpy.ndarray:
    """(tokens, 2) float32: 1 where an entity fragment starts (column 0) or ends (column 1)."""
    truth = numpy.zeros((int(lengths.sum()), 2), dtype="float32")
    first, end = flat_bounds(fragments[is_entity], lengths)
    truth[first, 0] = 1.0
    truth[end - 1, 1] = 1.0
    return truth


def logistic_gradient(model: Model, logits: Floats2d, truth: numpy.ndarray) -> Floats2d:
    """The gradient of the mean logistic loss over tokens."""
    probs = _sigmoid(model.ops, logits)
    return (probs - model.ops.asarray(truth, dtype=probs.dtype)) / max(len(truth), 1)


def plausible(probs: numpy.ndarray, fragments: numpy.ndarray, lengths: numpy.ndarray,
              threshold: float) -> numpy.ndarray:
    """A mask of the fragments whose first token's start and last token's end probabilities
    reach the threshold (`probs` as `sigmoid` gives them)."""
    return span_plausibility(probs, fragments, lengths) >= threshold


def span_plausibility(probs: numpy.ndarray, spans, lengths: numpy.ndarray) -> numpy.ndarray:
    """The highest threshold each (doc index, start, end) span (a list or an (N, 3) array) passes:
    min(start prob, end prob)."""
    spans_arr = numpy.asarray(spans, dtype="int64").reshape((-1, 3))
    first, end = flat_bounds(spans_arr, lengths)
    return numpy.minimum(probs[first, 0], probs[end - 1, 1])


def threshold_for_recall(plausibility: numpy.ndarray, recall: float = RECALL) -> float:
    """The highest threshold that keeps at least `recall` of spans with these plausibilities, less
    MARGIN of itself: the probabilities of a doc scored in another batch differ in their last bits."""
    if len(plausibility) == 0:
        return 0.0
    values = numpy.sort(plausibility)
    return float(values[int(numpy.floor((1.0 - recall) * len(values)))]) * (1.0 - MARGIN)
