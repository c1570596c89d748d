"""The FOFE-NER architecture: position codes -> the first layer on positions -> feed-forward scorer.

Input is (docs, fragments) with fragments an (F, 3) int array of (doc index, start, end);
output is a (F, n_labels + 1) array of probabilities, column 0 being NONE. The layers, in
order (docs/architecture.md follows a batch through them):

    PositionCodes(tok2vec, WordFOFECodes, CharFOFECodes)   docs -> codes at every token
    [BoundaryScorer]                                       codes -> which fragments to score
    FragmentProjection                                     (codes, fragments) -> ReLU layer 1
    Relu x (depth - 1), Softmax                            -> probabilities

With a BoundaryScorer (the fragment filter), training input is (docs, fragments, is_entity),
a bool per fragment, from which the filter learns the gold boundaries (reading the codes, not
training them).
"""

from typing import Callable, List, Optional, Tuple

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, Relu, Softmax, chain
from thinc.types import Floats2d, Ints2d

from ..features.token_arrays import reading_once
from . import boundaries, fofe
from .ops import with_cpu_ops
from .position_codes import CharFOFECodes, PositionCodes, WordFOFECodes, forgetting_factor
from .projection import LENGTH_ROWS, FragmentProjection, blocks_of

InT = Tuple[List[Doc], Ints2d]
# The name of an ensemble's root node (ensemble.py): its layers are FOFENER models.
ENSEMBLE = "fofe_ensemble"
GROUPS = ("left_context", "right_context", "bag_of_words", "char_fofe")
# Tokens of context a tok2vec is assumed to read on each side (a CNN's depth x window_size).
TOK2VEC_REACH = 64
# Inference builds the (rows, n, hidden) grid of pre-activations about this many cells
# (4 MB of float32) at a time, so its memory does not grow with the batch.
CHUNK_CELLS = 2**20


@registry.architectures("spacy_fofe.FOFENER.v3")
def build_fofe_ner_model(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_width: int = 128,
    depth: int = 2,
    dropout: float = 0.2,
    word_alpha: float = 0.5,
    char_alpha: float = 0.8,
    char_width: int = 32,
    n_char_buckets: int = 2048,
    stop_at_sentences: bool = False,
    fragment_filter: Optional[Model] = None,
    nO: Optional[int] = None,
) -> Model[InT, Floats2d]:
    """Build the FOFE fragment scorer over any tok2vec.

    hidden_width, depth: the feed-forward net (depth hidden ReLU layers, the first being
        the FOFE projection), the main speed knob.
    word_alpha, char_alpha: the forgetting factors of the word and character FOFE, in (0, 1),
        each trained from there.
    char_width, n_char_buckets: character embeddings; a character's row is its Unicode
        code point modulo n_char_buckets (so any text works; rare collisions are shared rows).
    stop_at_sentences: restart the FOFE codes at each sentence start a doc has, instead of
        letting the context of a whole document reach across its sentences.
    fragment_filter: a spacy_fofe.BoundaryScorer.v1, trained beside the scorer, so that only
        fragments with a plausible first and last token are scored; null scores every fragment.
    The first layer has a learned row per fragment length, since no other feature tells the
    net a fragment's length.
    """
    return _build(tok2vec, list(GROUPS), hidden_width, depth, dropout, word_alpha, char_alpha, char_width,
                  n_char_buckets, stop_at_sentences, learn_alphas=(True, True), length_bias=True, nO=nO,
                  fragment_filter=fragment_filter)


@registry.architectures("spacy_fofe.FOFENER.v2")
def build_fofe_ner_model_v2(
    tok2vec: Model[List[Doc], List[Floats2d]],
    hidden_width: int = 128,
    depth: int = 2,
    dropout: float = 0.2,
    word_alpha: float = 0.5,
    char_alpha: float = 0.8,
    char_width: int = 32,
    n_char_buckets: int = 2048,
    left_context: bool = True,
    right_context: bool = True,
    bag_of_words: bool = True,
    char_fofe: bool = True,
    stop_at_sentences: bool = False,
    learn_word_alpha: bool = False,
    learn_char_alpha: bool = False,
    char_cnn: bool = False,
    char_cnn_width: int = 32,
    char_cnn_window: int = 1,
    second_pass: bool = False,
    length_bias: bool = False,
    fragment_filter: Optional[Model] = None,
    nO: Optional[int] = None,
) -> Model[InT, Floats2d]:
    """FOFENER.v3 with the settings of spacy-fofe 0.1, so its pipelines load: fixed or learned
    forgetting factors, the length bias on or off, and feature groups switched off (ablations).
    The character CNN and the second pass are gone (no shipped config used them, and dev showed
    no gain for their cost): a pipeline trained with either needs spacy-fofe 0.1."""
    for name, on in (("char_cnn", char_cnn), ("second_pass", second_pass)):
        if on:
            raise ValueError(f"spacy_fofe.FOFENER.v2: {name} was removed in spacy-fofe 0.2; a pipeline trained "
                             f"with it needs spacy-fofe 0.1 (pip install 'spacy-fofe<0.2')")
    switches = dict(zip(GROUPS, (left_context, right_context, bag_of_words, char_fofe)))
    return _build(tok2vec, [group for group in GROUPS if switches[group]], hidden_width, depth, dropout,
                  word_alpha, char_alpha, char_width, n_char_buckets, stop_at_sentences,
                  learn_alphas=(learn_word_alpha, learn_char_alpha), length_bias=length_bias, nO=nO,
                  fragment_filter=fragment_filter)


# v1 is v2 under its former name; `read_v1_weights` reads the pipelines it saved.
registry.architectures("spacy_fofe.FOFENER.v1")(build_fofe_ner_model_v2)


def _build(tok2vec: Model, groups: List[str], hidden_width: int, depth: int, dropout: float, word_alpha: float,
           char_alpha: float, char_width: int, n_char_buckets: int, stop_at_sentences: bool, *,
           learn_alphas: Tuple[bool, bool], length_bias: bool, nO: Optional[int],
           fragment_filter: Optional[Model] = None) -> Model[InT, Floats2d]:
    _check_settings(groups, hidden_width=hidden_width, depth=depth, dropout=dropout, word_alpha=word_alpha,
                    char_alpha=char_alpha, char_width=char_width, n_char_buckets=n_char_buckets)
    char_fofe = "char_fofe" in groups
    word_codes = WordFOFECodes(word_alpha, *(group in groups for group in GROUPS[:3]), dropout=dropout,
                               learn_alpha=learn_alphas[0])
    char_codes = CharFOFECodes(char_width, n_char_buckets, char_alpha, stop_at_sentences,
                               learn_alpha=learn_alphas[1]) if char_fofe else None
    codes = PositionCodes(tok2vec, word_codes, char_codes, stop_at_sentences)
    projection = FragmentProjection(blocks_of(groups), nO=hidden_width, nC=char_width if char_fofe else 0,
                                    dropout=dropout, nL=LENGTH_ROWS if length_bias else 0)
    scorer, output = _scorer(hidden_width, depth, dropout, nO)
    if fragment_filter is not None and not {"left_context", "right_context", "bag_of_words"} & set(groups):
        raise ValueError("spacy_fofe.FOFENER: the fragment filter reads the word codes: switch on left_context, "
                         "right_context or bag_of_words")
    model = Model(
        "fofe_ner",
        _forward,
        init=_init,
        layers=[codes, chain(projection, scorer)] + ([fragment_filter] if fragment_filter is not None else []),
        refs={"codes": codes, "tok2vec": tok2vec, "projection": projection, "word_codes": word_codes,
              "char_codes": char_codes, "scorer": scorer, "output": output, "fragment_filter": fragment_filter},
        dims={"nO": nO},
        attrs={"chunk_cells": CHUNK_CELLS, "groups": groups,
               "reads_listener": any(_is_listener(node) for node in tok2vec.walk())},
    )
    return with_cpu_ops(model)


def _scorer(hidden_width: int, depth: int, dropout: float, nO: Optional[int]):
    """The layers after the first: depth - 1 hidden ReLU layers and the softmax (returned too)."""
    hidden = [Relu(nO=hidden_width, nI=hidden_width, dropout=dropout) for _ in range(depth - 1)]
    output = Softmax(nO=nO, nI=hidden_width)
    return (chain(*hidden, output) if hidden else output), output


def _check_settings(groups: List[str], **settings) -> None:
    name = "spacy_fofe.FOFENER"
    if not groups:
        raise ValueError(f"{name}: at least one feature group must be switched on")
    for setting in ("word_alpha", "char_alpha"):
        if not 0.0 < settings[setting] < 1.0:
            raise ValueError(f"{name}: {setting} must be in (0.0, 1.0), got {settings[setting]}")
    if not 0.0 <= settings["dropout"] <= 1.0:
        raise ValueError(f"{name}: dropout must be in [0.0, 1.0], got {settings['dropout']}")
    for setting in ("hidden_width", "depth", "char_width", "n_char_buckets"):
        if settings[setting] < 1:
            raise ValueError(f"{name}: {setting} must be >= 1, got {settings[setting]}")


def members(model: Model[InT, Floats2d]) -> List[Model[InT, Floats2d]]:
    """The FOFENER models that score fragments: an ensemble's members, or the model itself."""
    return list(model.layers) if model.name == ENSEMBLE else [model]


def stops_at_sentences(model: Model[InT, Floats2d]) -> bool:
    """Whether the model's codes restart at sentence starts (its PositionCodes' setting; an
    ensemble's members agree on it)."""
    model = members(model)[0]
    return model.has_ref("codes") and bool(model.get_ref("codes").attrs.get("stop_at_sentences"))


def reads_listener(model: Model) -> bool:
    """Whether the model reads a shared tok2vec or transformer (a listener) instead of its own."""
    return any(member.attrs.get("reads_listener", False) for member in members(model))


def _is_listener(node: Model) -> bool:
    """A spaCy Tok2VecListener, or spacy-transformers' TransformerListener (by their public classes)."""
    from spacy.pipeline.tok2vec import Tok2VecListener

    if isinstance(node, Tok2VecListener):
        return True
    try:
        from spacy_transformers.layers import TransformerListener
    except ImportError:
        return False
    return isinstance(node, TransformerListener)


def context_tokens(model: Model[InT, Floats2d]) -> int:
    """How many tokens beyond a fragment its scores depend on: the FOFE scans' reach at the
    current forgetting factors (a token has at least one character) plus the tok2vec's.
    Scoring a long doc in windows with this much context each side gives the scores of
    the whole doc. For an ensemble, the widest of its members' reaches."""
    if model.name == ENSEMBLE:
        return max(context_tokens(member) for member in model.layers)
    groups, reach = model.attrs["groups"], 0
    word_reach = fofe.scan_reach(forgetting_factor(model.get_ref("word_codes")))
    if "left_context" in groups or "right_context" in groups:
        reach = word_reach
    if "char_fofe" in groups:
        reach = max(reach, fofe.scan_reach(forgetting_factor(model.get_ref("char_codes"))))
    return reach + TOK2VEC_REACH


def _init(model: Model[InT, Floats2d], X: Optional[InT] = None, Y=None) -> None:
    tok2vec = model.get_ref("tok2vec")
    docs = X[0] if X is not None else None
    tok2vec.initialize(X=docs) if docs is not None else tok2vec.initialize()
    if model.has_dim("nO") is not True:
        raise ValueError("fofe_ner model: the number of outputs (labels + 1) must be set before initialize")
    projection = model.get_ref("projection")
    if projection.has_dim("nI") is not True:
        projection.set_dim("nI", _infer_width(tok2vec, docs))
    model.get_ref("output").set_dim("nO", model.get_dim("nO"))
    model.get_ref("scorer").initialize()
    projection.initialize()
    model.get_ref("word_codes").initialize()
    if has_fragment_filter(model):
        fragment_filter = model.get_ref("fragment_filter")
        if fragment_filter.has_dim("nI") is not True:
            fragment_filter.set_dim("nI", projection.get_dim("nI"))
        fragment_filter.initialize()
    if model.has_ref("char_codes") is True:
        model.get_ref("char_codes").initialize()


def _infer_width(tok2vec: Model, docs: Optional[List[Doc]]) -> int:
    if tok2vec.has_dim("nO") is True:
        return tok2vec.get_dim("nO")
    if docs:
        vectors = tok2vec.predict(docs)
        for array in vectors:
            return array.shape[1]
    raise ValueError("fofe_ner model: cannot tell the tok2vec's output width; give it an nO "
                     "dimension or initialize with sample docs")


def has_fragment_filter(model: Model) -> bool:
    """Whether a FOFENER model (or every member of an ensemble) has a BoundaryScorer."""
    return all(member.has_ref("fragment_filter") is True for member in members(model))


def _forward(model: Model[InT, Floats2d], inputs: InT, is_train: bool) -> Tuple[Floats2d, Callable]:
    docs, fragments = inputs[:2]
    fragments = numpy.asarray(fragments, dtype="int64").reshape((-1, 3))
    if len(fragments) == 0 or sum(len(doc) for doc in docs) == 0:
        return model.ops.alloc2f(0, model.get_dim("nO")), lambda d_scores: []
    with reading_once(model, docs):
        codes, backprop_codes = model.get_ref("codes")(docs, is_train)
    head = model.layers[1]
    if not is_train:
        return _predict_filtered(model, head, codes, fragments), _no_backprop
    scores, backprop_head = head((codes, fragments), is_train)
    if len(inputs) > 2 and has_fragment_filter(model):
        _train_filter(model.get_ref("fragment_filter"), codes, fragments, inputs[2])

    def backprop(d_scores: Floats2d):
        backprop_codes(backprop_head(d_scores))
        return []

    return scores, backprop


def _train_filter(fragment_filter: Model, codes, fragments: numpy.ndarray, is_entity) -> None:
    """Give the fragment filter its gradient against the gold fragments' boundaries. It reads the
    codes without sending a gradient back into them, so the scorer learns as it does without it."""
    logits, backprop_logits = fragment_filter(codes, True)
    truth = boundaries.targets(codes.lengths, fragments, numpy.asarray(is_entity, dtype=bool))
    backprop_logits(boundaries.logistic_gradient(fragment_filter, logits, truth))


def _no_backprop(d_scores):
    raise ValueError("fofe_ner model: backprop called on a forward pass run with is_train=False")


def _predict_filtered(model: Model, head: Model, codes, fragments: numpy.ndarray) -> Floats2d:
    """Probabilities of every fragment; with a fragment filter, only the plausible fragments are
    scored and the others get NONE."""
    threshold = model.get_ref("fragment_filter").attrs["threshold"] if has_fragment_filter(model) else 0.0
    if threshold <= 0.0:
        return _predict_in_blocks(model, head, codes, fragments)
    keep = numpy.flatnonzero(boundaries.plausible(_filter_probabilities(model, codes), fragments, codes.lengths,
                                                  threshold))
    scores = model.ops.alloc2f(len(fragments), model.get_dim("nO"))
    scores[:, 0] = 1.0
    if len(keep):
        scores[model.ops.asarray(keep)] = _predict_in_blocks(model, head, codes, fragments[keep])
    return scores


def boundary_probabilities(model: Model[InT, Floats2d], docs: List[Doc]) -> numpy.ndarray:
    """(tokens of all docs, 2): each token's probability of starting and of ending a span, by the
    model's fragment filter (docs as the model reads them: after any upstream component)."""
    return _filter_probabilities(model, model.get_ref("codes").predict(docs))


def _filter_probabilities(model: Model, codes) -> numpy.ndarray:
    return boundaries.sigmoid(model.ops, model.get_ref("fragment_filter").predict(codes))


def _predict_in_blocks(model: Model, head: Model, codes, fragments: numpy.ndarray) -> Floats2d:
    """Score the fragments that start in a block of rows at a time, so the grid of
    pre-activations (rows x n x hidden) stays within `chunk_cells` on long docs."""
    lengths = codes.lengths
    starts = codes.flat_starts(fragments)
    n = int((fragments[:, 2] - fragments[:, 1]).max())
    order = numpy.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    rows_per_block = max(1, model.attrs["chunk_cells"] // (n * model.get_ref("projection").get_dim("nO")))
    scores = model.ops.alloc2f(len(fragments), model.get_dim("nO"))
    for begin in range(0, int(lengths.sum()), rows_per_block):
        lo, hi = numpy.searchsorted(sorted_starts, [begin, begin + rows_per_block])
        if lo < hi:
            block = order[lo:hi]
            scores[model.ops.asarray(block)] = head.predict((codes, fragments[block]))
    return scores


def read_v1_weights(model: Model[InT, Floats2d], msg: dict) -> None:
    """Load weights that FOFENER.v1 saved (thinc's `to_dict` layout) into this model.

    v1 held W, b (first layer) and E (character table) on its root node, with the tok2vec
    and the scorer as its two layers; a stand-in of that shape, sharing those two layers,
    reads the message, and its three arrays go to the layers that hold them now.
    """
    tok2vec, scorer, projection = (model.get_ref(name) for name in ("tok2vec", "scorer", "projection"))
    stand_in = Model("fofe_ner", _never_run, layers=[tok2vec, scorer],
                     dims={"nO": None, "nI": None, "nH": None, "nC": None})
    stand_in.from_dict(msg)
    model.set_dim("nO", stand_in.get_dim("nO"), force=True)
    projection.set_dim("nI", stand_in.get_dim("nI"), force=True)
    projection.set_param("W", stand_in.get_param("W"))
    projection.set_param("b", stand_in.get_param("b"))
    if stand_in.has_param("E"):
        model.get_ref("char_codes").set_param("E", stand_in.get_param("E"))


def _never_run(model, inputs, is_train):
    raise ValueError("read_v1_weights' stand-in only reads weights; it is never run")


def is_v1_layout(msg: dict) -> bool:
    """Whether a model message was saved by FOFENER.v1 (its root node holds the first layer)."""
    return isinstance(msg, dict) and bool(msg.get("params")) and "W" in msg["params"][0]
