"""Thinc Ops that multiply matrices with numpy's BLAS, for fofe_ner's models on the CPU.

thinc's NumpyOps multiplies with blis; numpy's `matmul` uses the BLAS numpy was built with
(OpenBLAS in the PyPI wheels, Accelerate on macOS), which ran several times faster for the
scorer's shapes (`project/scripts/bench_dense.py`), and numpy's `maximum` is a faster ReLU. The
Ops is registered with thinc, so `thinc.api.use_ops("numpy_blas")` or `get_ops("numpy_blas")`
selects it like any backend; `with_cpu_ops` gives it to a model built on thinc's default CPU ops.
"""

import numpy
from thinc.api import Model, NumpyOps, get_current_ops, registry
from thinc.types import Floats2d


@registry.ops("NumpyBlasOps")
class NumpyBlasOps(NumpyOps):
    """NumpyOps whose `gemm` is numpy's (thinc's own `use_blis=False` path) and whose ReLU is numpy's."""

    name = "numpy_blas"

    def __init__(self, device_type: str = "cpu", device_id: int = -1, **kwargs) -> None:
        super().__init__(device_type, device_id, use_blis=False)

    def relu(self, X: Floats2d, inplace: bool = False) -> Floats2d:
        return numpy.maximum(X, 0, out=X if inplace else None)

    def backprop_relu(self, dY: Floats2d, Y: Floats2d, inplace: bool = False) -> Floats2d:
        return numpy.multiply(dY, Y > 0, out=dY if inplace else None)

    def __reduce__(self):
        # Pickled with the pipeline for nlp.pipe(n_process=...): rebuilt from its class alone.
        return (NumpyBlasOps, ())


def with_cpu_ops(model: Model) -> Model:
    """The model, with every node on NumpyBlasOps when it was built on thinc's plain CPU ops.

    Another current backend (a GPU's CupyOps, Apple's, one the user set) is left as it is, and
    `Model.to_gpu` / `to_cpu` move the model as usual."""
    if type(get_current_ops()) is NumpyOps:
        ops = NumpyBlasOps()
        for node in model.walk():
            node.ops = ops
    return model
