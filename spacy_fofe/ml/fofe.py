"""FOFE operations: prefix codes of vector sequences and fragment grids built from them.

Array-only (numpy or cupy, chosen by the input array); knows nothing about spaCy.
Sequences are given flat: `x` holds the rows of all sequences one after another and
`lengths` says how many rows each sequence has. Fragments are laid out on a grid of
shape (rows, n): cell (t, l) is the fragment that starts at row t and has l + 1 rows.
Every fragment feature is a prefix code read at one of the fragment's two boundaries,
so the grids are built from shifted slices of (N, width) arrays, never from copies of
each fragment's rows and never from a (fragments x rows) matrix.
"""

from typing import Callable, Dict, Optional, Tuple

import numpy
from thinc.api import get_array_module
from thinc.types import Floats1d, Floats2d, Floats3d, Ints1d


def segment_positions(lengths: Ints1d) -> Tuple[Ints1d, Ints1d]:
    """Return, for every row, its distance from the start and from the end of its sequence."""
    xp = get_array_module(lengths)
    lengths = xp.asarray(lengths, dtype="int64")
    total = int(lengths.sum())
    ends = xp.cumsum(lengths)
    starts = ends - lengths
    if xp is numpy:  # a third of searchsorted's time
        seq_of_row = numpy.repeat(numpy.arange(len(lengths)), lengths)
    else:  # cupy's repeat takes no array of counts
        seq_of_row = xp.searchsorted(ends, xp.arange(total), side="right")
    from_start = xp.arange(total, dtype="int64") - starts[seq_of_row]
    to_end = lengths[seq_of_row] - 1 - from_start
    return from_start, to_end


NEGLIGIBLE = 1e-9
# On the CPU, prefix_fofe scans block by block of about this many bytes: a long batch's whole array
# falls out of the cache at every step of the scan, a block stays in it (2-3x faster on long docs).
CPU_BLOCK_BYTES = 1 << 20


def prefix_fofe(x: Floats2d, lengths: Ints1d, alpha: float, reverse: bool = False) -> Floats2d:
    """FOFE prefix codes z_t = alpha * z_{t-1} + x_t of every sequence (right-to-left if reverse).

    A segmented Hillis-Steele scan: log2(longest sequence) whole-array steps, so there is
    no Python loop over rows and it runs unchanged on GPU. It stops once the rows not yet
    added weigh less than NEGLIGIBLE in all (alpha**k / (1 - alpha) for the nearest, k rows
    back): below float32 precision, and it bounds the steps on very long docs (5 steps at
    alpha 0.5, 7 at 0.8). Forward and backward stop at the same step, so they stay adjoint.
    So a row reads `scan_reach` rows back and no further: on the CPU the scan runs on blocks of
    CPU_BLOCK_BYTES, each with the reach before it, and gives the same sums in the same order.
    """
    xp = get_array_module(x)
    if x.shape[0] == 0:
        return x.copy()
    from_start, to_end = segment_positions(xp.asarray(lengths))
    dist = to_end if reverse else from_start
    steps = list(scan_steps(alpha, int(xp.asarray(lengths).max())))
    n_rows = x.shape[0]
    reach = sum(step for step, _ in steps)
    block = n_rows if xp is not numpy else max(4 * reach, CPU_BLOCK_BYTES // max(1, x.itemsize * x.shape[1]))
    if block >= n_rows:
        return _scan(x.copy(), dist, steps, reverse)
    z = numpy.empty_like(x)
    for begin in range(0, n_rows, block):
        end = min(begin + block, n_rows)
        lo, hi = (begin, min(end + reach, n_rows)) if reverse else (max(begin - reach, 0), end)
        z[begin:end] = _scan(x[lo:hi].copy(), dist[lo:hi], steps, reverse)[begin - lo: end - lo]
    return z


def _scan(z: Floats2d, dist: Ints1d, steps, reverse: bool) -> Floats2d:
    """prefix_fofe's scan, in place on z; dist: each row's distance from its sequence's start (end if reverse)."""
    for step, decay in steps:
        if step >= z.shape[0]:
            break
        # decay on the rows whose sequence reaches `step` rows back, 0 elsewhere: a column, so
        # each step makes one temporary of z's size.
        if reverse:
            scale = (dist[:-step] >= step).astype(z.dtype)[:, None] * z.dtype.type(decay)
            z[:-step] += z[step:] * scale
        else:
            scale = (dist[step:] >= step).astype(z.dtype)[:, None] * z.dtype.type(decay)
            z[step:] += z[:-step] * scale
    return z


def scan_steps(alpha: float, longest: int):
    """The (step, alpha ** step) pairs of `prefix_fofe`'s scan over sequences of at most `longest` rows."""
    step, decay = 1, float(alpha)
    while step < longest and decay / (1.0 - alpha) >= NEGLIGIBLE:
        yield step, decay
        step *= 2
        decay *= decay


def scan_reach(alpha: float) -> int:
    """How many rows back (or ahead) a prefix code reads, however long the sequence: a code
    computed on a window that starts this many rows earlier equals the whole sequence's."""
    return sum(step for step, _ in scan_steps(alpha, 2**62))


def prefix_fofe_backward(d_codes: Floats2d, lengths: Ints1d, alpha: float, reverse: bool = False) -> Floats2d:
    """Gradient of `prefix_fofe` with respect to x: the scan run the other way."""
    return prefix_fofe(d_codes, lengths, alpha, reverse=not reverse)


def prefix_fofe_alpha_grad(codes: Floats2d, lengths: Ints1d, alpha: float, reverse: bool = False) -> Floats2d:
    """d z_t / d alpha of prefix codes z = prefix_fofe(x, lengths, alpha, reverse), from z itself:
    since z_t = alpha * z_{t-1} + x_t, the derivative w_t = alpha * w_{t-1} + z_{t-1} is the
    prefix code of z shifted one row (the scan's cut-off applies to both alike)."""
    return prefix_fofe(shift_within(codes, lengths, 1 if reverse else -1), lengths, alpha, reverse=reverse)


def shift_within(x: Floats2d, lengths: Ints1d, step: int) -> Floats2d:
    """Row t gets x[t + step] when that row is in the same sequence, else zeros.

    `shift_within(F, lengths, -1)` is the code of the prefix before each row (zero at a
    sequence start). Its gradient is `shift_within(d, lengths, -step)`. One pass over x: the
    shifted rows are written straight into the output, masked, with no temporary of x's size.
    """
    xp = get_array_module(x)
    k = abs(int(step))
    if k == 0:
        return x.copy()
    out = xp.empty_like(x)
    if x.shape[0] <= k:
        out[:] = 0
        return out
    from_start, to_end = segment_positions(xp.asarray(lengths))
    if step < 0:
        out[:k] = 0
        xp.multiply(x[:-k], (from_start[k:] >= k).astype(x.dtype)[:, None], out=out[k:])
    else:
        out[-k:] = 0
        xp.multiply(x[k:], (to_end[:-k] >= k).astype(x.dtype)[:, None], out=out[:-k])
    return out


def _window(y: Floats2d, n: int, begin: int, end: int) -> Floats2d:
    """Rows begin .. end + n - 1 of y, zeros past its end: all that grid rows begin..end read.

    Copies only those rows, so scoring a long document chunk by chunk stays linear.
    """
    xp = get_array_module(y)
    rows = y[begin: end + n - 1]
    missing = (end - begin) + n - 1 - rows.shape[0]
    if missing > 0:
        rows = xp.concatenate([rows, xp.zeros((missing, y.shape[1]), dtype=y.dtype)], axis=0)
    return rows


def grid_at_start(y: Floats2d, n: int, begin: int, end: int) -> Floats3d:
    """Cell (t, l) holds y[t]: a feature read at the fragment's first row."""
    return fragment_grid({"start": y[begin:]}, n, end - begin)


def grid_at_end(y: Floats2d, n: int, begin: int, end: int) -> Floats3d:
    """Cell (t, l) holds y[t + l]: a feature read at the fragment's last row (zeros past the end)."""
    return fragment_grid({"end": y[begin:]}, n, end - begin)


def grid_mean(y: Floats2d, n: int, begin: int, end: int) -> Floats3d:
    """Cell (t, l) holds the mean of y[t..t + l]: the fragment's bag of words.

    A running sum along l, so it is exact however long the sequence is (a difference of
    two cumulative sums would lose precision on long documents in float32).
    """
    return fragment_grid({"mean": y[begin:]}, n, end - begin)


def grid_at_start_backward(d_grid: Floats3d, n_rows: int) -> Floats2d:
    return fragment_grid_backward(d_grid, ("start",), n_rows)[0]["start"]


def grid_at_end_backward(d_grid: Floats3d, n_rows: int) -> Floats2d:
    return fragment_grid_backward(d_grid, ("end",), n_rows)[0]["end"]


def grid_mean_backward(d_grid: Floats3d, n_rows: int) -> Floats2d:
    return fragment_grid_backward(d_grid, ("mean",), n_rows)[0]["mean"]


def fragment_grid(placed: Dict[str, Floats2d], n: int, rows: int, decay: Optional[Floats2d] = None) -> Floats3d:
    """The sum of the grids of `placed` ({"start" | "end" | "mean": (N, width) arrays, each read at
    that place, at least one}), minus decay * (the start grid of placed["start_decayed"] plus the
    end grid of placed["end_decayed"]) when a (rows, n) `decay` is given. The arrays' first row is
    the grid's first; rows past their end read as zeros. Built one column l at a time, so no term
    makes a temporary of the grid's size.
    """
    first = next(iter(placed.values()))
    xp = get_array_module(first)
    read = {place: (y[:rows] if place in ("start", "start_decayed") else _window(y, n, 0, rows))
            for place, y in placed.items()}
    grid = xp.zeros((rows, n, first.shape[1]), dtype=first.dtype)
    if "start" in read:
        grid += read["start"][:, None, :]
    running = xp.zeros((rows, first.shape[1]), dtype=first.dtype) if "mean" in read else None
    scratch = xp.empty((rows, first.shape[1]), dtype=first.dtype)
    for k in range(n):
        cell = grid[:, k]
        if "end" in read:
            cell += read["end"][k: k + rows]
        if running is not None:
            running += read["mean"][k: k + rows]
            cell += xp.divide(running, k + 1, out=scratch)
        if decay is not None:
            xp.add(read["start_decayed"], read["end_decayed"][k: k + rows], out=scratch)
            scratch *= decay[:, k, None]
            cell -= scratch
    return grid


def fragment_cells(placed: Dict[str, Floats2d], starts: Ints1d, sizes: Ints1d,
                   decay: Optional[Floats1d] = None, positions: Optional[Dict[str, Ints1d]] = None) -> Floats2d:
    """The cells of fragment_grid's grid that fragments (row `starts`, `sizes` tokens) take, read
    straight from `placed` (decay: one alpha ** characters per fragment) without the grid: the
    cheaper way when the fragments are a small share of the grid's cells (a filtered batch).
    positions: {place: the row of placed[place] that holds each grid row}, where `placed` holds
    only the rows the fragments read (by default, every row in order)."""
    first = next(iter(placed.values()))
    xp = get_array_module(first)

    def read(place: str, rows: Ints1d) -> Floats2d:
        return placed[place][rows if positions is None else positions[place][rows]]

    last = starts + sizes - 1
    cells = xp.zeros((len(starts), first.shape[1]), dtype=first.dtype)
    if "start" in placed:
        cells += read("start", starts)
    if "end" in placed:
        cells += read("end", last)
    if "mean" in placed and len(sizes):
        # Longest first, so that the fragments with a row k are the first n_longer[k]: row k of each is
        # added to a slice of the sums, and no fragment reads a row past its end.
        order = xp.argsort(-sizes)
        by_size = starts[order]
        host_sizes = sizes if xp is numpy else sizes.get()
        n_longer = len(host_sizes) - numpy.cumsum(numpy.bincount(host_sizes))  # fragments longer than k
        total = read("mean", by_size)
        for k in range(1, len(n_longer) - 1):
            total[:n_longer[k]] += read("mean", by_size[:n_longer[k]] + k)
        total /= sizes[order][:, None].astype(first.dtype)
        in_order = xp.empty_like(order)
        in_order[order] = xp.arange(len(order))
        cells += total[in_order]
    if decay is not None:
        cells -= decay[:, None] * (read("start_decayed", starts) + read("end_decayed", last))
    return cells


def fragment_grid_backward(
    d_grid: Floats3d, placed, n_rows: int, decay: Optional[Floats2d] = None, decay_grad: bool = False
) -> Tuple[Dict[str, Floats2d], Optional[Floats2d]]:
    """The gradient of fragment_grid for each of its arrays, given the gradient of its grid.

    placed: the places fragment_grid was given (a dict of its arrays, or only their names
    when decay_grad is off); n_rows: the arrays' rows. Returns ({place: (n_rows, width)}, and
    with decay_grad the (rows, n) gradient of `decay`, which needs the decayed arrays, else
    None). One column l at a time, as the forward pass, so no temporary of the grid's size.
    """
    xp = get_array_module(d_grid)
    rows, n, width = d_grid.shape
    # A place read at row t + l sends cell (t, l)'s gradient there: rows past n_rows are dropped.
    padded = {place: xp.zeros((rows + n - 1, width), dtype=d_grid.dtype)
              for place in placed if place in ("end", "mean", "end_decayed")}
    d_start_decayed = xp.zeros((rows, width), dtype=d_grid.dtype) if decay is not None else None
    running = xp.zeros((rows, width), dtype=d_grid.dtype) if "mean" in placed else None
    scratch = xp.empty((rows, width), dtype=d_grid.dtype)
    d_decay = xp.empty((rows, n), dtype=d_grid.dtype) if decay_grad else None
    if decay_grad:
        starts, ends = placed["start_decayed"][:rows], _window(placed["end_decayed"], n, 0, rows)
    # Backwards over l: the mean's row t + k gets cell (t, l)'s gradient / (l + 1) for every l >= k.
    for k in reversed(range(n)):
        cell = d_grid[:, k]
        if "end" in padded:
            padded["end"][k: k + rows] += cell
        if running is not None:
            running += xp.divide(cell, k + 1, out=scratch)
            padded["mean"][k: k + rows] += running
        if decay is not None:
            xp.multiply(cell, decay[:, k, None], out=scratch)
            d_start_decayed -= scratch
            padded["end_decayed"][k: k + rows] -= scratch
        if d_decay is not None:
            d_decay[:, k] = -((starts + ends[k: k + rows]) * cell).sum(axis=1)
    d_placed = {place: grad[:n_rows] for place, grad in padded.items()}
    if "start" in placed:
        d_placed["start"] = d_grid.sum(axis=1)[:n_rows]
    if d_start_decayed is not None:
        d_placed["start_decayed"] = d_start_decayed[:n_rows]
    return d_placed, d_decay


GRID_OPS = {
    "start": (grid_at_start, grid_at_start_backward),
    "end": (grid_at_end, grid_at_end_backward),
    "mean": (grid_mean, grid_mean_backward),
}


def char_boundary_codes(
    char_vectors: Floats2d, char_lengths: Ints1d, token_starts: Ints1d, token_ends: Ints1d, alpha: float
) -> Tuple[Floats2d, Floats2d, Floats2d, Floats2d]:
    """Character FOFE codes at token boundaries, from one prefix pass each way over each text.

    `token_starts`/`token_ends` are flat indices of each token's first and one-past-last
    character in `char_vectors`. Returns (lr_end, lr_before, rl_start, rl_after), each with a
    row per token: the left-to-right code at the token's last character and just before
    its first one, and the right-to-left code at its first character and just after its
    last one (zeros outside the text). A fragment i..j has the character codes
        lr = lr_end[j] - alpha^L * lr_before[i],   rl = rl_start[i] - alpha^L * rl_after[j]
    with L its length in characters (see `char_decay`).
    """
    xp = get_array_module(char_vectors)
    lr = prefix_fofe(char_vectors, char_lengths, alpha)
    rl = prefix_fofe(char_vectors, char_lengths, alpha, reverse=True)
    from_start, to_end = segment_positions(xp.asarray(char_lengths))
    first, last, before, after = _char_boundary_indices(
        from_start, to_end, token_starts, token_ends, char_vectors.shape[0])
    return _rows_or_zeros(lr, last), _rows_or_zeros(lr, before), _rows_or_zeros(rl, first), _rows_or_zeros(rl, after)


def word_char_boundary_codes(
    lr_words: Floats2d, rl_words: Floats2d, word_lengths: Ints1d, word_of_token: Ints1d, spaces: Ints1d,
    lengths: Ints1d, space: Floats1d, alpha: float
) -> Tuple[Floats2d, Floats2d, Floats2d, Floats2d]:
    """`char_boundary_codes` of texts that are their tokens' words, each followed by a space where `spaces`
    (0 or 1 per token) says, from each distinct word's own codes: predictions' way, a scan over tokens
    instead of one over every character of the text (the same codes, up to float rounding and terms below
    NEGLIGIBLE).

    lr_words, rl_words: each distinct word's code at its last character, left to right, and at its first,
    right to left, of its characters alone (`word_codes`); word_lengths: its characters (at least one, as
    a spaCy token has); word_of_token:
    each token's word; lengths: tokens per text; space: the space character's vector. A token's code at
    its last character is its word's code plus alpha ** (its characters) times the code before it, and
    the code before the next token adds the space; so, with c the code at the end of a token and its
    space, c_t = a_t + b_t * c_(t-1): a linear recurrence over tokens (`_linear_scan`).
    """
    xp = get_array_module(lr_words)
    dtype = lr_words.dtype
    n_chars = xp.asarray(word_lengths)[word_of_token]
    spaced = xp.asarray(spaces).astype(dtype)[:, None]
    word_decay = (float(alpha) ** n_chars.astype(dtype))[:, None]  # alpha ** (the token's characters)
    space_decay = float(alpha) ** spaced  # alpha ** (its space's: 1 or 0)
    step_decay = (word_decay * space_decay)[:, 0]
    from_start, to_end = segment_positions(xp.asarray(lengths))
    lr_word, rl_word = lr_words[word_of_token], rl_words[word_of_token]
    # Left to right: c_t = alpha ** space * (word code + alpha ** chars * c_(t-1)) + the space's vector.
    c = _linear_scan(space_decay * lr_word + spaced * space, xp.where(from_start > 0, step_decay, 0), alpha)
    lr_before = shift_within(c, lengths, -1)
    lr_end = lr_word + word_decay * lr_before
    # Right to left: r_t, the code at the token's first character, = its word's code + alpha ** chars *
    # (the space's vector + alpha ** space * r_(t+1)).
    after = spaced * space
    r = _linear_scan(rl_word + word_decay * after, xp.where(to_end > 0, step_decay, 0), alpha, reverse=True)
    rl_after = after + space_decay * shift_within(r, lengths, 1)
    return lr_end, lr_before, r, rl_after


def word_codes(word_chars: Floats2d, word_lengths: Ints1d, alpha: float,
               sum_rows: Callable) -> Tuple[Floats2d, Floats2d]:
    """Each word's FOFE code of its characters alone, at its last character (left to right) and at its
    first (right to left): its characters' vectors weighted by alpha ** (characters after, or before,
    each) and summed per word by `sum_rows(rows, lengths)` (thinc's Ops.reduce_sum)."""
    xp = get_array_module(word_chars)
    from_start, to_end = segment_positions(xp.asarray(word_lengths))
    dtype = word_chars.dtype
    lengths = xp.asarray(word_lengths).astype("int32")
    lr = sum_rows(word_chars * (float(alpha) ** to_end.astype(dtype))[:, None], lengths)
    rl = sum_rows(word_chars * (float(alpha) ** from_start.astype(dtype))[:, None], lengths)
    return lr, rl


def _linear_scan(z: Floats2d, decay: Floats1d, alpha: float, reverse: bool = False) -> Floats2d:
    """z_t += decay_t * z_(t-1) for every row in turn (z_(t+1) if reverse), in place: a Hillis-Steele
    scan that carries each row's product of decays over the rows it has added, so a decay of 0 starts a
    new sequence. It stops once every product is below NEGLIGIBLE * (1 - alpha), as prefix_fofe's cut."""
    product = decay.astype(z.dtype)
    step, n = 1, z.shape[0]
    while step < n and float(product.max()) >= NEGLIGIBLE * (1.0 - alpha):
        if reverse:
            z[:-step] += z[step:] * product[:-step, None]
            product[:-step] *= product[step:]
            product[max(n - 2 * step, 0):] = 0  # rows within 2 * step of the end are complete
        else:
            z[step:] += z[:-step] * product[step:, None]
            product[step:] *= product[:-step]
            product[:2 * step] = 0  # rows within 2 * step of the start are complete
        step *= 2
    return z


def _rows_or_zeros(codes: Floats2d, index: Ints1d) -> Floats2d:
    """codes[index], with zeros where index is past the last row (the sentinel of _char_boundary_indices):
    a gather of the tokens' rows alone, never a copy of the characters' codes with a zero row added."""
    xp = get_array_module(codes)
    if codes.shape[0] == 0:
        return xp.zeros((index.shape[0], codes.shape[1]), dtype=codes.dtype)
    inside = index < codes.shape[0]
    rows = codes[xp.where(inside, index, 0)]
    rows *= inside.astype(codes.dtype)[:, None]
    return rows


def _char_boundary_indices(from_start, to_end, token_starts, token_ends, sentinel):
    """Indices of each token's first and last character, the one before its first and the
    one after its last; `sentinel` (a zero row) where that character is outside the text."""
    xp = get_array_module(token_starts)
    n_chars = from_start.shape[0]
    if n_chars == 0:
        nowhere = xp.full(token_starts.shape, sentinel, dtype=token_starts.dtype)
        return nowhere, nowhere, nowhere, nowhere
    nonempty = token_ends > token_starts
    first = xp.clip(token_starts, 0, n_chars - 1)
    last = xp.clip(token_ends - 1, 0, n_chars - 1)
    before = xp.where(nonempty & (from_start[first] >= 1), first - 1, sentinel)
    after = xp.where(nonempty & (to_end[last] >= 1), last + 1, sentinel)
    return xp.where(nonempty, first, sentinel), xp.where(nonempty, last, sentinel), before, after


def char_boundary_codes_backward(
    d_codes: Tuple[Floats2d, Floats2d, Floats2d, Floats2d],
    char_lengths: Ints1d,
    token_starts: Ints1d,
    token_ends: Ints1d,
    alpha: float,
    n_chars: int,
) -> Floats2d:
    """Gradient of `char_boundary_codes` with respect to the character vectors."""
    xp = get_array_module(d_codes[0])
    width = d_codes[0].shape[1]
    from_start, to_end = segment_positions(xp.asarray(char_lengths))
    first, last, before, after = _char_boundary_indices(from_start, to_end, token_starts, token_ends, n_chars)
    d_lr = xp.zeros((n_chars + 1, width), dtype=d_codes[0].dtype)
    d_rl = xp.zeros((n_chars + 1, width), dtype=d_codes[0].dtype)
    # Real indices are distinct within each gather; only the sentinel row repeats,
    # and its gradient is thrown away, so plain fancy-index addition is exact.
    d_lr[last] += d_codes[0]
    d_lr[before] += d_codes[1]
    d_rl[first] += d_codes[2]
    d_rl[after] += d_codes[3]
    d_chars = prefix_fofe_backward(d_lr[:n_chars], char_lengths, alpha)
    d_chars += prefix_fofe_backward(d_rl[:n_chars], char_lengths, alpha, reverse=True)
    return d_chars


def char_boundary_codes_alpha_grad(
    d_codes: Tuple[Floats2d, Floats2d, Floats2d, Floats2d],
    char_vectors: Floats2d,
    char_lengths: Ints1d,
    token_starts: Ints1d,
    token_ends: Ints1d,
    alpha: float,
) -> float:
    """dL/dalpha through `char_boundary_codes`, given the gradients of its four outputs."""
    xp = get_array_module(char_vectors)
    zero = xp.zeros((1, char_vectors.shape[1]), dtype=char_vectors.dtype)
    w = []
    for reverse in (False, True):
        codes = prefix_fofe(char_vectors, char_lengths, alpha, reverse=reverse)
        w.append(xp.concatenate([prefix_fofe_alpha_grad(codes, char_lengths, alpha, reverse=reverse), zero]))
    from_start, to_end = segment_positions(xp.asarray(char_lengths))
    first, last, before, after = _char_boundary_indices(
        from_start, to_end, token_starts, token_ends, char_vectors.shape[0])
    pairs = ((w[0], last), (w[0], before), (w[1], first), (w[1], after))
    return float(sum((d * grad[index]).sum() for d, (grad, index) in zip(d_codes, pairs)))


def fragment_char_lengths(token_starts: Ints1d, token_ends: Ints1d, n: int, begin: int, end: int):
    """Characters in fragment (t, l) (from its first token's start to its last token's end)
    for the grid rows begin..end."""
    xp = get_array_module(token_starts)
    n_rows = token_starts.shape[0]
    j = xp.minimum(xp.arange(begin, end)[:, None] + xp.arange(n)[None, :], n_rows - 1)
    return xp.maximum(token_ends[j] - token_starts[begin:end, None], 0).astype("float32")


def char_decay(token_starts: Ints1d, token_ends: Ints1d, n: int, alpha: float, begin: int, end: int):
    """alpha ** (characters in fragment (t, l)) for the grid rows begin..end."""
    return (float(alpha) ** fragment_char_lengths(token_starts, token_ends, n, begin, end)).astype("float32")


def fragment_decay(token_starts: Ints1d, token_ends: Ints1d, first: Ints1d, last: Ints1d, alpha: float):
    """alpha ** (characters from token `first`'s start to token `last`'s end) per fragment."""
    xp = get_array_module(token_starts)
    return (float(alpha) ** xp.maximum(token_ends[last] - token_starts[first], 0).astype("float32")).astype("float32")
