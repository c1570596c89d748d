"""The fofe_ner pipeline component: FOFE local-detection NER writing (nested) spans.

Scores every fragment of up to `max_length` tokens, decodes them (nested when the data
is) into doc.spans[spans_key], and writes the outer level to doc.ents. See README.md.
"""

import dataclasses
import warnings
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy
import srsly
from spacy import util
from spacy.attrs import IS_SPACE
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import filter_spans
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer, set_dropout_rate
from thinc.types import Floats2d
from wasabi import msg

from ..ml.fragments import edge_flagged, enumerate_fragments, fragment_targets, sample_fragments, within_sentences
from ..ml.model import (
    context_tokens,
    has_fragment_filter,
    is_v1_layout,
    members,
    read_v1_weights,
    reads_listener,
    stops_at_sentences,
)
from ..ml.position_codes import batch_words, sentence_start_flags
from ..training.averaging import start_from
from ..training.distill import Teacher, soft_targets
from .decoding import Candidate, CandidateTable, Level, decode_batch, levels_from
from .gold import GoldStats, aligned_gold, gold_spans
from .settings import NAMES as SETTING_NAMES
from .settings import Cfg, Settings

DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_fofe.FOFENER.v3"
hidden_width = 128
depth = 2
dropout = 0.2
word_alpha = 0.5
char_alpha = 0.8
char_width = 32
n_char_buckets = 2048

# spaCy's MultiHashEmbed, each distinct row of a batch embedded once (word_dropout 0: none).
[model.tok2vec]
@architectures = "spacy_fofe.WordDropoutHashEmbed.v1"
width = 96
attrs = ["NORM", "PREFIX", "SUFFIX", "SHAPE"]
rows = [5000, 1000, 2500, 2500]
include_static_vectors = false
word_dropout = 0.0
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]
# With max_length null, initialize picks the smallest n whose fragments cover this share of the
# training spans, at most LONGEST tokens (the cost of scoring grows with n).
COVERAGE = 0.995
LONGEST = 16
UNSEEN_LENGTH = 7  # n when the training data has no spans (labels given, a teacher's targets alone)
# Longer docs are scored in windows of this many tokens (plus context), so memory stays bounded.
WINDOW_TOKENS = 8192
# On a CPU, a batch's docs are scored in runs of about this many tokens: a pass holds a few kB of
# position codes per token, which for nlp.pipe's 1,000 docs would be the process's peak memory, while
# a run's arrays stay near the cache. A GPU scores the batch in one pass (each array call is a launch).
CPU_RUN_TOKENS = 4096
# What a window doc copies from its doc besides the words: the token attributes a tok2vec may read
# that are not the lexeme's own (those come with the words).
WINDOW_ATTRS = ["NORM", "LEMMA", "TAG", "POS", "MORPH", "SENT_START"]


@Language.factory(
    "fofe_ner",
    assigns=["doc.spans", "doc.ents"],
    default_config={"model": DEFAULT_MODEL, **dataclasses.asdict(Settings()),
                    "scorer": {"@scorers": "spacy_fofe.fofe_ner_scorer.v1"}},
    default_score_weights={"spans_sc_f": 1.0, "spans_sc_p": 0.0, "spans_sc_r": 0.0,
                           "ents_f": 0.0, "ents_p": 0.0, "ents_r": 0.0},
)
def make_fofe_ner(
    nlp: Language,
    name: str,
    model: Model,
    spans_key: str,
    max_length: Optional[int],
    threshold: float,
    label_thresholds: Dict[str, float],
    decoding: str,
    nested: Optional[bool],
    nested_decoding: str,
    nested_threshold: Optional[float],
    max_depth: int,
    overlap_rate: float,
    disjoint_rate: float,
    ents: str,
    learn_rate_scale: float,
    consistency: float,
    scorer: Optional[Callable],
) -> "FOFENER":
    # spaCy reads the settings' names and types from this signature; Settings holds the rest.
    settings = {key: value for key, value in locals().items() if key in SETTING_NAMES}
    return FOFENER(nlp.vocab, model, name, scorer=scorer, **settings)


class FOFENER(TrainablePipe):
    """Find (possibly nested) named entities by classifying every fragment of up to n tokens.

    vocab: the shared vocabulary.
    model: a Model[(List[Doc], fragments), Floats2d], e.g. spacy_fofe.FOFENER.v3.
    settings: the fields of spacy_fofe.pipeline.settings.Settings (spans_key, max_length, thresholds,
        decoding, nesting, NONE sampling rates, ents), kept in self.cfg.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "fofe_ner",
        *,
        scorer: Optional[Callable] = None,
        **settings: Any,
    ) -> None:
        """settings: any of Settings' fields (spans_key, max_length, threshold, ...)."""
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg: Cfg = Cfg(name, **settings)
        self._warned_labels: set = set()
        # Set by initialize(teacher=...) for training only; never saved.
        self._teacher: Optional[Teacher] = None

    @property
    def key(self) -> str:
        return self.cfg["spans_key"]

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    def add_label(self, label: str) -> int:
        if not isinstance(label, str):
            raise ValueError(f"[{self.name}] labels must be strings, got {label!r}")
        if label in self.labels:
            return 0
        if self._is_initialized():
            raise ValueError(f"[{self.name}] cannot add label {label!r} after initialize; "
                             "give all labels to initialize (labels=...) instead")
        self.cfg["labels"].append(label)
        self.vocab.strings.add(label)
        return 1

    # ----- prediction -------------------------------------------------------------------

    def predict(self, docs: Iterable[Doc]) -> Tuple[numpy.ndarray, Floats2d]:
        """Probabilities (NONE first, then each label) of every fragment of up to n tokens.

        A doc longer than WINDOW_TOKENS is scored window by window, each with the context
        the model reads around it (`model.context_tokens`), so the network's memory is a
        window's (the fragments and their scores are the doc's) and the scores are those of
        the whole doc (but for a USE sentence vector and a DocumentMemory: the window's); on a
        CPU, the docs are scored in runs of about CPU_RUN_TOKENS tokens, for the same reason.
        Neither with a listener tok2vec: the upstream component's output belongs to the whole batch.
        """
        self._require_initialized()
        docs = list(docs)
        fragments = self._fragments(docs)
        if len(fragments) == 0:
            return fragments, numpy.zeros((0, len(self.labels) + 1), dtype="float32")
        margin = self._window_margin()
        if margin is None:
            return fragments, self.model.ops.to_numpy(self.model.predict((docs, fragments)))
        runs = self._runs(docs)
        if len(runs) == 1:
            return fragments, self._scores(docs, fragments, margin)
        scores = numpy.zeros((len(fragments), len(self.labels) + 1), dtype="float32")
        doc_rows = numpy.searchsorted(fragments[:, 0], runs)
        for first, last, lo, hi in zip(runs, runs[1:], doc_rows, doc_rows[1:]):
            if hi > lo:
                scores[lo:hi] = self._scores(docs[first:last], fragments[lo:hi] - numpy.asarray([first, 0, 0]), margin)
        return fragments, scores

    def _runs(self, docs: List[Doc]) -> List[int]:
        """The first doc of each run of docs scored in one pass, and len(docs): on a CPU, a run ends
        where its docs pass CPU_RUN_TOKENS tokens; elsewhere, the batch is one run."""
        if self.model.ops.device_type != "cpu":
            return [0, len(docs)]
        lengths = numpy.fromiter(map(len, docs), dtype="int64", count=len(docs))
        run_of = (numpy.cumsum(lengths) - lengths) // CPU_RUN_TOKENS  # by where each doc starts
        return [0] + (numpy.flatnonzero(numpy.diff(run_of)) + 1).tolist() + [len(docs)]

    def _scores(self, docs: List[Doc], fragments: numpy.ndarray, margin: int) -> numpy.ndarray:
        """`predict`'s scores of `fragments` (of `docs`): in one pass, or a long doc window by window."""
        if all(len(doc) <= WINDOW_TOKENS for doc in docs):
            return self.model.ops.to_numpy(self.model.predict((docs, fragments)))
        scores = numpy.zeros((len(fragments), len(self.labels) + 1), dtype="float32")
        doc_rows = numpy.searchsorted(fragments[:, 0], numpy.arange(len(docs) + 1))
        short = [i for i, doc in enumerate(docs) if len(doc) <= WINDOW_TOKENS]
        if short:
            rows = numpy.concatenate([numpy.arange(doc_rows[i], doc_rows[i + 1]) for i in short])
            local = fragments[rows]
            local[:, 0] = numpy.searchsorted(short, local[:, 0])
            scores[rows] = self.model.ops.to_numpy(self.model.predict(([docs[i] for i in short], local)))
        for i, doc in enumerate(docs):
            if len(doc) <= WINDOW_TOKENS:
                continue
            starts = fragments[doc_rows[i]:doc_rows[i + 1], 1]
            token_attrs = doc.to_array(WINDOW_ATTRS)  # once per doc: Span.as_doc would redo it per window
            words, spaces = doc_words_and_spaces(doc)
            for begin in range(0, len(doc), WINDOW_TOKENS):
                end = min(begin + WINDOW_TOKENS, len(doc))
                first, last = max(0, begin - margin), min(len(doc), end + margin)
                lo, hi = doc_rows[i] + numpy.searchsorted(starts, [begin, end])
                local = fragments[lo:hi] - numpy.asarray([i, first, first])
                window = _window_doc(doc, words[first:last], spaces[first:last], token_attrs[first:last])
                scores[lo:hi] = self.model.ops.to_numpy(self.model.predict(([window], local)))
        return scores

    def _fragments(self, docs: List[Doc]) -> numpy.ndarray:
        """Every fragment of up to max_length tokens; when the model's codes stop at sentence
        starts, none that crosses one (an entity does not run across sentences)."""
        lengths = [len(doc) for doc in docs]
        fragments = enumerate_fragments(lengths, self.cfg["max_length"])
        if not stops_at_sentences(self.model):
            return fragments
        return within_sentences(fragments, lengths, sentence_start_flags(docs))

    def _window_margin(self) -> Optional[int]:
        """Tokens of context each side of a window, or None when docs must be scored whole."""
        if any("groups" not in member.attrs for member in members(self.model)) or \
                reads_listener(self.model):
            return None
        return context_tokens(self.model) + self.cfg["max_length"]

    def set_annotations(self, docs: Iterable[Doc], predictions: Tuple[numpy.ndarray, Floats2d]) -> None:
        """Decode each doc's candidates into doc.spans[spans_key] (and the outer level into doc.ents)."""
        docs = list(docs)
        fragments, scores = predictions
        levels = self.levels()
        for doc, decoded in zip(docs, decode_batch(self._candidate_table(docs, fragments, scores, levels), levels)):
            spans = [Span(doc, c.start, c.end, label=c.label) for c, _ in decoded]
            doc.spans[self.key] = SpanGroup(
                doc, name=self.key, spans=spans,
                attrs={"scores": [c.score for c, _ in decoded], "depths": [d for _, d in decoded]},
            )
            if self.cfg["ents"] != "off":
                outer = [span for span, (_, depth) in zip(spans, decoded) if depth == 0]
                self._set_ents(doc, outer)

    def _set_ents(self, doc: Doc, outer: List[Span]) -> None:
        if self.cfg["ents"] == "keep" and doc.ents:
            existing = list(doc.ents)
            taken = {i for ent in existing for i in range(ent.start, ent.end)}
            outer = existing + [s for s in outer if not any(i in taken for i in range(s.start, s.end))]
        doc.ents = filter_spans(outer)

    def levels(self) -> List[Level]:
        """The decoding settings of each nesting level, read from cfg (so edits take effect)."""
        return levels_from(self.cfg)

    def candidates(
        self, docs: List[Doc], fragments: numpy.ndarray, scores: Floats2d, levels: List[Level]
    ) -> List[List[Candidate]]:
        """Per doc, the fragments whose best label (NONE aside) could pass some level's threshold,
        except those that start or end on a whitespace token (as spaCy's ner, no entity does)."""
        return self._candidate_table(docs, fragments, scores, levels).per_doc()

    def _candidate_table(
        self, docs: List[Doc], fragments: numpy.ndarray, scores: Floats2d, levels: List[Level]
    ) -> CandidateTable:
        """`candidates` as arrays, selected by array work."""
        if len(fragments) == 0:
            return CandidateTable.empty(len(docs), self.labels)
        scores = numpy.asarray(scores)
        best = scores[:, 1:].argmax(axis=1)
        best_score = scores[numpy.arange(len(scores)), best + 1]
        lowest = min([lv.threshold for lv in levels] + [t for lv in levels for t in lv.label_thresholds.values()])
        space = numpy.concatenate([doc.to_array(IS_SPACE).reshape(-1) for doc in docs])
        on_space = edge_flagged(fragments, [len(doc) for doc in docs], space)
        keep = numpy.flatnonzero((best_score >= lowest) & ~on_space)
        return CandidateTable(fragments[keep], best[keep], best_score[keep], len(docs), self.labels)

    # ----- serialization ----------------------------------------------------------------

    def from_disk(self, path, *, exclude=tuple()) -> "FOFENER":
        where = f"saved in {path}"
        readers = {
            "cfg": lambda p: self._read_cfg(Path(p).read_bytes(), where),
            "vocab": lambda p: self.vocab.from_disk(p, exclude=exclude),
            "model": lambda p: self._read_model(self._unpack(Path(p).read_bytes(), where), where),
        }
        util.from_disk(path, readers, exclude)
        return self

    def from_bytes(self, bytes_data: bytes, *, exclude=tuple()) -> "FOFENER":
        where = "from bytes"
        msg = self._unpack(bytes_data, where)
        readers = {
            "cfg": lambda b: self._read_cfg(b, where),
            "vocab": lambda b: self.vocab.from_bytes(b, exclude=exclude),
            "model": lambda b: self._read_model(self._unpack(b, where), where),
        }
        util.from_dict(msg, readers, exclude)
        return self

    def _read_cfg(self, data: bytes, where: str) -> None:
        try:
            cfg = srsly.json_loads(data)
        except ValueError as err:  # ujson's and UnicodeDecodeError, both ValueErrors
            raise self._unreadable(where, err) from err
        if not isinstance(cfg, dict):
            raise self._unreadable(where, TypeError(f"cfg is a {type(cfg).__name__}, not a mapping"))
        self.cfg.update(cfg)

    def _read_model(self, msg: dict, where: str) -> None:
        """Read the model's weights from its unpacked message (the file's bytes are not held meanwhile: a
        load then holds one copy of the weights, not two); those of a FOFENER.v1 model go to the layers
        that hold them now."""
        read = read_v1_weights if is_v1_layout(msg) else lambda model, msg: model.from_dict(msg)
        try:
            read(self.model, msg)
        except (ValueError, KeyError, IndexError, TypeError) as err:  # what thinc raises on a foreign layout
            raise self._unreadable(where, err) from err

    def _unpack(self, data: bytes, where: str) -> dict:
        try:
            msg = srsly.msgpack_loads(data)
        except ValueError as err:  # msgpack's errors on truncated or foreign data
            raise self._unreadable(where, err) from err
        if not isinstance(msg, dict):
            raise self._unreadable(where, TypeError(f"the data holds a {type(msg).__name__}, not a mapping"))
        return msg

    def _unreadable(self, where: str, err: Exception) -> ValueError:
        return ValueError(f"[{self.name}] cannot read the component {where}: the data is truncated, corrupted "
                          f"or from another component ({type(err).__name__}: {err}). Restore or retrain it.")

    # ----- training ---------------------------------------------------------------------

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Any] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Learn from a batch: every gold fragment plus NONE fragments sampled at the cfg rates."""
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "FOFENER.update")
        self._require_initialized()
        docs = [eg.predicted for eg in examples]
        fragments = self._fragments(docs)
        labels, kinds = self._targets(examples, fragments)
        # NumPy's global generator: spaCy's fix_random_seed ([system] seed) seeds it.
        keep = sample_fragments(kinds, self.cfg["overlap_rate"], self.cfg["disjoint_rate"], numpy.random)
        if len(keep) == 0:
            return losses
        set_dropout_rate(self.model, drop)
        inputs = (docs, fragments[keep])
        if has_fragment_filter(self.model):
            inputs += (labels[keep] > 0,)  # the filter learns the gold fragments' boundaries
        scores, backprop = self.model.begin_update(inputs)
        if self._teacher is None:
            truth = soft_targets(labels[keep], scores.shape[1])
        else:
            teacher_probs = self._teacher.probabilities(docs, fragments[keep])
            truth = soft_targets(labels[keep], scores.shape[1], teacher_probs, self._teacher.weight)
        if self.cfg["consistency"] > 0:
            loss = self._update_consistent(docs, fragments[keep], scores, backprop, truth)
        else:
            loss, d_scores = self._loss(scores, truth)
            backprop(d_scores)
        if sgd is not None:
            self.finish_update(sgd)
        losses[self.name] += loss
        return losses

    def _update_consistent(self, docs: List[Doc], fragments: numpy.ndarray, scores: Floats2d,
                           backprop: Callable, truth: numpy.ndarray) -> float:
        """Backpropagate the targets through two passes (R-Drop): each pass also learns the other's
        probabilities at weight cfg["consistency"], taken as fixed targets."""
        weight = self.cfg["consistency"]
        if reads_listener(self.model):
            # The upstream component would get (and apply) a gradient per pass.
            raise ValueError(f"[{self.name}] consistency needs fofe_ner's own tok2vec, not a listener of a shared "
                             "tok2vec or transformer: set consistency = 0")
        scores2, backprop2 = self.model.begin_update((docs, fragments))
        loss1, d1 = self._loss(scores, truth)
        loss2, d2 = self._loss(scores2, truth)
        n = max(scores.shape[0], 1)
        ops = self.model.ops
        gap = scores - scores2
        backprop(d1 + weight * gap / n)
        backprop2(d2 - weight * gap / n)
        kl = float((gap * (ops.xp.log(ops.xp.maximum(scores, 1e-12)) -
                           ops.xp.log(ops.xp.maximum(scores2, 1e-12)))).sum() / n)
        return (loss1 + loss2) / 2 + weight * kl / 2

    def finish_update(self, sgd: Optimizer) -> None:
        """Update the weights with their gradients, at learn_rate_scale times the optimizer's rate
        (weights inside a shim, e.g. a PyTorch layer, keep the optimizer's rate)."""
        for node in self.model.walk():
            for shim in node.shims:
                shim.finish_update(sgd)
        for node in self.model.walk():
            for name in node.param_names:
                if node.has_grad(name):
                    param, grad = sgd((node.id, name), node.get_param(name), node.get_grad(name),
                                      lr_scale=self.cfg["learn_rate_scale"])
                    node.set_param(name, param)

    def get_loss(self, examples: Iterable[Example], predictions: Tuple[numpy.ndarray, Floats2d]):
        """Cross-entropy of the given fragments' probabilities against their gold labels."""
        examples = list(examples)
        validate_examples(examples, "FOFENER.get_loss")
        fragments, scores = predictions
        labels, _ = self._targets(examples, fragments)
        return self._loss(scores, soft_targets(labels, scores.shape[1]))

    def _loss(self, scores: Floats2d, truth: numpy.ndarray) -> Tuple[float, Floats2d]:
        """Cross-entropy of the probabilities `scores` against the target rows `truth` (one-hot
        gold labels, or mixed with a teacher's probabilities), and its gradient."""
        ops = self.model.ops
        n = scores.shape[0]
        truth = ops.asarray2f(truth)
        loss = float(-(truth * ops.xp.log(ops.xp.maximum(scores, 1e-12))).sum() / max(n, 1))
        if not numpy.isfinite(loss) or not bool(ops.xp.isfinite(scores).all()):
            raise ValueError(
                f"[{self.name}] the loss is not finite (NaN or inf): training has diverged. "
                "Lower the learning rate ([training.optimizer] learn_rate) or raise grad_clip."
            )
        return loss, (scores - truth) / max(n, 1)

    def _targets(self, examples: List[Example], fragments: numpy.ndarray):
        label_ids = {label: i + 1 for i, label in enumerate(self.labels)}
        gold, ignored = [], []
        for eg in examples:
            known, unknown = [], []
            for span in aligned_gold(eg, self.key):
                if span.label_ in label_ids:
                    known.append((span.start, span.end, label_ids[span.label_]))
                else:
                    unknown.append((span.start, span.end))
                    self._warn_unknown_label(span.label_)
            gold.append(known)
            ignored.append(unknown)
        return fragment_targets(fragments, gold, ignored)

    def _warn_unknown_label(self, label: str) -> None:
        if label not in self._warned_labels:
            self._warned_labels.add(label)
            warnings.warn(f"[{self.name}] gold label {label!r} is not among the component's labels "
                          f"{list(self.labels)}; its spans are left out of training (neither entity nor NONE).",
                          stacklevel=2)

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[List[str]] = None,
        teacher: Optional[Union[str, Path, List[Union[str, Path]]]] = None,
        teacher_weight: float = 0.5,
        teacher_sentences: bool = False,
        init_weights: Optional[Union[str, Path]] = None,
    ) -> None:
        """Set labels (given, or read from the gold spans), check the data, and build the model.

        teacher: a trained pipeline (path or package) whose fofe_ner of the same name is trained
            towards in update, besides the gold, or a list of them (their mean): see
            spacy_fofe/training/distill.py. Used in training only.
        teacher_weight: the teacher's share of each fragment's target (the gold label has the rest).
        teacher_sentences: the teacher scores each sentence of a training doc alone, as it was
            trained (a teacher trained on one doc per sentence, a student on whole documents).
        init_weights: a trained pipeline (path or package) whose fofe_ner weights training starts
            from instead of random ones, with the same labels and architecture: a branch, for
            `spacy fofe average` (see spacy_fofe/training/averaging.py).
        """
        validate_get_examples(get_examples, "FOFENER.initialize")
        stats = GoldStats()
        for eg in get_examples():
            stats.add(eg, aligned_gold(eg, self.key), gold_spans(eg.reference, self.key))
        if labels is None:
            labels = sorted(stats.labels)
        for label in labels:
            self.add_label(label)
        if not self.labels:
            raise ValueError(
                f"[{self.name}] no labels: the training data has no gold spans under "
                f"doc.spans[{self.key!r}] or doc.ents. Check spans_key, or pass labels to initialize "
                f"([initialize.components.{self.name}.labels])."
            )
        if not 0.0 < teacher_weight <= 1.0:
            raise ValueError(f"[{self.name}] teacher_weight must be in (0, 1], got {teacher_weight}")
        if self.cfg["max_length"] is None:
            self.cfg["max_length"] = stats.covering_length(COVERAGE, LONGEST)
            if self.cfg["max_length"] is not None:
                msg.info(f"[{self.name}] max_length = {self.cfg['max_length']}: fragments of up to that many tokens "
                         f"cover {100 * stats.share_within(self.cfg['max_length']):.2f}% of the "
                         f"{sum(stats.lengths.values())} training spans")
        if teacher is not None:  # with no spans to choose n from, the student asks what the teacher scores
            self._teacher = Teacher(teacher, self.name, self.labels, self.vocab, teacher_weight,
                                    max_length=self.cfg["max_length"], sentences=teacher_sentences)
            self.cfg["max_length"] = self._teacher.max_length
        if self.cfg["max_length"] is None:
            self.cfg["max_length"] = UNSEEN_LENGTH
            msg.info(f"[{self.name}] max_length = {UNSEEN_LENGTH}: the training data has no spans to choose it from")
        stats.warn(self.name, self.cfg["max_length"])
        if self.cfg["nested"] is None:
            self.cfg["nested"] = stats.nested > 0
        sample = list(islice(get_examples(), 10))
        docs = [eg.predicted for eg in sample]
        self.model.set_dim("nO", len(self.labels) + 1)
        self.model.initialize(X=(docs, enumerate_fragments([len(d) for d in docs], self.cfg["max_length"])))
        self.cfg["start"] = None if init_weights is None else start_from(self, init_weights)
        if nlp is not None:
            self._warn_if_unweighted(nlp)

    def _warn_if_unweighted(self, nlp: Language) -> None:
        """The default score weights name spans_sc_* (as spancat's do); another spans_key needs its own."""
        weights = nlp.config["training"]["score_weights"]
        if self.key != "sc" and not weights.get(f"spans_{self.key}_f"):
            warnings.warn(f"[{self.name}] spans_key is {self.key!r} but [training.score_weights] gives "
                          f"spans_{self.key}_f no weight, so spacy train cannot pick the best model by it: set "
                          f"spans_{self.key}_f = 1.0 there (and spans_sc_f = null).", stacklevel=2)

    def _is_initialized(self) -> bool:
        return all(node.has_param(name) is True for node in self.model.walk() for name in node.param_names)

    def _require_initialized(self) -> None:
        if not self.labels or not self._is_initialized():
            raise ValueError(
                f"[{self.name}] the component is not initialized: call nlp.initialize() with training "
                f"examples (spacy train does this) before using it, or load a trained pipeline."
            )


def doc_words_and_spaces(doc: Doc) -> Tuple[List[str], List[bool]]:
    """Each token's text and whether a space follows it (`batch_words`: a text per distinct word, copied to
    its tokens by numpy), not a Token object made per token."""
    word_of_token, texts, spaces = batch_words([doc])
    return numpy.asarray(texts, dtype=object)[word_of_token].tolist(), (spaces != 0).tolist()


def _window_doc(doc: Doc, words: List[str], spaces: List[bool], token_attrs: numpy.ndarray) -> Doc:
    """A window of `doc`'s tokens (their texts, spaces and rows of WINDOW_ATTRS) as a Doc."""
    window = Doc(doc.vocab, words=words, spaces=spaces)
    window.from_array(WINDOW_ATTRS, token_attrs)
    return window
