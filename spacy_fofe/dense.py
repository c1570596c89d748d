"""Matrix products and ReLUs on numpy on CPU, and the scorer's dense layers built on them.

thinc's NumpyOps multiplies matrices with blis; numpy's `matmul` uses the BLAS numpy was built
with (OpenBLAS in the PyPI wheels, Accelerate on macOS), and numpy's `maximum` is a ReLU: on the
CPU we measured both ran several times faster than NumpyOps' (`project/scripts/bench_dense.py`).
On other ops (a GPU) the ops' own are used. `Relu`, `Softmax` and `Maxout` are thinc's layers of
the same names on that math: the same node names, dims, params and attrs, so pipelines saved
with thinc's load.
"""

from functools import partial
from typing import Callable, Optional, Tuple

import numpy
from thinc.api import Dropout, LayerNorm, Model, chain, glorot_uniform_init, zero_init
from thinc.layers import maxout as thinc_maxout
from thinc.types import Floats2d
from thinc.util import get_width


def gemm(ops, x: Floats2d, y: Floats2d, *, trans1: bool = False, trans2: bool = False) -> Floats2d:
    """x @ y (either transposed first), as `ops.gemm`; with numpy's matmul when ops run on numpy."""
    if ops.xp is not numpy:
        return ops.gemm(x, y, trans1=trans1, trans2=trans2)
    return numpy.matmul(x.T if trans1 else x, y.T if trans2 else y)


def relu(ops, X: Floats2d, *, inplace: bool = False) -> Floats2d:
    """max(X, 0), as `ops.relu`."""
    if ops.xp is not numpy:
        return ops.relu(X, inplace=inplace)
    return numpy.maximum(X, 0, out=X if inplace else None)


def backprop_relu(ops, dY: Floats2d, Y: Floats2d) -> Floats2d:
    """The gradient through a ReLU whose output was Y, as `ops.backprop_relu`."""
    if ops.xp is not numpy:
        return ops.backprop_relu(dY, Y)
    return dY * (Y > 0)


def Relu(nO: Optional[int] = None, nI: Optional[int] = None, *, dropout: Optional[float] = None) -> Model:
    """ReLU(X W^T + b), then dropout: thinc's `Relu` (glorot-initialised W, zero b)."""
    model = Model("relu", _relu_forward, init=_init(glorot_uniform_init), dims={"nO": nO, "nI": nI},
                  params={"W": None, "b": None})
    return chain(model, Dropout(dropout)) if dropout is not None else model


def Softmax(nO: Optional[int] = None, nI: Optional[int] = None) -> Model:
    """softmax(X W^T + b): thinc's `Softmax` (zero-initialised), whose backprop takes the gradient
    of the loss with respect to the logits (the softmax cross-entropy's, probabilities - truth)."""
    return Model("softmax", _softmax_forward, init=_init(zero_init), dims={"nO": nO, "nI": nI},
                 params={"W": None, "b": None}, attrs={"softmax_normalize": True, "softmax_temperature": 1.0})


def Maxout(nO: Optional[int] = None, nI: Optional[int] = None, nP: int = 3, *, normalize: bool = False) -> Model:
    """The max of nP affine pieces per output, then layer norm if normalize: thinc's `Maxout`."""
    model = Model("maxout", _maxout_forward, init=_init(glorot_uniform_init, pieces=True),
                  dims={"nO": nO, "nI": nI, "nP": nP}, params={"W": None, "b": None})
    return chain(model, LayerNorm(nI=nO)) if normalize else model


def numpy_maxouts(model: Model) -> Model:
    """Let every thinc Maxout inside `model` (spaCy's MultiHashEmbed and CNN encoders have them)
    compute as this module's Maxout: the same node, params and init, only its forward replaced."""
    for node in model.walk():
        if getattr(node, "_func", None) is thinc_maxout.forward:
            node.replace_callbacks(_maxout_forward, init=node.init)
    return model


def _affine(model: Model, X: Floats2d) -> Floats2d:
    Y = gemm(model.ops, X, model.get_param("W"), trans2=True)
    Y += model.get_param("b")
    return Y


def _backprop_affine(model: Model, X: Floats2d, dY: Floats2d) -> Floats2d:
    model.inc_grad("b", dY.sum(axis=0))
    model.inc_grad("W", gemm(model.ops, dY, X, trans1=True))
    return gemm(model.ops, dY, model.get_param("W"))


def _relu_forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
    Y = relu(model.ops, _affine(model, X), inplace=True)

    def backprop(dY: Floats2d) -> Floats2d:
        return _backprop_affine(model, X, backprop_relu(model.ops, dY, Y))

    return Y, backprop


def _softmax_forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
    Y = model.ops.softmax(_affine(model, X), inplace=True)

    def backprop(dY: Floats2d) -> Floats2d:
        return _backprop_affine(model, X, dY)

    return Y, backprop


def _maxout_forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
    nO, nP, nI = (model.get_dim(dim) for dim in ("nO", "nP", "nI"))
    W = model.get_param("W").reshape((nO * nP, nI))
    Y = gemm(model.ops, X, W, trans2=True)
    Y += model.get_param("b").reshape((nO * nP,))
    best, which = model.ops.maxout(Y.reshape((Y.shape[0], nO, nP)))

    def backprop(d_best: Floats2d) -> Floats2d:
        dY = model.ops.backprop_maxout(d_best, which, nP)
        model.inc_grad("b", dY.sum(axis=0))
        dY = dY.reshape((dY.shape[0], nO * nP))
        model.inc_grad("W", gemm(model.ops, dY, X, trans1=True).reshape((nO, nP, nI)))
        return gemm(model.ops, dY, W)

    return best, backprop


def _init(init_W: Callable, pieces: bool = False) -> Callable:
    """The layer's init, a partial of a module-level function rather than a closure, so the model
    pickles (spaCy pickles pipelines for `nlp.pipe(n_process=...)` where processes are spawned)."""
    return partial(_init_affine, init_W, pieces)


def _init_affine(init_W: Callable, pieces: bool, model: Model, X: Optional[Floats2d] = None,
                 Y: Optional[Floats2d] = None) -> None:
    if X is not None and model.has_dim("nI") is None:
        model.set_dim("nI", get_width(X))
    if Y is not None and model.has_dim("nO") is None:
        model.set_dim("nO", get_width(Y))
    shape = (model.get_dim("nO"),) + ((model.get_dim("nP"),) if pieces else ())
    model.set_param("W", init_W(model.ops, shape + (model.get_dim("nI"),)))
    model.set_param("b", zero_init(model.ops, shape))
