"""Layers that turn a batch of Docs into FOFE codes at every token position.

Every fragment feature of the scorer is read from these (tokens, width) arrays at the
fragment's boundaries (docs/architecture.md, section 3), so nothing here depends on the
fragments. Three layers: `WordFOFECodes` (left and right context codes and the token
vectors, from any tok2vec's output), `CharFOFECodes` (character codes at token
boundaries, with their own embedding table) and `PositionCodes`, which runs a tok2vec and
both and merges their arrays. The codes run over whole docs, across sentence boundaries;
with `stop_at_sentences` they restart at each sentence start the doc has (`Token.is_sent_start`
set by a converter, a senter or a parser) and a doc without sentence starts is one sentence.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy
from spacy.attrs import ORTH, SPACY
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d, Ints1d, Ragged

from ..features.token_arrays import READS, distinct_values, token_array
from . import fofe
from .fragments import flat_bounds

# The arrays CharFOFECodes writes (fofe.char_boundary_codes' order).
CHAR_ARRAYS = ("lr_end", "lr_before", "rl_start", "rl_after")


@dataclass
class Codes:
    """FOFE codes of a batch: one row per token of all docs, doc after doc."""

    lengths: numpy.ndarray  # tokens per doc (int64, on the CPU)
    arrays: Dict[str, Floats2d] = field(default_factory=dict)  # name -> (tokens, width)
    # With character codes: each token's [start, end) in the batch's characters (on the
    # model's device) and the character forgetting factor, which a fragment's codes need.
    char_bounds: Optional[Tuple[Ints1d, Ints1d]] = None
    char_alpha: float = 0.0
    # Whether char_alpha is learned: then the gradient with respect to it travels back
    # under the key CHAR_ALPHA_GRAD, next to the arrays' gradients.
    char_alpha_learned: bool = False

    def flat_starts(self, fragments: numpy.ndarray) -> numpy.ndarray:
        """The row of each fragment's (doc index, start, end) first token in the arrays."""
        return flat_bounds(fragments, self.lengths)[0]


Gradients = Dict[str, Floats2d]
CHAR_ALPHA_GRAD = "char_alpha"


@registry.layers("spacy_fofe.WordFOFECodes.v1")
def WordFOFECodes(
    alpha: float = 0.5,
    left_context: bool = True,
    right_context: bool = True,
    bag_of_words: bool = True,
    dropout: float = 0.0,
    learn_alpha: bool = False,
) -> Model[Union[List[Floats2d], Ragged], Codes]:
    """Left-to-right and right-to-left FOFE codes of the token vectors, including and
    excluding each position, and the token vectors themselves (dropout applied first).
    The sequences are a list of arrays or a Ragged (the batch's sentences, cut by their lengths alone).

    learn_alpha: train the forgetting factor, starting from `alpha` (see `forgetting_factor`).
    """
    switches = {"left_context": left_context, "right_context": right_context, "bag_of_words": bag_of_words}
    return Model(
        "word_fofe_codes",
        _word_forward,
        init=_alpha_init,
        params={ALPHA_LOGIT: None} if learn_alpha else {},
        attrs={"alpha": alpha, "groups": [group for group, on in switches.items() if on], "dropout_rate": dropout},
    )


# A learned forgetting factor is kept as its logit, so every update leaves it in (0, 1).
ALPHA_LOGIT = "alpha_logit"


def _alpha_init(model: Model, X=None, Y=None) -> None:
    if ALPHA_LOGIT in model.param_names:
        alpha = model.attrs["alpha"]
        model.set_param(ALPHA_LOGIT, model.ops.asarray1f([numpy.log(alpha / (1.0 - alpha))]))


def forgetting_factor(model: Model) -> float:
    """The layer's alpha: the configured one, or sigmoid of the learned logit."""
    if ALPHA_LOGIT not in model.param_names:
        return model.attrs["alpha"]
    logit = float(model.get_param(ALPHA_LOGIT)[0])
    return float(1.0 / (1.0 + numpy.exp(-logit)))


def _inc_alpha_grad(model: Model, d_alpha: float, alpha: float) -> None:
    """Add dL/dalpha to the logit's gradient (dalpha/dlogit = alpha * (1 - alpha))."""
    model.inc_grad(ALPHA_LOGIT, model.ops.asarray1f([d_alpha * alpha * (1.0 - alpha)]))


def _word_forward(model: Model, tokvecs: Union[List[Floats2d], Ragged], is_train: bool) -> Tuple[Codes, Callable]:
    ops = model.ops
    alpha, groups = forgetting_factor(model), model.attrs["groups"]
    learned = ALPHA_LOGIT in model.param_names
    ragged = isinstance(tokvecs, Ragged)
    if ragged:
        lengths = ops.to_numpy(tokvecs.lengths).astype("int64")
        x = tokvecs.dataXd
    else:
        lengths = numpy.asarray([len(v) for v in tokvecs], dtype="int64")
        x = ops.flatten(list(tokvecs))
    lengths_dev = ops.asarray(lengths)
    mask = ops.get_dropout_mask(x.shape, model.attrs["dropout_rate"]) if is_train else None
    if mask is not None:
        x = x * mask
    arrays = {}
    if "left_context" in groups:
        arrays["left_incl"] = fofe.prefix_fofe(x, lengths_dev, alpha)
        arrays["left_excl"] = fofe.shift_within(arrays["left_incl"], lengths_dev, -1)
    if "right_context" in groups:
        arrays["right_incl"] = fofe.prefix_fofe(x, lengths_dev, alpha, reverse=True)
        arrays["right_excl"] = fofe.shift_within(arrays["right_incl"], lengths_dev, 1)
    if "bag_of_words" in groups:
        arrays["tokens"] = x

    def backprop(d_arrays: Gradients) -> List[Floats2d]:
        d_x = d_arrays["tokens"] if "tokens" in d_arrays else ops.alloc2f(*x.shape)
        d_alpha = 0.0
        if "left_incl" in d_arrays:
            d_left = d_arrays["left_incl"] + fofe.shift_within(d_arrays["left_excl"], lengths_dev, 1)
            d_x = d_x + fofe.prefix_fofe_backward(d_left, lengths_dev, alpha)
            if learned:
                d_alpha += float((d_left * fofe.prefix_fofe_alpha_grad(arrays["left_incl"], lengths_dev, alpha)).sum())
        if "right_incl" in d_arrays:
            d_right = d_arrays["right_incl"] + fofe.shift_within(d_arrays["right_excl"], lengths_dev, -1)
            d_x = d_x + fofe.prefix_fofe_backward(d_right, lengths_dev, alpha, reverse=True)
            if learned:
                d_alpha += float((d_right * fofe.prefix_fofe_alpha_grad(
                    arrays["right_incl"], lengths_dev, alpha, reverse=True)).sum())
        if learned:
            _inc_alpha_grad(model, d_alpha, alpha)
        if mask is not None:
            d_x = d_x * mask
        return Ragged(d_x, tokvecs.lengths) if ragged else ops.unflatten(d_x, lengths_dev)

    return Codes(lengths, arrays), backprop


@registry.layers("spacy_fofe.CharFOFECodes.v1")
def CharFOFECodes(
    nO: int = 32, nV: int = 2048, alpha: float = 0.8, stop_at_sentences: bool = False, learn_alpha: bool = False
) -> Model[List[Doc], Codes]:
    """Character FOFE codes at every token's boundaries (`fofe.char_boundary_codes`).

    nO: the character embedding width. nV: rows of the embedding table; a character's row
    is its code point modulo nV, so any text works and rare collisions share a row.
    stop_at_sentences: restart the codes at each sentence start instead of running over the doc.
    learn_alpha: train the forgetting factor, starting from `alpha`.
    """
    params = {"E": None, **({ALPHA_LOGIT: None} if learn_alpha else {})}
    return Model("char_fofe_codes", _char_forward, init=_char_init, dims={"nO": nO, "nV": nV},
                 params=params, attrs={"alpha": alpha, "stop_at_sentences": stop_at_sentences})


def _char_init(model: Model, X=None, Y=None) -> None:
    # Its own generator, so the table does not depend on what else was initialized first.
    rng = numpy.random.default_rng(0)
    table = rng.uniform(-0.1, 0.1, (model.get_dim("nV"), model.get_dim("nO"))).astype("float32")
    model.set_param("E", model.ops.asarray(table))
    _alpha_init(model)


def _char_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Codes, Callable]:
    ops = model.ops
    alpha = forgetting_factor(model)
    learned = ALPHA_LOGIT in model.param_names
    if not is_train:
        return _predict_chars(model, docs, alpha, learned), _no_backprop
    codepoints, char_lengths, token_starts, token_ends = doc_characters(docs, model.attrs["stop_at_sentences"])
    ids = ops.asarray((codepoints % model.get_dim("nV")).astype("int64"))
    char_lengths, token_starts, token_ends = (ops.asarray(a) for a in (char_lengths, token_starts, token_ends))
    table = model.get_param("E")
    char_vectors = table[ids]
    codes = fofe.char_boundary_codes(char_vectors, char_lengths, token_starts, token_ends, alpha)
    lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")

    def backprop(d_arrays: Gradients) -> List[Doc]:
        d_codes = tuple(d_arrays[name] for name in CHAR_ARRAYS)
        d_chars = fofe.char_boundary_codes_backward(d_codes, char_lengths, token_starts, token_ends, alpha,
                                                    len(ids))
        d_table = ops.alloc2f(*table.shape)
        ops.scatter_add(d_table, ids, d_chars)
        model.inc_grad("E", d_table)
        if learned:
            d_alpha = fofe.char_boundary_codes_alpha_grad(d_codes, char_vectors, char_lengths, token_starts,
                                                          token_ends, alpha)
            if CHAR_ALPHA_GRAD in d_arrays:  # the fragments' own decay, alpha ** characters
                d_alpha += float(d_arrays[CHAR_ALPHA_GRAD].sum())
            _inc_alpha_grad(model, d_alpha, alpha)
        return []

    return Codes(lengths, dict(zip(CHAR_ARRAYS, codes)), (token_starts, token_ends), alpha, learned), backprop


def _predict_chars(model: Model, docs: List[Doc], alpha: float, learned: bool) -> Codes:
    """The codes of `_char_forward` from each distinct word's characters (`fofe.word_char_boundary_codes`):
    a batch's text has several times as many characters as distinct words' characters, and predictions
    need no gradient with respect to each character."""
    ops = model.ops
    n_rows, table = model.get_dim("nV"), model.get_param("E")
    spelled, word_lengths, word_of_token, spaces, lengths, token_starts, token_ends = doc_words(
        docs, model.attrs["stop_at_sentences"])
    word_chars = table[ops.asarray((spelled % n_rows).astype("int64"))]
    lr_words, rl_words = fofe.word_codes(word_chars, ops.asarray(word_lengths), alpha, ops.reduce_sum)
    codes = fofe.word_char_boundary_codes(lr_words, rl_words, ops.asarray(word_lengths), ops.asarray(word_of_token),
                                          ops.asarray(spaces), ops.asarray(lengths), table[ord(" ") % n_rows], alpha)
    doc_lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")
    return Codes(doc_lengths, dict(zip(CHAR_ARRAYS, codes)), (ops.asarray(token_starts), ops.asarray(token_ends)),
                 alpha, learned)


def _no_backprop(d_arrays: Gradients) -> List[Doc]:
    raise ValueError("char_fofe_codes: backprop called on a forward pass run with is_train=False")


def batch_words(docs: List[Doc]):
    """Each token's distinct word (an index), the distinct words' texts and each token's trailing space
    (0 or 1), for the batch's tokens, doc after doc: a text per distinct word, not per token."""
    orths, word_of_token = distinct_values(docs, ORTH)
    return word_of_token, _word_texts(docs, orths), token_array(docs, [SPACY])[:, 0].astype("int64")


def doc_words(docs: List[Doc], by_sentence: bool = False):
    """The batch's text as its distinct words: their code points, word after word (uint32), and their
    lengths; each token's word and trailing space (0 or 1); the tokens of each character sequence (a doc,
    or with `by_sentence` a sentence: `doc_characters`' sequences, by token); and each token's flat
    [start, end) character offsets, as `doc_characters` gives them."""
    if not any(len(doc) for doc in docs):
        empty = numpy.zeros((0,), dtype="int64")
        return numpy.zeros((0,), dtype=numpy.uint32), empty, empty, empty, empty, empty, empty
    word_of_token, words, spaces = batch_words(docs)
    word_lengths = numpy.fromiter(map(len, words), dtype="int64", count=len(words))
    spelled = numpy.frombuffer("".join(words).encode("utf-32-le"), dtype=numpy.uint32)
    widths = word_lengths[word_of_token] + spaces
    starts = numpy.cumsum(widths) - widths
    lengths = sentence_lengths(docs) if by_sentence else numpy.fromiter(map(len, docs), dtype="int64", count=len(docs))
    return spelled, word_lengths, word_of_token, spaces, lengths, starts, starts + word_lengths[word_of_token]


def doc_characters(docs: List[Doc], by_sentence: bool = False):
    """Code points of each doc's text, flat; the length of each character sequence (a doc's
    text, or with `by_sentence` each sentence's, from its first character to the next
    sentence's); and each token's flat [start, end) character offsets. The text is built from
    each distinct word's code points and the tokens' trailing spaces, as `doc.text` is, without
    a Python step per token."""
    empty = numpy.zeros((0,), dtype="int64")
    if not any(len(doc) for doc in docs):
        return numpy.zeros((0,), dtype=numpy.uint32), numpy.zeros((len(docs),), dtype="int64"), empty, empty
    word_of_token, words, spaces = batch_words(docs)
    # Each distinct word's code points followed by a space: a token with a trailing space reads one more.
    word_lengths = numpy.fromiter(map(len, words), dtype="int64", count=len(words))
    word_starts = numpy.cumsum(word_lengths + 1) - (word_lengths + 1)
    spelled = numpy.frombuffer((" ".join(words) + " ").encode("utf-32-le"), dtype=numpy.uint32)
    lengths = word_lengths[word_of_token]
    widths = lengths + spaces
    starts, total = numpy.cumsum(widths) - widths, int(widths.sum())
    ends = starts + lengths
    codepoints = spelled[numpy.repeat(word_starts[word_of_token] - starts, widths) + numpy.arange(total)]
    # Each doc's characters: from its first token's start to the next doc's.
    token_offsets = numpy.cumsum([0] + [len(doc) for doc in docs])
    char_offsets = numpy.append(starts, total)[token_offsets]
    text_lengths = numpy.diff(char_offsets)
    if not by_sentence:
        return codepoints, text_lengths, starts, ends
    # A sequence from each sentence's first character to the next sequence's, and an empty one for an
    # empty doc, ordered by token (an empty doc's before the next doc's first token).
    first_tokens = numpy.flatnonzero(sentence_start_flags(docs))
    empty_docs = numpy.flatnonzero(numpy.diff(token_offsets) == 0)
    order = numpy.argsort(numpy.concatenate([2 * first_tokens + 1, 2 * token_offsets[empty_docs]]), kind="stable")
    firsts = numpy.concatenate([starts[first_tokens], char_offsets[empty_docs]])[order]
    return codepoints, numpy.diff(numpy.append(firsts, total)).astype("int64"), starts, ends


def _word_texts(docs: List[Doc], orths: numpy.ndarray) -> List[str]:
    """The texts of the ORTH ids `orths`, from the string stores of the docs (a batch may mix vocabs)."""
    stores = list({id(doc.vocab.strings): doc.vocab.strings for doc in docs}.values())
    if len(stores) == 1:
        return [stores[0][orth] for orth in orths.tolist()]
    return [next(store[orth] for store in stores if orth in store) for orth in orths.tolist()]


def sentence_starts(doc: Doc) -> numpy.ndarray:
    """Indices of the tokens that start a sentence: always 0, and every marked sentence start."""
    return numpy.flatnonzero(sentence_start_flags([doc]))


def sentence_start_flags(docs: List[Doc]) -> numpy.ndarray:
    """A flag per token of the batch, flat: whether it starts a sentence (each doc's first token and
    every marked start; a doc without sentence starts marks none but its first)."""
    if not any(len(doc) for doc in docs):
        return numpy.zeros((0,), dtype=bool)
    flags = numpy.concatenate([doc.to_array("SENT_START").reshape(-1) for doc in docs]) == 1
    lengths = numpy.fromiter(map(len, docs), dtype="int64", count=len(docs))
    flags[(numpy.cumsum(lengths) - lengths)[lengths > 0]] = True
    return flags


def sentence_lengths(docs: List[Doc]) -> numpy.ndarray:
    """Tokens per sentence of the batch's docs, flat and in order (none for an empty doc)."""
    starts = numpy.flatnonzero(sentence_start_flags(docs))
    return numpy.diff(numpy.append(starts, sum(len(doc) for doc in docs))).astype("int64")


@registry.layers("spacy_fofe.PositionCodes.v1")
def PositionCodes(
    tok2vec: Model[List[Doc], List[Floats2d]],
    word_codes: Model[List[Floats2d], Codes],
    char_codes: Optional[Model[List[Doc], Codes]] = None,
    stop_at_sentences: bool = False,
) -> Model[List[Doc], Codes]:
    """Run the tok2vec and the word codes on its output, and the character codes on the docs.

    stop_at_sentences: the word codes run over each sentence instead of each doc (give the
    character codes the same setting)."""
    layers = [tok2vec, word_codes] + ([char_codes] if char_codes is not None else [])
    refs = {"tok2vec": tok2vec, "word_codes": word_codes, "char_codes": char_codes}
    return Model("position_codes", _position_forward, layers=layers, refs=refs,
                 attrs={"stop_at_sentences": stop_at_sentences, READS: [ORTH, SPACY]})


def _position_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Codes, Callable]:
    tokvecs, backprop_tok2vec = model.get_ref("tok2vec")(docs, is_train)
    if model.attrs["stop_at_sentences"]:
        # The batch's token vectors as its sentences: one flat array cut by the sentences' lengths.
        ops = model.ops
        sentences = Ragged(ops.flatten(list(tokvecs)), ops.asarray1i(sentence_lengths(docs)))
        codes, backprop_sentences = model.get_ref("word_codes")(sentences, is_train)
        codes.lengths = doc_lengths = numpy.asarray([len(doc) for doc in docs], dtype="int64")

        def backprop_words(d_arrays: Gradients) -> List[Floats2d]:
            return ops.unflatten(backprop_sentences(d_arrays).dataXd, ops.asarray1i(doc_lengths))
    else:
        codes, backprop_words = model.get_ref("word_codes")(tokvecs, is_train)
    backprop_chars = None
    if model.has_ref("char_codes") is True:
        chars, backprop_chars = model.get_ref("char_codes")(docs, is_train)
        codes.arrays.update(chars.arrays)
        codes.char_bounds, codes.char_alpha = chars.char_bounds, chars.char_alpha
        codes.char_alpha_learned = chars.char_alpha_learned

    def backprop(d_arrays: Gradients) -> List[Doc]:
        backprop_tok2vec(backprop_words(d_arrays))
        if backprop_chars is not None:
            backprop_chars(d_arrays)
        return []

    return codes, backprop
