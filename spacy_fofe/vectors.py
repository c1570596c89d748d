"""A trainable word-embedding table initialised from the pipeline's static vectors.

spaCy's StaticVectors keep pretrained vectors frozen behind a learned projection. The FOFE
paper (and our prototype) instead start a word table from pretrained vectors and fine-tune
it, which is what this layer does: rows are looked up by the token's `attr` (LOWER by
default, as `spacy init vectors --attr LOWER` builds them) in `vocab.vectors`; tokens
without a vector share one learned row. With `word_dropout`, training sends a random share
of the tokens to that row too, so the net learns to read a word it has no vector for from
its affixes, shape and context (word dropout, as WordDropoutHashEmbed does for hash rows).

The table is copied into the model at initialize, so the saved model holds it too; the
vocab's vectors must stay the ones it was built from (their key-to-row map is used).
"""

from typing import List, Optional

import numpy
from spacy.attrs import intify_attr
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d


@registry.layers("spacy_fofe.TunedVectors.v1")
def TunedVectors(attr: str = "LOWER", word_dropout: float = 0.0) -> Model[List[Doc], List[Floats2d]]:
    """Token vectors from a fine-tuned copy of vocab.vectors (width = the vectors' width).

    word_dropout: the share of tokens that get the unknown row in training, in [0, 1).
    """
    if intify_attr(attr) is None:
        raise ValueError(f"spacy_fofe.TunedVectors.v1: unknown token attribute {attr!r}")
    if not 0.0 <= word_dropout < 1.0:
        raise ValueError(f"spacy_fofe.TunedVectors.v1: word_dropout must be in [0, 1), got {word_dropout}")
    return Model("tuned_vectors", forward, init=init, attrs={"attr": attr, "word_dropout": word_dropout},
                 dims={"nO": None})


def init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    if model.has_param("E") is True:
        return
    if not X:
        raise ValueError("spacy_fofe.TunedVectors.v1 needs sample docs to find the vocab's vectors")
    vectors = X[0].vocab.vectors
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise ValueError("spacy_fofe.TunedVectors.v1: the pipeline has no vectors. Set [initialize] vectors "
                         "(or --paths.vectors), e.g. to GloVe built with `spacy init vectors ... --attr LOWER`.")
    table = model.ops.to_numpy(vectors.data).astype("float32")
    unknown = numpy.zeros((1, table.shape[1]), dtype="float32")
    model.set_dim("nO", table.shape[1])
    model.set_param("E", model.ops.asarray(numpy.concatenate([table, unknown])))


def forward(model: Model, docs: List[Doc], is_train: bool):
    table = model.get_param("E")
    lengths = [len(doc) for doc in docs]
    if not docs or sum(lengths) == 0:
        return [model.ops.alloc2f(n, table.shape[1]) for n in lengths], lambda d: []
    attr = intify_attr(model.attrs["attr"])
    keys = numpy.concatenate([doc.to_array(attr) for doc in docs])
    rows = numpy.asarray(docs[0].vocab.vectors.find(keys=keys), dtype="int64")
    rows[rows < 0] = table.shape[0] - 1
    rate = model.attrs.get("word_dropout", 0.0)  # pipelines saved before the setting lack it
    if is_train and rate > 0.0:
        rows[numpy.random.uniform(size=len(rows)) < rate] = table.shape[0] - 1
    rows = model.ops.asarray(rows)
    output = model.ops.unflatten(table[rows], model.ops.asarray(lengths))

    def backprop(d_output: List[Floats2d]) -> List[Doc]:
        d_table = model.ops.alloc2f(*table.shape)
        model.ops.scatter_add(d_table, rows, model.ops.flatten(d_output))
        model.inc_grad("E", d_table)
        return []

    return output, backprop
