"""Second-pass augmentation (Xu et al. 2017): a second scorer that also reads the first pass's
decisions about the fragments around the one it scores.

The first pass scores every fragment of up to n tokens. Its decisions become one row per
token (`token_decisions`: for each label, the highest first-pass probability of any fragment
covering the token), and those rows are read like the token vectors: left and right FOFE
codes outside the fragment and their mean inside it (`decision_codes`). The second scorer
sees the first one's features plus these. The decisions are its input, not a path for
gradients: the first pass is trained by its own loss on the same targets (the model returns
both passes' scores in training, see model.py). Everything is whole-array work over tokens
and fragments: n steps of a scatter-max, two FOFE scans.
"""

from typing import Dict

import numpy
from thinc.api import get_array_module
from thinc.types import Floats2d, Ints1d

from . import fofe

# The code arrays `decision_codes` writes (projection.SOURCES says where each is read).
DECISION_ARRAYS = ("decision_left_excl", "decision_right_excl", "decision_tokens")


def token_decisions(probs: Floats2d, flat_starts: Ints1d, sizes: Ints1d, n_tokens: int) -> Floats2d:
    """(n_tokens, labels): for each token and label (NONE, column 0 of `probs`, left out), the
    highest probability of that label among the fragments that cover the token; 0 where none does.

    probs: (F, labels + 1) first-pass probabilities of fragments starting at flat row
    `flat_starts` with `sizes` tokens.
    """
    xp = get_array_module(probs)
    out = xp.zeros((n_tokens, probs.shape[1] - 1), dtype=probs.dtype)
    if len(probs) == 0:
        return out
    labels = probs[:, 1:]
    for offset in range(int(sizes.max())):
        covers = sizes > offset
        _scatter_max(out, flat_starts[covers] + offset, labels[covers])
    return out


def _scatter_max(table, rows, values) -> None:
    xp = get_array_module(table)
    if xp is numpy:
        numpy.maximum.at(table, rows, values)
    else:  # cupy
        import cupyx

        cupyx.scatter_max(table, rows, values)


def decision_codes(decisions: Floats2d, lengths: Ints1d, alpha: float) -> Dict[str, Floats2d]:
    """The decision rows read as the token vectors are: the left code before a fragment (read at
    its first token), the right code after it (read at its last), and the rows themselves
    (their mean over the fragment). `lengths`: the sequences the codes run over."""
    left = fofe.shift_within(fofe.prefix_fofe(decisions, lengths, alpha), lengths, -1)
    right = fofe.shift_within(fofe.prefix_fofe(decisions, lengths, alpha, reverse=True), lengths, 1)
    return dict(zip(DECISION_ARRAYS, (left, right, decisions)))


def positions_in(fragments: numpy.ndarray, flat_starts: numpy.ndarray, all_flat_starts: numpy.ndarray,
                 all_sizes: numpy.ndarray, n: int) -> numpy.ndarray:
    """Where each fragment is in a list of fragments ordered by start row, then size (as
    `fragments.enumerate_fragments` orders them) that holds it."""
    keys = all_flat_starts * (n + 1) + all_sizes
    return numpy.searchsorted(keys, flat_starts * (n + 1) + (fragments[:, 2] - fragments[:, 1]))
