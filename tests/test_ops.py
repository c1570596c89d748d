"""spacy_fofe.ml.ops: the numpy-BLAS Ops gives thinc's results, and the FOFE model runs on it on the CPU."""

import pickle

import numpy
import pytest
from thinc.api import Maxout, NumpyOps, Relu, Softmax, chain, get_ops, use_ops

from spacy_fofe.ml.ops import NumpyBlasOps, with_cpu_ops

blis = NumpyOps()
rng = numpy.random.default_rng(0)


@pytest.mark.parametrize("trans1,trans2", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_equals_blis(trans1, trans2):
    x = rng.normal(size=(5, 7) if not trans1 else (7, 5)).astype("float32")
    y = rng.normal(size=(7, 3) if not trans2 else (3, 7)).astype("float32")
    got = NumpyBlasOps().gemm(x, y, trans1=trans1, trans2=trans2)
    assert got.shape == (5, 3) and got.dtype == numpy.float32
    numpy.testing.assert_allclose(got, blis.gemm(x, y, trans1=trans1, trans2=trans2), rtol=1e-5, atol=1e-5)


def test_relu_and_its_gradient_equal_thincs():
    ops = NumpyBlasOps()
    X = rng.normal(size=(6, 4)).astype("float32")
    X[0, 0] = 0.0
    dY = rng.normal(size=(6, 4)).astype("float32")
    Y = ops.relu(X)
    assert X.min() < 0  # not in place
    numpy.testing.assert_array_equal(Y, blis.relu(X))
    numpy.testing.assert_array_equal(ops.backprop_relu(dY, Y), blis.backprop_relu(dY, blis.relu(X)))
    same = X.copy()
    assert ops.relu(same, inplace=True) is same and same.min() == 0


def test_it_is_a_registered_backend_and_pickles():
    assert isinstance(get_ops("numpy_blas"), NumpyBlasOps)
    assert isinstance(pickle.loads(pickle.dumps(NumpyBlasOps())), NumpyBlasOps)


def test_thincs_layers_on_it_compute_as_on_blis():
    X = rng.normal(size=(8, 3)).astype("float32")
    theirs = chain(Maxout(4, 3, nP=3, normalize=True), Relu(5, 4), Softmax(2, 5)).initialize(X=X)
    with use_ops("numpy_blas"):
        mine = chain(Maxout(4, 3, nP=3, normalize=True), Relu(5, 4), Softmax(2, 5)).from_bytes(theirs.to_bytes())
    assert isinstance(mine.layers[0].ops, NumpyBlasOps)
    Y, backprop = mine.begin_update(X)
    Y_theirs, backprop_theirs = theirs.begin_update(X)
    numpy.testing.assert_allclose(Y, Y_theirs, rtol=1e-5, atol=1e-6)
    dY = rng.normal(size=Y.shape).astype("float32")
    numpy.testing.assert_allclose(backprop(dY), backprop_theirs(dY), rtol=1e-5, atol=1e-5)


def test_the_fofe_model_and_its_tok2vec_run_on_numpy_blas_on_the_cpu():
    from spacy.ml.models.tok2vec import MultiHashEmbed

    from spacy_fofe.ml.model import build_fofe_ner_model

    tok2vec = MultiHashEmbed(width=8, attrs=["NORM", "SHAPE"], rows=[50, 20], include_static_vectors=False)
    model = build_fofe_ner_model(tok2vec, hidden_width=8, nO=3)
    assert {type(node.ops) for node in model.walk()} == {NumpyBlasOps}


class OtherOps(NumpyOps):
    name = "other_cpu_backend"


def test_another_current_backend_is_left_alone():
    from thinc.api import get_current_ops, set_current_ops

    previous = get_current_ops()
    set_current_ops(OtherOps())
    try:
        assert type(with_cpu_ops(Relu(2, 3)).ops) is OtherOps
    finally:
        set_current_ops(previous)


def test_thinc_finds_it_through_the_entry_point_without_an_import():
    import subprocess
    import sys

    script = "from thinc.api import get_ops; print(type(get_ops('numpy_blas')).__name__)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "NumpyBlasOps", done.stderr
