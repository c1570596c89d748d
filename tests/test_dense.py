"""spacy_fofe.dense: numpy's products and ReLUs give thinc's results, and its layers read thinc's weights."""

import numpy
import pytest
from thinc.api import Maxout, NumpyOps, Relu, Softmax, chain

from spacy_fofe import dense

ops = NumpyOps()
rng = numpy.random.default_rng(0)


@pytest.mark.parametrize("trans1,trans2", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_equals_thincs(trans1, trans2):
    x = rng.normal(size=(5, 7) if not trans1 else (7, 5)).astype("float32")
    y = rng.normal(size=(7, 3) if not trans2 else (3, 7)).astype("float32")
    got = dense.gemm(ops, x, y, trans1=trans1, trans2=trans2)
    assert got.shape == (5, 3) and got.dtype == numpy.float32
    numpy.testing.assert_allclose(got, ops.gemm(x, y, trans1=trans1, trans2=trans2), rtol=1e-5, atol=1e-5)


def test_relu_and_its_gradient_equal_thincs():
    X = rng.normal(size=(6, 4)).astype("float32")
    X[0, 0] = 0.0
    dY = rng.normal(size=(6, 4)).astype("float32")
    Y = dense.relu(ops, X)
    assert X.min() < 0  # not in place
    numpy.testing.assert_array_equal(Y, ops.relu(X))
    numpy.testing.assert_array_equal(dense.backprop_relu(ops, dY, Y), ops.backprop_relu(dY, ops.relu(X)))
    same = X.copy()
    assert dense.relu(ops, same, inplace=True) is same and same.min() == 0


@pytest.mark.parametrize("ours,thincs", [
    (lambda: dense.Relu(4, 3, dropout=0.0), lambda: Relu(4, 3, dropout=0.0)),
    (lambda: chain(dense.Relu(4, 3), dense.Softmax(5, 4)), lambda: chain(Relu(4, 3), Softmax(5, 4))),
    (lambda: dense.Maxout(4, 3, nP=3, normalize=True), lambda: Maxout(4, 3, nP=3, normalize=True)),
])
def test_layers_load_thincs_weights_and_compute_the_same(ours, thincs):
    X = rng.normal(size=(8, 3)).astype("float32")
    theirs = thincs().initialize()
    for node in theirs.walk():  # Softmax starts at zero: give it weights that matter
        if node.has_param("W"):
            node.set_param("W", rng.normal(size=node.get_param("W").shape).astype("float32"))
            node.set_param("b", rng.normal(size=node.get_param("b").shape).astype("float32"))
    mine = ours().from_bytes(theirs.to_bytes())
    Y, backprop = mine.begin_update(X)
    Y_theirs, backprop_theirs = theirs.begin_update(X)
    numpy.testing.assert_allclose(Y, Y_theirs, rtol=1e-5, atol=1e-6)
    dY = rng.normal(size=Y.shape).astype("float32")
    numpy.testing.assert_allclose(backprop(dY), backprop_theirs(dY), rtol=1e-5, atol=1e-5)
    grads = {(node.name, name): node.get_grad(name) for node in mine.walk() for name in node.param_names}
    for node in theirs.walk():
        for name in node.param_names:
            numpy.testing.assert_allclose(grads[node.name, name], node.get_grad(name), rtol=1e-5, atol=1e-5)


def test_softmax_rows_are_probabilities():
    layer = dense.Softmax(3, 2).initialize()
    layer.set_param("W", numpy.asarray([[1, 0], [0, 1], [-1, -1]], dtype="float32"))
    Y = layer.predict(numpy.asarray([[2, 0], [0, 0]], dtype="float32"))
    numpy.testing.assert_allclose(Y.sum(axis=1), [1, 1], rtol=1e-6)
    numpy.testing.assert_allclose(Y[1], [1 / 3] * 3, rtol=1e-6)
    assert Y[0].argmax() == 0


def test_numpy_maxouts_swaps_thincs_maxout_and_computes_the_same():
    X = rng.normal(size=(8, 3)).astype("float32")
    theirs = chain(Maxout(4, 3, nP=3, normalize=True), Relu(2, 4)).initialize()
    mine = dense.numpy_maxouts(chain(Maxout(4, 3, nP=3, normalize=True), Relu(2, 4))).from_bytes(theirs.to_bytes())
    maxout = [node for node in mine.walk() if node.name == "maxout"]
    assert [node._func for node in maxout] == [dense._maxout_forward]
    Y, backprop = mine.begin_update(X)
    Y_theirs, backprop_theirs = theirs.begin_update(X)
    numpy.testing.assert_allclose(Y, Y_theirs, rtol=1e-5, atol=1e-6)
    dY = rng.normal(size=Y.shape).astype("float32")
    numpy.testing.assert_allclose(backprop(dY), backprop_theirs(dY), rtol=1e-5, atol=1e-5)
    their_maxout = theirs.layers[0].layers[0]
    numpy.testing.assert_allclose(maxout[0].get_grad("W"), their_maxout.get_grad("W"), rtol=1e-5, atol=1e-5)
    # A fresh model still initializes through thinc's own init.
    assert dense.numpy_maxouts(Maxout(4, 3)).initialize(X=X).get_param("W").shape == (4, 3, 3)


def test_the_fofe_model_runs_spacys_embedding_maxout_on_numpy():
    from spacy.ml.models.tok2vec import MultiHashEmbed
    from thinc.layers import maxout as thinc_maxout

    from spacy_fofe.model import build_fofe_ner_model

    tok2vec = MultiHashEmbed(width=8, attrs=["NORM", "SHAPE"], rows=[50, 20], include_static_vectors=False)
    model = build_fofe_ner_model(tok2vec, hidden_width=8, nO=3)
    funcs = [node._func for node in model.walk() if node.name == "maxout"]
    assert funcs and thinc_maxout.forward not in funcs
