"""The FOFE-NER architecture: position codes -> the first layer on positions -> feed-forward scorer.

Input is (docs, fragments) with fragments an (F, 3) int array of (doc index, start, end);
output is a (F, n_labels + 1) array of probabilities, column 0 being NONE. The layers, in
order (docs/architecture.md follows a batch through them):

    PositionCodes(tok2vec, WordFOFECodes, CharFOFECodes)   docs -> codes at every token
    FragmentProjection                                     (codes, fragments) -> ReLU layer 1
    Relu x (depth - 1), Softmax                            -> probabilities
"""

from typing import Callable, List, Optional, Tuple

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain
from thinc.types import Floats2d, Ints2d

from . import fofe, second_pass
from .char_cnn import CharCNNCodes
from .dense import Relu, Softmax, numpy_maxouts
from .fragments import enumerate_fragments, within_sentences
from .position_codes import (
    CharFOFECodes,
    Codes,
    PositionCodes,
    WordFOFECodes,
    forgetting_factor,
    sentence_lengths,
    sentence_start_flags,
)
from .projection import DECISION_BLOCKS, LENGTH_ROWS, FragmentProjection, blocks_of

InT = Tuple[List[Doc], Ints2d]
# The name of an ensemble's root node (ensemble.py): its layers are FOFENER models.
ENSEMBLE = "fofe_ensemble"
GROUPS = ("left_context", "right_context", "bag_of_words", "char_fofe", "char_cnn")
# Tokens of context a tok2vec is assumed to read on each side (a CNN's depth x window_size).
TOK2VEC_REACH = 64
# Inference builds the (rows, n, hidden) grid of pre-activations about this many cells
# (4 MB of float32) at a time, so its memory does not grow with the batch.
CHUNK_CELLS = 2**20


@registry.architectures("spacy_fofe.FOFENER.v2")
def build_fofe_ner_model(
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
    nO: Optional[int] = None,
) -> Model[InT, Floats2d]:
    """Build the FOFE fragment scorer over any tok2vec.

    hidden_width, depth: the feed-forward net (depth hidden ReLU layers, the first being
        the FOFE projection), the main speed knob.
    word_alpha, char_alpha: forgetting factors of the word and character FOFE, in (0, 1).
    learn_word_alpha, learn_char_alpha: train a forgetting factor, starting from the value above.
    char_width, n_char_buckets: character embeddings; a character's row is its Unicode
        code point modulo n_char_buckets (so any text works; rare collisions are shared rows).
    left_context, right_context, bag_of_words, char_fofe: switch feature groups (ablations).
    char_cnn: add the max over the fragment's characters of a character convolution
        (char_cnn_width filters over char_cnn_window characters each side, within tokens;
        char_width-wide embeddings of its own).
    second_pass: score again with a second net of the same shape that also reads the first
        pass's decisions about the fragments around (second_pass.py); the scorer runs twice.
    length_bias: add a learned row per fragment length (1 to LENGTH_ROWS tokens, longer ones
        sharing the last) to the first layer, since no other feature tells the net the length.
    stop_at_sentences: restart the FOFE codes at each sentence start a doc has, instead of
        letting the context of a whole document reach across its sentences.
    """
    switches = dict(zip(GROUPS, (left_context, right_context, bag_of_words, char_fofe, char_cnn)))
    groups = [group for group in GROUPS if switches[group]]
    _check_settings(groups, hidden_width=hidden_width, depth=depth, dropout=dropout, word_alpha=word_alpha,
                    char_alpha=char_alpha, char_width=char_width, n_char_buckets=n_char_buckets)
    word_codes = WordFOFECodes(word_alpha, left_context, right_context, bag_of_words, dropout=dropout,
                               learn_alpha=learn_word_alpha)
    char_codes = CharFOFECodes(char_width, n_char_buckets, char_alpha, stop_at_sentences,
                               learn_alpha=learn_char_alpha) if char_fofe else None
    cnn = CharCNNCodes(char_cnn_width, char_width, n_char_buckets, char_cnn_window) if char_cnn else None
    # spaCy's embeddings and CNNs mix their rows with thinc's Maxout: on numpy's products too.
    codes = PositionCodes(numpy_maxouts(tok2vec), word_codes, char_codes, stop_at_sentences, char_cnn=cnn)
    nL = LENGTH_ROWS if length_bias else 0
    projection = FragmentProjection(blocks_of(groups), nO=hidden_width, nC=char_width if char_fofe else 0,
                                    dropout=dropout, nF=char_cnn_width if char_cnn else 0, nL=nL)
    scorer, output = _scorer(hidden_width, depth, dropout, nO)
    layers = [codes, chain(projection, scorer)]
    refs = {"codes": codes, "tok2vec": tok2vec, "projection": projection, "word_codes": word_codes,
            "char_codes": char_codes, "char_cnn": cnn, "scorer": scorer, "output": output}
    if second_pass:
        projection2 = FragmentProjection(blocks_of(groups) + list(DECISION_BLOCKS), nO=hidden_width,
                                         nC=char_width if char_fofe else 0, dropout=dropout,
                                         nF=char_cnn_width if char_cnn else 0, nD=None, nL=nL)  # nD: at init
        scorer2, output2 = _scorer(hidden_width, depth, dropout, nO)
        layers.append(chain(projection2, scorer2))
        refs.update({"projection2": projection2, "scorer2": scorer2, "output2": output2})
    return Model(
        "fofe_ner",
        _forward,
        init=_init,
        layers=layers,
        refs=refs,
        dims={"nO": nO},
        attrs={"chunk_cells": CHUNK_CELLS, "groups": groups},
    )


def _scorer(hidden_width: int, depth: int, dropout: float, nO: Optional[int]):
    """The layers after the first: depth - 1 hidden ReLU layers and the softmax (returned too)."""
    hidden = [Relu(nO=hidden_width, nI=hidden_width, dropout=dropout) for _ in range(depth - 1)]
    output = Softmax(nO=nO, nI=hidden_width)
    return (chain(*hidden, output) if hidden else output), output


# v1 is the same architecture under its former name, so configs written for it still build.
# v1 kept the first layer's and the character table's weights on its root node;
# `read_v1_weights` reads pipelines saved that way.
registry.architectures("spacy_fofe.FOFENER.v1")(build_fofe_ner_model)


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
    return any("listener" in node.name for node in model.walk())


def has_second_pass(model: Model[InT, Floats2d]) -> bool:
    """Whether the model was built with second_pass (it then has a second scorer)."""
    return model.has_ref("projection2")


def context_tokens(model: Model[InT, Floats2d], max_length: int = 0) -> int:
    """How many tokens beyond a fragment its scores depend on: the FOFE scans' reach at the
    current forgetting factors (a token has at least one character) plus the tok2vec's; with
    a second pass, also the reach of the decision codes and of the first pass's fragments (up
    to max_length tokens) that cover the tokens they read; those fragments' own context is
    the same reach again from them.
    Scoring a long doc in windows with this much context each side gives the scores of
    the whole doc. For an ensemble, the widest of its members' reaches."""
    if model.name == ENSEMBLE:
        return max(context_tokens(member, max_length) for member in model.layers)
    groups, reach = model.attrs["groups"], 0
    word_reach = fofe.scan_reach(forgetting_factor(model.get_ref("word_codes")))
    if "left_context" in groups or "right_context" in groups:
        reach = word_reach
    if "char_fofe" in groups:
        reach = max(reach, fofe.scan_reach(forgetting_factor(model.get_ref("char_codes"))))
    reach += TOK2VEC_REACH
    if has_second_pass(model):
        reach += word_reach + max_length
    return reach


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
    if has_second_pass(model):
        projection2 = model.get_ref("projection2")
        projection2.set_dim("nI", projection.get_dim("nI"), force=True)
        projection2.set_dim("nD", model.get_dim("nO") - 1, force=True)
        model.get_ref("output2").set_dim("nO", model.get_dim("nO"), force=True)
        model.get_ref("scorer2").initialize()
        projection2.initialize()
    model.get_ref("word_codes").initialize()
    for name in ("char_codes", "char_cnn"):
        if model.has_ref(name) is True:
            model.get_ref(name).initialize()


def _infer_width(tok2vec: Model, docs: Optional[List[Doc]]) -> int:
    if tok2vec.has_dim("nO") is True:
        return tok2vec.get_dim("nO")
    if docs:
        vectors = tok2vec.predict(docs)
        for array in vectors:
            return array.shape[1]
    raise ValueError("fofe_ner model: cannot tell the tok2vec's output width; give it an nO "
                     "dimension or initialize with sample docs")


def _forward(model: Model[InT, Floats2d], inputs: InT, is_train: bool) -> Tuple[Floats2d, Callable]:
    docs, fragments = inputs
    fragments = numpy.asarray(fragments, dtype="int64").reshape((-1, 3))
    if len(fragments) == 0 or sum(len(doc) for doc in docs) == 0:
        return model.ops.alloc2f(0, model.get_dim("nO")), lambda d_scores: []
    codes, backprop_codes = model.get_ref("codes")(docs, is_train)
    head = model.layers[1]
    if has_second_pass(model):
        return _two_pass_forward(model, docs, codes, backprop_codes, fragments, is_train)
    if not is_train:
        return _predict_in_blocks(model, head, codes, fragments), _no_backprop
    scores, backprop_head = head((codes, fragments), is_train)

    def backprop(d_scores: Floats2d):
        backprop_codes(backprop_head(d_scores))
        return []

    return scores, backprop


def _two_pass_forward(model: Model, docs: List[Doc], codes: Codes, backprop_codes: Callable,
                      fragments: numpy.ndarray, is_train: bool) -> Tuple[Floats2d, Callable]:
    """The first pass on every fragment of up to n tokens (n: the longest given), its decisions
    as codes, the second pass on the given fragments. In training the output is the second
    pass's scores of the fragments, then the first pass's (the component trains both on the
    same targets); at inference, the second pass's only."""
    head1, head2 = model.layers[1], model.layers[2]
    n = int((fragments[:, 2] - fragments[:, 1]).max())
    every = _every_fragment(model, docs, codes, n)
    every_starts = codes.flat_starts(every)
    every_sizes = every[:, 2] - every[:, 1]
    if is_train:
        first, backprop_first = head1((codes, every), is_train)
    else:
        first = _predict_in_blocks(model, head1, codes, every)
    ops = model.ops
    decisions = second_pass.token_decisions(first, ops.asarray(every_starts), ops.asarray(every_sizes),
                                            int(codes.lengths.sum()))
    segments = _code_segments(model, docs, codes)
    alpha = forgetting_factor(model.get_ref("word_codes"))
    seen = Codes(codes.lengths, {**codes.arrays, **second_pass.decision_codes(decisions, ops.asarray(segments), alpha)},
                 codes.char_bounds, codes.char_alpha, codes.char_alpha_learned)
    if not is_train:
        return _predict_in_blocks(model, head2, seen, fragments), _no_backprop
    second, backprop_second = head2((seen, fragments), is_train)
    index = ops.asarray(second_pass.positions_in(fragments, codes.flat_starts(fragments), every_starts, every_sizes, n))
    scores = ops.xp.concatenate([second, first[index]])

    def backprop(d_scores: Floats2d):
        d_first = ops.alloc2f(*first.shape)
        d_first[index] = d_scores[len(fragments):]
        d_arrays = backprop_first(d_first)
        for name, grad in backprop_second(d_scores[:len(fragments)]).items():
            if name in second_pass.DECISION_ARRAYS:
                continue  # the first pass's decisions are the second's input, not a gradient path
            d_arrays[name] = d_arrays[name] + grad if name in d_arrays else grad
        backprop_codes(d_arrays)
        return []

    return scores, backprop


def _every_fragment(model: Model, docs: List[Doc], codes: Codes, n: int) -> numpy.ndarray:
    """Every fragment of 1..n tokens; none across a sentence start when the codes stop there."""
    every = enumerate_fragments(codes.lengths, n)
    if not stops_at_sentences(model):
        return every
    return within_sentences(every, codes.lengths, numpy.concatenate([sentence_start_flags(doc) for doc in docs]))


def _code_segments(model: Model, docs: List[Doc], codes: Codes) -> numpy.ndarray:
    """The lengths of the sequences the codes run over: docs, or sentences when they stop there."""
    if stops_at_sentences(model):
        return numpy.concatenate([sentence_lengths(doc) for doc in docs if len(doc)] or [numpy.zeros(0, "int64")])
    return codes.lengths


def _no_backprop(d_scores):
    raise ValueError("fofe_ner model: backprop called on a forward pass run with is_train=False")


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
