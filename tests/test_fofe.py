"""FOFE ops against the recurrence computed naively, and their backward passes as true adjoints."""

import numpy
import pytest
from thinc.api import NumpyOps

from spacy_fofe.ml import fofe

LENGTHS = numpy.asarray([5, 0, 1, 9, 3])
N = 5


def naive_prefix(seq, alpha):
    out, z = [], numpy.zeros(seq.shape[1])
    for row in seq:
        z = alpha * z + row
        out.append(z)
    return numpy.asarray(out).reshape(seq.shape)


def split(x, lengths):
    return numpy.split(x, numpy.cumsum(lengths)[:-1])


@pytest.fixture
def x():
    return numpy.random.default_rng(0).normal(size=(int(LENGTHS.sum()), 4)).astype("float32")


def test_segment_positions_count_from_each_sequences_ends():
    from_start, to_end = fofe.segment_positions(LENGTHS)
    assert from_start.tolist() == [i for n in LENGTHS for i in range(n)]
    assert to_end.tolist() == [n - 1 - i for n in LENGTHS for i in range(n)]
    assert [a.tolist() for a in fofe.segment_positions(numpy.asarray([0, 0]))] == [[], []]


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.95])
def test_prefix_fofe_matches_recurrence_per_sequence(x, alpha):
    forward = fofe.prefix_fofe(x, LENGTHS, alpha)
    backward = fofe.prefix_fofe(x, LENGTHS, alpha, reverse=True)
    for seq, f, b in zip(split(x, LENGTHS), split(forward, LENGTHS), split(backward, LENGTHS)):
        numpy.testing.assert_allclose(f, naive_prefix(seq, alpha), rtol=1e-5, atol=1e-5)
        numpy.testing.assert_allclose(b, naive_prefix(seq[::-1], alpha)[::-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.99])
def test_prefix_fofe_on_long_sequences_drops_only_negligible_terms(alpha):
    # 0.5 and 0.8 stop scanning long before 700 rows (weights below NEGLIGIBLE); 0.99 does not.
    lengths = numpy.asarray([700, 3, 300])
    x = numpy.random.default_rng(1).normal(size=(int(lengths.sum()), 3)).astype("float32")
    for reverse in (False, True):
        codes = fofe.prefix_fofe(x, lengths, alpha, reverse)
        for seq, z in zip(split(x.astype("float64"), lengths), split(codes, lengths)):
            expect = naive_prefix(seq[::-1], alpha)[::-1] if reverse else naive_prefix(seq, alpha)
            numpy.testing.assert_allclose(z, expect, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.99])
def test_prefix_fofe_block_by_block_gives_the_whole_arrays_codes(alpha, monkeypatch):
    # Sequences of all lengths (empty ones too) across block edges: the blocks of the CPU scan (here
    # 4 x its reach rows, the least it takes) give exactly the codes of one scan of the whole array.
    lengths = numpy.random.default_rng(2).integers(0, 3 * fofe.scan_reach(alpha), 60)
    x = numpy.random.default_rng(3).normal(size=(int(lengths.sum()), 3)).astype("float32")
    monkeypatch.setattr(fofe, "CPU_BLOCK_BYTES", 2**62)  # one scan of the whole array
    whole = [fofe.prefix_fofe(x, lengths, alpha, reverse) for reverse in (False, True)]
    monkeypatch.setattr(fofe, "CPU_BLOCK_BYTES", 1)
    assert len(x) > 4 * fofe.scan_reach(alpha) * 4  # several blocks
    for reverse, expect in zip((False, True), whole):
        assert numpy.array_equal(fofe.prefix_fofe(x, lengths, alpha, reverse), expect)
    for seq, z in zip(split(x.astype("float64"), lengths), split(fofe.prefix_fofe(x, lengths, alpha), lengths)):
        numpy.testing.assert_allclose(z, naive_prefix(seq, alpha), rtol=1e-4, atol=1e-4)


def test_prefix_fofe_of_nothing_is_empty():
    empty = numpy.zeros((0, 3), dtype="float32")
    assert fofe.prefix_fofe(empty, numpy.asarray([0, 0]), 0.5).shape == (0, 3)


def test_fragment_grids_match_naive_context_codes(x):
    alpha = 0.6
    F = fofe.prefix_fofe(x, LENGTHS, alpha)
    B = fofe.prefix_fofe(x, LENGTHS, alpha, reverse=True)
    total = x.shape[0]
    left_incl = fofe.grid_at_end(F, N, 0, total)
    left_excl = fofe.grid_at_start(fofe.shift_within(F, LENGTHS, -1), N, 0, total)
    right_incl = fofe.grid_at_start(B, N, 0, total)
    right_excl = fofe.grid_at_end(fofe.shift_within(B, LENGTHS, 1), N, 0, total)
    bow = fofe.grid_mean(x, N, 0, total)
    offset = 0
    for seq in split(x, LENGTHS):
        for i in range(len(seq)):
            for j in range(i, min(i + N, len(seq))):
                t, k = offset + i, j - i
                numpy.testing.assert_allclose(left_incl[t, k], naive_prefix(seq[: j + 1], alpha)[-1], atol=1e-5)
                expect = naive_prefix(seq[:i], alpha)[-1] if i else numpy.zeros(4)
                numpy.testing.assert_allclose(left_excl[t, k], expect, atol=1e-5)
                numpy.testing.assert_allclose(right_incl[t, k], naive_prefix(seq[i:][::-1], alpha)[-1], atol=1e-5)
                rest = seq[j + 1:]
                expect = naive_prefix(rest[::-1], alpha)[-1] if len(rest) else numpy.zeros(4)
                numpy.testing.assert_allclose(right_excl[t, k], expect, atol=1e-5)
                numpy.testing.assert_allclose(bow[t, k], seq[i: j + 1].mean(axis=0), atol=1e-5)
        offset += len(seq)


def test_char_fofe_of_fragments_matches_naive_codes():
    rng = numpy.random.default_rng(1)
    # Two texts: "ab cde f" and "gh"; tokens as [start, end) character offsets (flat).
    char_lengths = numpy.asarray([8, 2])
    token_starts = numpy.asarray([0, 3, 7, 8])
    token_ends = numpy.asarray([2, 6, 8, 10])
    token_lengths = [3, 1]
    chars = rng.normal(size=(10, 3)).astype("float32")
    alpha = 0.8
    lr_end, lr_before, rl_start, rl_after = fofe.char_boundary_codes(
        chars, char_lengths, token_starts, token_ends, alpha)
    decay = fofe.char_decay(token_starts, token_ends, 3, alpha, 0, 4)
    lr = fofe.grid_at_end(lr_end, 3, 0, 4) - decay[:, :, None] * fofe.grid_at_start(lr_before, 3, 0, 4)
    rl = fofe.grid_at_start(rl_start, 3, 0, 4) - decay[:, :, None] * fofe.grid_at_end(rl_after, 3, 0, 4)
    offset = 0
    for n_tokens in token_lengths:
        for i in range(offset, offset + n_tokens):
            for j in range(i, offset + n_tokens):
                frag = chars[token_starts[i]: token_ends[j]]
                numpy.testing.assert_allclose(lr[i, j - i], naive_prefix(frag, alpha)[-1], atol=1e-5)
                numpy.testing.assert_allclose(rl[i, j - i], naive_prefix(frag[::-1], alpha)[-1], atol=1e-5)
        offset += n_tokens


def _adjoint_gap(op, op_backward, x, out_shape_like):
    """<op(x), g> - <x, op_backward(g)>: zero for a linear op and its true gradient."""
    g = numpy.random.default_rng(2).normal(size=out_shape_like.shape).astype("float32")
    return float((op(x) * g).sum() - (x * op_backward(g)).sum())


@pytest.mark.parametrize("name", ["start", "end", "mean"])
def test_grid_backward_is_the_adjoint(x, name):
    grid, backward = fofe.GRID_OPS[name]
    total = x.shape[0]
    gap = _adjoint_gap(lambda y: grid(y, N, 0, total), lambda g: backward(g, total), x, grid(x, N, 0, total))
    assert abs(gap) < 1e-3


@pytest.mark.parametrize("reverse", [False, True])
def test_prefix_fofe_backward_is_the_adjoint(x, reverse):
    op = lambda y: fofe.prefix_fofe(y, LENGTHS, 0.7, reverse)  # noqa: E731
    back = lambda g: fofe.prefix_fofe_backward(g, LENGTHS, 0.7, reverse)  # noqa: E731
    assert abs(_adjoint_gap(op, back, x, x)) < 1e-3


@pytest.mark.parametrize("step", [-10, -3, -1, 0, 1, 2, 9])
def test_shift_within_moves_rows_within_their_sequence(x, step):
    shifted = fofe.shift_within(x, LENGTHS, step)
    for seq, got in zip(split(x, LENGTHS), split(shifted, LENGTHS)):
        expect = [seq[t + step] if 0 <= t + step < len(seq) else numpy.zeros(x.shape[1]) for t in range(len(seq))]
        assert numpy.array_equal(got, numpy.asarray(expect, dtype=x.dtype).reshape(seq.shape))


@pytest.mark.parametrize("step", [-3, -1, 1, 2])
def test_shift_within_backward_is_the_adjoint(x, step):
    op = lambda y: fofe.shift_within(y, LENGTHS, step)  # noqa: E731
    back = lambda g: fofe.shift_within(g, LENGTHS, -step)  # noqa: E731
    assert abs(_adjoint_gap(op, back, x, x)) < 1e-4


def test_char_codes_backward_is_the_adjoint():
    rng = numpy.random.default_rng(3)
    char_lengths = numpy.asarray([8, 2])
    starts, ends = numpy.asarray([0, 3, 7, 8]), numpy.asarray([2, 6, 8, 10])
    chars = rng.normal(size=(10, 3)).astype("float32")
    codes = fofe.char_boundary_codes(chars, char_lengths, starts, ends, 0.8)
    grads = tuple(rng.normal(size=c.shape).astype("float32") for c in codes)
    forward = sum(float((c * g).sum()) for c, g in zip(codes, grads))
    d_chars = fofe.char_boundary_codes_backward(grads, char_lengths, starts, ends, 0.8, 10)
    assert abs(forward - float((chars * d_chars).sum())) < 1e-3


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.9])
def test_a_prefix_code_reads_scan_reach_rows_back_and_no_further(alpha):
    reach = fofe.scan_reach(alpha)
    x = numpy.random.default_rng(0).normal(size=(3 * reach, 4)).astype("float32")
    whole = fofe.prefix_fofe(x, numpy.asarray([len(x)]), alpha)
    for t in (reach, 2 * reach, 3 * reach - 1):
        window = fofe.prefix_fofe(x[t - reach: t + 1], numpy.asarray([reach + 1]), alpha)
        numpy.testing.assert_allclose(window[-1], whole[t], rtol=1e-6, atol=1e-7)
    # A huge change of row p shows at p + reach (weight alpha ** reach) and not at all one row later.
    changed = x.copy()
    changed[reach - 1] += 1e12
    moved = fofe.prefix_fofe(changed, numpy.asarray([len(x)]), alpha)
    assert not (moved[2 * reach - 1] == whole[2 * reach - 1]).all()
    assert (moved[2 * reach:] == whole[2 * reach:]).all()


def naive_alpha_derivative(seq, alpha):
    """d z_t / d alpha of the naive recurrence, term by term: sum_k k alpha^(k-1) x_{t-k}."""
    return numpy.asarray([sum(k * alpha ** (k - 1) * seq[t - k] for k in range(1, t + 1)) if t else seq[0] * 0
                          for t in range(len(seq))]).reshape(seq.shape)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("alpha", [0.3, 0.7, 0.95])
def test_alpha_gradient_of_prefix_codes_matches_the_recurrence(x, alpha, reverse):
    codes = fofe.prefix_fofe(x, LENGTHS, alpha, reverse)
    grad = fofe.prefix_fofe_alpha_grad(codes, LENGTHS, alpha, reverse)
    for seq, seq_grad in zip(split(x.astype("float64"), LENGTHS), split(grad, LENGTHS)):
        if reverse:
            expected = naive_alpha_derivative(seq[::-1], alpha)[::-1]
        else:
            expected = naive_alpha_derivative(seq, alpha)
        numpy.testing.assert_allclose(seq_grad, expected, rtol=1e-4, atol=1e-4)


def test_alpha_gradient_of_char_codes_matches_finite_differences():
    rng = numpy.random.default_rng(4)
    char_lengths = numpy.asarray([8, 2])
    starts, ends = numpy.asarray([0, 3, 7, 8]), numpy.asarray([2, 6, 8, 10])
    chars = rng.normal(size=(10, 3)).astype("float64")
    grads = tuple(rng.normal(size=(4, 3)) for _ in range(4))

    def loss(alpha):
        codes = fofe.char_boundary_codes(chars, char_lengths, starts, ends, alpha)
        return sum(float((c * g).sum()) for c, g in zip(codes, grads))

    analytic = fofe.char_boundary_codes_alpha_grad(grads, chars, char_lengths, starts, ends, 0.8)
    numeric = (loss(0.8 + 1e-6) - loss(0.8 - 1e-6)) / 2e-6
    assert abs(numeric) > 1e-2 and analytic == pytest.approx(numeric, rel=1e-5)


@pytest.mark.parametrize("places", [("start", "end", "mean"), ("end",), ("mean", "start")])
@pytest.mark.parametrize("decayed", [False, True])
def test_fragment_grid_is_each_cells_sum_of_features(places, decayed):
    """Cell (t, l): start[t] + end[t + l] + mean(mean[t..t + l]) - decay[t, l] * (start_decayed[t] +
    end_decayed[t + l]), rows past the arrays' end being zeros."""
    rng = numpy.random.default_rng(3)
    rows, n, total = 6, 4, 8  # the arrays end before rows + n - 1: the last cells read past them
    names = places + (("start_decayed", "end_decayed") if decayed else ())
    placed = {name: rng.normal(size=(total, 3)).astype("float32") for name in names}
    decay = rng.random((rows, n)).astype("float32") if decayed else None
    grid = fofe.fragment_grid(placed, n, rows, decay)
    assert grid.shape == (rows, n, 3)
    row = lambda name, i: placed[name][i] if i < total else numpy.zeros(3)  # noqa: E731
    for t in range(rows):
        for length in range(n):
            want = numpy.zeros(3)
            if "start" in placed:
                want += placed["start"][t]
            if "end" in placed:
                want += row("end", t + length)
            if "mean" in placed:
                want += sum(row("mean", i) for i in range(t, t + length + 1)) / (length + 1)
            if decayed:
                want -= decay[t, length] * (placed["start_decayed"][t] + row("end_decayed", t + length))
            numpy.testing.assert_allclose(grid[t, length], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("places", [("start", "end", "mean"), ("end",), ("mean", "start")])
@pytest.mark.parametrize("decayed", [False, True])
def test_fragment_cells_are_the_grids_cells_from_every_row_or_from_the_rows_read(places, decayed):
    """A few fragments' cells read straight from the arrays equal the grid's, and so do they when each
    array holds only the rows read at its place (first rows, last rows, rows inside a fragment)."""
    rng = numpy.random.default_rng(5)
    rows, n = 12, 4
    names = places + (("start_decayed", "end_decayed") if decayed else ())
    placed = {name: rng.normal(size=(rows, 3)).astype("float32") for name in names}
    decay = rng.random((rows, n)).astype("float32") if decayed else None
    cells = numpy.asarray([(t, size) for t in range(rows) for size in range(1, min(n, rows - t) + 1)])
    cells = cells[rng.random(len(cells)) < 0.3]
    starts, sizes = cells[:, 0], cells[:, 1]
    grid = fofe.fragment_grid(placed, n, rows, decay)[starts, sizes - 1]
    fragment_decay = decay[starts, sizes - 1] if decayed else None
    numpy.testing.assert_allclose(fofe.fragment_cells(placed, starts, sizes, fragment_decay), grid,
                                  rtol=1e-5, atol=1e-5)
    first, last = numpy.zeros(rows, bool), numpy.zeros(rows, bool)
    first[starts], last[starts + sizes - 1] = True, True
    inside = numpy.zeros(rows, bool)
    for start, size in cells:
        inside[start:start + size] = True
    assert not (first.all() and last.all() and inside.all())  # some rows are left out
    read = {"start": first, "start_decayed": first, "end": last, "end_decayed": last, "mean": inside}
    some = {name: placed[name][read[name]] for name in names}
    positions = {name: numpy.cumsum(read[name]) - 1 for name in names}
    numpy.testing.assert_allclose(fofe.fragment_cells(some, starts, sizes, fragment_decay, positions), grid,
                                  rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("places", [("start", "end", "mean"), ("end",), ("mean", "start")])
@pytest.mark.parametrize("decayed", [False, True])
def test_fragment_grid_backward_is_the_adjoint_and_gives_the_decay_gradient(places, decayed):
    """<fragment_grid(placed), g> = sum over places of <placed[p], backward(g)[p]>, and the decay
    gradient of cell (t, l) is -<g[t, l], start_decayed[t] + end_decayed[t + l]>."""
    rng = numpy.random.default_rng(4)
    rows, n = 7, 4
    names = places + (("start_decayed", "end_decayed") if decayed else ())
    placed = {name: rng.normal(size=(rows, 3)).astype("float32") for name in names}
    decay = rng.random((rows, n)).astype("float32") if decayed else None
    g = rng.normal(size=(rows, n, 3)).astype("float32")
    d_placed, d_decay = fofe.fragment_grid_backward(g, placed, rows, decay, decay_grad=decayed)
    assert sorted(d_placed) == sorted(names)
    assert all(d.shape == (rows, 3) for d in d_placed.values())
    lhs = float((fofe.fragment_grid(placed, n, rows, decay) * g).sum())
    rhs = sum(float((placed[name] * d_placed[name]).sum()) for name in names)
    assert abs(lhs - rhs) < 1e-3
    if decayed:
        raw = fofe.grid_at_start(placed["start_decayed"], n, 0, rows)
        raw += fofe.grid_at_end(placed["end_decayed"], n, 0, rows)
        numpy.testing.assert_allclose(d_decay, -(g * raw).sum(axis=2), rtol=1e-5, atol=1e-5)
    else:
        assert d_decay is None


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.95])
def test_char_codes_from_words_equal_those_of_the_characters(alpha):
    """Texts spelled from distinct words and trailing spaces: the codes from each word's own codes and a
    scan over tokens are the character scan's, at every token, for every text."""
    rng = numpy.random.default_rng(4)
    word_lengths = rng.integers(1, 12, size=30)
    word_chars = rng.normal(size=(int(word_lengths.sum()), 3)).astype("float32")
    space = rng.normal(size=(3,)).astype("float32")
    word_starts = numpy.cumsum(word_lengths) - word_lengths
    lengths = numpy.asarray([1, 7, 0, 150, 2])  # tokens per text; 150 reaches past the scans' cut
    word_of_token = rng.integers(0, 30, size=int(lengths.sum()))
    spaces = rng.integers(0, 2, size=len(word_of_token))
    chars, starts, ends, text_lengths, offset = [], [], [], [], 0
    for text in numpy.split(numpy.arange(len(word_of_token)), numpy.cumsum(lengths)[:-1]):
        text_start = offset
        for t in text:
            w = word_of_token[t]
            starts.append(offset)
            chars.extend(word_chars[word_starts[w]: word_starts[w] + word_lengths[w]])
            offset += word_lengths[w]
            ends.append(offset)
            if spaces[t]:
                chars.append(space)
                offset += 1
        text_lengths.append(offset - text_start)
    expected = fofe.char_boundary_codes(numpy.asarray(chars), numpy.asarray(text_lengths), numpy.asarray(starts),
                                        numpy.asarray(ends), alpha)
    sum_rows = NumpyOps().reduce_sum
    lr_words, rl_words = fofe.word_codes(word_chars, word_lengths, alpha, sum_rows)
    for w in range(30):
        own = word_chars[word_starts[w]: word_starts[w] + word_lengths[w]]
        numpy.testing.assert_allclose(lr_words[w], naive_prefix(own, alpha)[-1], rtol=1e-5, atol=1e-6)
        numpy.testing.assert_allclose(rl_words[w], naive_prefix(own[::-1], alpha)[-1], rtol=1e-5, atol=1e-6)
    found = fofe.word_char_boundary_codes(lr_words, rl_words, word_lengths, word_of_token, spaces, lengths, space,
                                          alpha)
    for got, codes in zip(found, expected):
        numpy.testing.assert_allclose(got, codes, rtol=1e-4, atol=1e-5)
