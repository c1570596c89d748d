"""Distillation: train fofe_ner on a trained teacher's fragment probabilities as well as the gold.

An ensemble (`spacy fofe ensemble`) or a fofe_ner over a transformer is more accurate than one
fast model, but costs its members' or the transformer's time on every document. Trained with
such a pipeline as its teacher (`[initialize.components.fofe_ner] teacher = "path"`, or a list
of paths, whose mean is the teacher), a fast model learns, for each training fragment, a mix of
the gold label and the teacher's probabilities: how likely each label is, which a one-hot gold
label does not say. The teacher runs only in training; the trained pipeline neither needs nor
contains it.

The teacher scores each training doc once, every fragment of it, and keeps the table: training
sees each doc in many epochs, and a teacher (an ensemble, a transformer) costs more than the
student, so scoring it again every step would make training several times slower. The tables
take len(doc) x max_length x (labels + 1) floats per doc, up to CACHE_BYTES in all; docs beyond
that are scored afresh each time they come.

A teacher trained on one doc per sentence (a transformer's windows then never crossed a sentence)
can teach a student that reads whole documents: with `sentences`, it scores each sentence of a
doc as a doc of its own, and a fragment across a sentence start gets NONE.
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.tokens import Doc
from spacy.vocab import Vocab
from thinc.api import to_numpy
from thinc.types import Floats2d

from ..features.vectors import same_vectors
from ..ml.fragments import enumerate_fragments, flat_bounds
from ..ml.position_codes import sentence_starts
from ..pipeline.loading import load_pipeline

CACHE_BYTES = 2 * 1024 ** 3  # the teacher's tables kept for later epochs: GermEval's training set takes 0.2 GB


class Teacher:
    """Trained pipelines' fofe_ner, scoring fragments for a student with the given labels.

    path: the teacher pipeline (a directory or an installed package name), or a list of them: the
        teacher is then the mean of their probabilities, as an ensemble's are, for pipelines that
        `spacy fofe ensemble` cannot join (e.g. fofe_ner over transformers, each read by a listener).
    component: the name of each teacher's fofe_ner component.
    labels: the student's labels; each teacher must know each of them. The probability of a
        label only a teacher has goes to the student's NONE.
    vocab: the student's vocab; a teacher with word vectors needs the same vectors, since it
        reads them from the student's docs.
    weight: the teacher's share of each fragment's target (soft_targets).
    max_length: the longest fragment the student asks about (its max_length); the shortest of
        the teachers' own when None.
    cache_bytes: how many bytes of tables to keep for docs seen again (the module docstring).
    sentences: score each sentence of a doc (its sentence starts) as a doc of its own (the module
        docstring).
    """

    def __init__(self, path: Union[str, Path, Sequence[Union[str, Path]]], component: str, labels: Sequence[str],
                 vocab: Vocab, weight: float = 0.5, max_length: Optional[int] = None,
                 cache_bytes: int = CACHE_BYTES, sentences: bool = False):
        paths = [path] if isinstance(path, (str, Path)) else list(path)
        if not paths:
            raise ValueError("the teacher is an empty list of pipelines: give at least one path")
        self.members = [_TeacherPipeline(one, component, labels, vocab) for one in paths]
        self.weight = weight
        self.n_columns = len(labels) + 1  # NONE, then the student's labels
        self.max_length = min(m.max_length for m in self.members) if max_length is None else max_length
        self.cache_bytes = cache_bytes
        self.sentences = sentences
        self._tables: Dict[Tuple[str, bytes], numpy.ndarray] = {}
        self._cached_bytes = 0

    def probabilities(self, docs: List[Doc], fragments: numpy.ndarray) -> numpy.ndarray:
        """The teacher's probability of NONE and of each student label, a row per fragment
        ((doc index, start, end) rows of at most max_length tokens)."""
        lengths = fragments[:, 2] - fragments[:, 1]
        if len(fragments) and (lengths.min() < 1 or lengths.max() > self.max_length):
            raise ValueError(f"the teacher scores fragments of 1 to {self.max_length} tokens, "
                             f"asked for {int(lengths.min())} to {int(lengths.max())}")
        keys = [(doc.text, doc.to_array("IDX").tobytes()) for doc in docs]
        tables = {key: self._tables[key] for key in keys if key in self._tables}
        missing = {key: doc for key, doc in zip(keys, docs) if key not in tables}
        if missing:
            for key, table in zip(missing, self._score_whole(list(missing.values()))):
                tables[key] = table
                if self._cached_bytes + table.nbytes <= self.cache_bytes:
                    self._tables[key] = table
                    self._cached_bytes += table.nbytes
        if not keys:
            return numpy.zeros((0, self.n_columns), dtype="float32")
        first, _ = flat_bounds(fragments, [len(doc) for doc in docs])
        return numpy.concatenate([tables[key] for key in keys])[first, lengths - 1]

    def _score_whole(self, docs: List[Doc]) -> List[numpy.ndarray]:
        """Per doc, a (len(doc), max_length, columns) table: row [start, length - 1] holds the
        probabilities of the fragment start..start + length (NONE past the end of the doc, or of
        the sentence when each sentence is scored alone)."""
        scored = docs
        if self.sentences:
            scored = []
            for doc in docs:
                starts = sentence_starts(doc).tolist()
                scored += [doc[start:end].as_doc() for start, end in zip(starts, starts[1:] + [len(doc)])]
        lengths = [len(doc) for doc in scored]
        table = numpy.zeros((sum(lengths), self.max_length, self.n_columns), dtype="float32")
        table[..., 0] = 1.0
        if scored:
            fragments = enumerate_fragments(lengths, self.max_length)
            first, end = flat_bounds(fragments, lengths)
            table[first, end - first - 1] = self._score(scored, fragments)
        # A doc's sentences are its tokens in order, so the rows split by doc either way.
        return numpy.split(table, numpy.cumsum([len(doc) for doc in docs])[:-1])

    def _score(self, docs: List[Doc], fragments: numpy.ndarray) -> numpy.ndarray:
        """The teachers run on these fragments: a row per fragment, in the student's columns."""
        probs = self.members[0].score(docs, fragments)
        for member in self.members[1:]:
            probs += member.score(docs, fragments)
        return probs / len(self.members)


class _TeacherPipeline:
    """One teacher pipeline: its fofe_ner, the components before it, and its student columns."""

    def __init__(self, path: Union[str, Path], component: str, labels: Sequence[str], vocab: Vocab):
        try:
            nlp, pipe = load_pipeline(path, component)
        except ValueError as err:
            raise ValueError(f"the teacher: {err}") from err
        missing = [label for label in labels if label not in pipe.labels]
        if missing:
            raise ValueError(f"the teacher {path} does not predict the labels {missing}; it has {list(pipe.labels)}")
        if nlp.vocab.vectors.size and not same_vectors(nlp.vocab.vectors, vocab.vectors):
            raise ValueError(f"the teacher {path} has word vectors that the student's pipeline lacks or has "
                             "other ones: the teacher reads them from the student's docs, so initialize the "
                             "student with the same vectors ([initialize] vectors)")
        self.model = pipe.model
        # The components before the teacher's fofe_ner (a tok2vec or transformer its listener reads).
        self.upstream = [proc for _, proc in nlp.pipeline[:nlp.pipe_names.index(component)]]
        self.columns = numpy.asarray([0] + [pipe.labels.index(label) + 1 for label in labels])
        self.max_length = pipe.cfg["max_length"]

    def score(self, docs: List[Doc], fragments: numpy.ndarray) -> numpy.ndarray:
        """This pipeline run on these fragments: a row per fragment, in the student's columns."""
        if self.upstream:
            docs = [doc.copy() for doc in docs]  # the teacher's annotations stay off the student's docs
            for proc in self.upstream:
                docs = list(proc.pipe(docs))
        scores = to_numpy(self.model.predict((docs, fragments)))
        probs = scores[:, self.columns]
        probs[:, 0] += numpy.clip(1.0 - probs.sum(axis=1), 0.0, None)  # labels the student lacks
        return probs


def soft_targets(labels: numpy.ndarray, n_columns: int, teacher_probs=None, teacher_weight: float = 0.0) -> Floats2d:
    """One-hot rows of `labels`, mixed with the teacher's rows at `teacher_weight` when given."""
    truth = numpy.zeros((len(labels), n_columns), dtype="float32")
    truth[numpy.arange(len(labels)), labels] = 1.0
    if teacher_probs is not None:
        truth = (1.0 - teacher_weight) * truth + teacher_weight * teacher_probs.astype("float32")
    return truth

