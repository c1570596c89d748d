"""Word dropout for spaCy's hash embeddings: teach the model to tag words it has never seen.

Half of GermEval's dev entities contain a word that never occurs in train, and the model found
46% of those against 93% of the names it had seen. At inference an unseen word's NORM/LOWER
hash lands on rows trained for other words, so the word-identity features are noise exactly
where the entity is new. Word dropout (Lample et al. 2016 replace words by UNK at random in
training) makes the net learn to decide from affixes, shape and FOFE context as well: in
training, each token's word-identity columns (NORM, LOWER, ORTH) are set, with probability
`word_dropout`, to one shared "unknown" id, while its PREFIX, SUFFIX and SHAPE columns stay.
The layer also records every word id it saw in training and, at inference, gives words it
never saw that same unknown id, so a new name looks exactly like the dropped words the net
learnt from (GermEval dev span F1 was higher than with the unseen ids left as they are).

`WordDropoutHashEmbed` is spaCy's MultiHashEmbed.v2, built here from the same public layers
with that layer between the feature extractor and the hash tables, and each distinct row of a
batch embedded once (rows_once.py). The known ids are saved with the model (8 bytes a word
type). With `word_dropout = 0` it is MultiHashEmbed without the layer.
"""

from typing import List, Sequence, Union

import numpy
from spacy.attrs import intify_attr
from spacy.ml.featureextractor import FeatureExtractor
from spacy.ml.staticvectors import StaticVectors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import HashEmbed, Maxout, Model, chain, concatenate, list2ragged, ragged2list, with_array
from thinc.types import Floats2d, Ints2d

from .rows_once import TokenIds, embed_rows_once, host_ids
from .sorted_ids import positions_in
from .token_arrays import per_doc

WORD_ATTRS = ("ORTH", "NORM", "LOWER")
WORD_ATTR_IDS = {intify_attr(name) for name in WORD_ATTRS}
UNKNOWN_ID = 0  # the hash of the empty string: no real token has it, so it is one shared "unknown" row


@registry.architectures("spacy_fofe.WordDropoutHashEmbed.v1")
def WordDropoutHashEmbed(
    width: int,
    attrs: List[Union[str, int]],
    rows: List[int],
    include_static_vectors: bool,
    word_dropout: float = 0.25,
) -> Model[List[Doc], List[Floats2d]]:
    """spaCy's MultiHashEmbed.v2 whose word-identity attributes are dropped at rate word_dropout in training."""
    if not 0.0 <= word_dropout < 1.0:
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: word_dropout must be in [0, 1), got {word_dropout}")
    ids = [intify_attr(attr) for attr in attrs]
    if None in ids:
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: unknown token attribute {attrs[ids.index(None)]!r}")
    columns = [i for i, attr_id in enumerate(ids) if attr_id in WORD_ATTR_IDS]
    if word_dropout > 0 and not columns:
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: attrs {list(attrs)} contain none of "
                         f"{list(WORD_ATTRS)}, so there is no word identity to drop")
    if len(rows) != len(attrs):
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: rows has {len(rows)} entries for {len(attrs)} attrs")
    # MultiHashEmbed's tables and seeds, so a model trains as spaCy's would.
    embeddings = [HashEmbed(width, n_rows, column=i, seed=8 + i, dropout=0.0) for i, n_rows in enumerate(rows)]
    # Host arrays for the rows-once layout; spaCy's extractor (device arrays) beside static vectors.
    extract = FeatureExtractor(list(attrs)) if include_static_vectors else TokenIds(attrs)
    if word_dropout > 0:
        extract = chain(extract, word_dropout_layer(columns, word_dropout))
    if include_static_vectors:
        # Static vectors are concatenated onto the hash rows, so that layout is not a row embedding.
        return chain(
            concatenate(chain(extract, list2ragged(), with_array(concatenate(*embeddings))),
                        StaticVectors(width, dropout=0.0)),
            with_array(Maxout(width, width * (len(rows) + 1), nP=3, dropout=0.0, normalize=True)),
            ragged2list(),
        )
    return embed_rows_once(extract, [
        with_array(concatenate(*embeddings)),
        with_array(Maxout(width, width * len(rows), nP=3, dropout=0.0, normalize=True)),
    ], width)


def word_dropout_layer(columns: Sequence[int], rate: float) -> Model[List[Ints2d], List[Ints2d]]:
    """In training, set the word columns of a random `rate` of the tokens to UNKNOWN_ID and remember
    the ids seen; at inference, set the word columns holding ids never seen in training to UNKNOWN_ID."""
    attrs = {"columns": list(columns), "rate": rate, "known": numpy.zeros((0,), dtype="uint64")}
    return Model("word_dropout", _forward, init=_init, attrs=attrs)


def _sorted_contains(table: numpy.ndarray, values: numpy.ndarray) -> numpy.ndarray:
    """Whether each of `values` is in `table` (sorted, as union1d leaves it): a binary search per value,
    where numpy.isin would hash the whole table at every batch."""
    return positions_in(table, values) >= 0


def _init(model: Model, X=None, Y=None) -> None:
    """A new model has seen no words yet."""
    model.attrs["known"] = numpy.zeros((0,), dtype="uint64")


def _forward(model: Model, features: List[Ints2d], is_train: bool):
    columns, rate, known = model.attrs["columns"], model.attrs["rate"], model.attrs["known"]
    lengths = [len(doc_features) for doc_features in features]
    if sum(lengths) == 0 or rate == 0.0 or (not is_train and known.size == 0):
        # nothing to do; or MultiHashEmbed unchanged; or a layer that never trained (an old model)
        return features, lambda d_features: d_features
    on_host = all(isinstance(array, numpy.ndarray) for array in features)
    flat = host_ids(model.ops, features)  # joined into a new array: the extractor's arrays stay as they were
    words = flat[:, columns]
    if is_train:
        model.attrs["known"] = numpy.union1d(known, words)
        # whole tokens lose all their word columns together
        unknown = numpy.random.uniform(size=(len(words), 1)) < rate
    else:
        unknown = ~_sorted_contains(known, words)
    flat[:, columns] = numpy.where(unknown, UNKNOWN_ID, words)
    out = flat if on_host else model.ops.asarray(flat)  # back where the extractor left them
    # The ids are not differentiable; the extractor's own backprop ignores what it gets.
    return per_doc(out, lengths), lambda d_features: d_features
