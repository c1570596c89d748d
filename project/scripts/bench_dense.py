"""Time the scorer's dense math two ways on CPU: thinc's NumpyOps (blis products, its own ReLU)
against spacy_fofe.ml.ops.NumpyBlasOps (numpy's matmul and maximum), forward and backward, on the shapes of
one batch: the first layer's projection of the position codes and the hidden and output layers
over every fragment. Prints seconds per batch and the ratio.

    OPENBLAS_NUM_THREADS=1 python project/scripts/bench_dense.py [--tokens 12000] [--n 7] [--width 128]
"""

import argparse
import time

import numpy
from thinc.api import NumpyOps

from spacy_fofe.ml.ops import NumpyBlasOps

ops = NumpyOps()
numpy_ops = NumpyBlasOps()


class Thinc:
    gemm = staticmethod(ops.gemm)
    relu = staticmethod(lambda X: ops.relu(X, inplace=True))
    backprop_relu = staticmethod(ops.backprop_relu)


class Numpy:
    gemm = staticmethod(numpy_ops.gemm)
    relu = staticmethod(lambda X: numpy_ops.relu(X, inplace=True))
    backprop_relu = staticmethod(numpy_ops.backprop_relu)


def layer(impl, X, W, relu=True):
    """One dense layer forward and backward: Y = relu(X W^T), dW, dX."""
    Y = impl.gemm(X, W, trans2=True)
    if relu:
        Y = impl.relu(Y)
    dY = Y if not relu else impl.backprop_relu(Y, Y)
    return impl.gemm(dY, X, trans1=True), impl.gemm(dY, W)


def batch(impl, codes, W1, hidden, W2, W3):
    for x in codes:  # the first layer, on positions: each code array times its block of W
        layer(impl, x, W1[:, :x.shape[1]], relu=False)
    layer(impl, hidden, W2)  # the hidden layer over every fragment
    layer(impl, hidden, W3, relu=False)  # the output layer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=12000)
    parser.add_argument("--n", type=int, default=7, help="fragments per token (max_length)")
    parser.add_argument("--width", type=int, default=128, help="hidden width")
    parser.add_argument("--labels", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = numpy.random.default_rng(0)
    f32 = lambda *shape: rng.normal(size=shape).astype("float32")  # noqa: E731
    codes = [f32(args.tokens, 128) for _ in range(5)] + [f32(args.tokens, 32) for _ in range(4)]
    W1, hidden = f32(args.width, 128), f32(args.tokens * args.n, args.width)
    W2, W3 = f32(args.width, args.width), f32(args.labels + 1, args.width)
    seconds = {}
    for impl in (Thinc, Numpy, Thinc, Numpy):  # alternating, best of both rounds
        batch(impl, codes, W1, hidden, W2, W3)
        start = time.perf_counter()
        for _ in range(args.repeats):
            batch(impl, codes, W1, hidden, W2, W3)
        took = (time.perf_counter() - start) / args.repeats
        seconds[impl.__name__] = min(seconds.get(impl.__name__, took), took)
    print(f"{args.tokens} tokens, {args.tokens * args.n} fragments, width {args.width}, forward + backward:")
    for name, took in seconds.items():
        print(f"  {name:6} {took:.4f} s/batch")
    print(f"  numpy is {seconds['Thinc'] / seconds['Numpy']:.2f}x as fast as thinc's NumpyOps")


if __name__ == "__main__":
    main()
