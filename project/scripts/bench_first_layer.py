"""Time the two ways of computing the FOFE first layer (docs/architecture.md, section 4), forward + backward.

"positions": project each prefix-code array once (N rows), then sum projected rows on the
fragment grid (spacy_fofe.ml.projection.FragmentProjection, the layer itself). "fragments": build every
fragment's feature vector on the grid, gather the scored ones, and multiply by W (then the same ReLU).
Word features only (the character features cost the same in both). Prints seconds per batch and the ratio.

    python project/scripts/bench_first_layer.py [--tokens 1000] [--width 128] [--n 7]
"""

import argparse
import time

import numpy
from thinc.api import NumpyOps

from spacy_fofe.ml import fofe
from spacy_fofe.ml.position_codes import Codes
from spacy_fofe.ml.projection import FragmentProjection

ops = NumpyOps()
DOC = 14  # tokens per doc
PLACES = {"left_incl": "end", "left_excl": "start", "right_incl": "start", "right_excl": "end", "tokens": "mean"}


def sources(x, lengths):
    F = fofe.prefix_fofe(x, lengths, 0.5)
    B = fofe.prefix_fofe(x, lengths, 0.5, reverse=True)
    return {"left_incl": F, "left_excl": fofe.shift_within(F, lengths, -1), "right_incl": B,
            "right_excl": fofe.shift_within(B, lengths, 1), "tokens": x}


def by_positions(src, W, cells, n, d_out):
    """The package's layer, FragmentProjection (training pass: grid of every row)."""
    N, d = src["tokens"].shape
    layer = FragmentProjection(list(PLACES), nO=W.shape[0], nI=d)
    layer.set_param("W", W)
    layer.set_param("b", numpy.zeros((W.shape[0],), dtype="float32"))
    starts, sizes = cells // n, cells % n + 1
    fragments = numpy.stack([starts // DOC, starts % DOC, starts % DOC + sizes], axis=1)
    codes = Codes(numpy.full(N // DOC, DOC), dict(src))
    out, backprop = layer((codes, fragments), is_train=True)
    backprop(d_out)
    return out


def by_fragments(src, W, cells, n, d_out):
    N, d = src["tokens"].shape
    feats = numpy.concatenate([fofe.GRID_OPS[place][0](src[name], n, 0, N) for name, place in PLACES.items()],
                              axis=2).reshape((N * n, -1))
    picked = feats[cells]
    out = ops.relu(ops.gemm(picked, W, trans2=True))
    d_out = ops.backprop_relu(d_out, out)
    ops.gemm(d_out, picked, trans1=True)
    d_picked = ops.gemm(d_out, W)
    d_feats = numpy.zeros_like(feats)
    d_feats[cells] = d_picked
    d_feats = d_feats.reshape((N, n, -1))
    for k, place in enumerate(PLACES.values()):
        fofe.GRID_OPS[place][1](d_feats[:, :, k * d:(k + 1) * d], N)
    return out


def best_time(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--width", type=int, default=128, help="token vector width")
    parser.add_argument("--n", type=int, default=7)
    parser.add_argument("--hidden", default="64,128,256,512")
    args = parser.parse_args()
    rng = numpy.random.default_rng(0)
    lengths = numpy.full(args.tokens // DOC, DOC)
    N = int(lengths.sum())
    x = rng.normal(size=(N, args.width)).astype("float32")
    src = sources(x, lengths)
    valid = numpy.asarray([t * args.n + k for t in range(N) for k in range(args.n) if t % DOC + k < DOC])
    print(f"{N} tokens, width {args.width}, n={args.n}; seconds per batch, forward + backward")
    print("hidden  scored      positions  fragments  fragments/positions")
    for hidden in [int(h) for h in args.hidden.split(",")]:
        W = rng.normal(size=(hidden, 5 * args.width)).astype("float32") * 0.05
        for name, cells in [("train 15%", numpy.sort(rng.choice(valid, len(valid) * 15 // 100, replace=False))),
                            ("all", valid)]:
            d_out = rng.normal(size=(len(cells), hidden)).astype("float32")
            a = by_positions(src, W, cells, args.n, d_out)
            b = by_fragments(src, W, cells, args.n, d_out)
            assert numpy.allclose(a, b, atol=1e-3), "the two ways disagree"
            t_pos = best_time(lambda W=W, c=cells, d=d_out: by_positions(src, W, c, args.n, d))
            t_frag = best_time(lambda W=W, c=cells, d=d_out: by_fragments(src, W, c, args.n, d))
            print(f"{hidden:6d}  {name:10s}  {t_pos:9.4f}  {t_frag:9.4f}  {t_frag / t_pos:6.2f}x")


if __name__ == "__main__":
    main()
