"""Distillation: train fofe_ner on a trained teacher's fragment probabilities as well as the gold.

An ensemble (`spacy fofe ensemble`) or a fofe_ner over a transformer is more accurate than one
fast model, but costs its members' or the transformer's time on every document. Trained with
such a pipeline as its teacher (`[initialize.components.fofe_ner] teacher = "path"`), a fast
model learns, for each training fragment, a mix of the gold label and the teacher's
probabilities: how likely each label is, which a one-hot gold label does not say. The teacher
runs only in training; the trained pipeline neither needs nor contains it.
"""

from pathlib import Path
from typing import List, Sequence, Union

import numpy
import spacy
from spacy.tokens import Doc
from spacy.vocab import Vocab
from thinc.api import to_numpy
from thinc.types import Floats2d

from .model import ENSEMBLE
from .vectors import same_vectors


class Teacher:
    """A trained pipeline's fofe_ner, scoring fragments for a student with the given labels.

    path: the teacher pipeline (a directory or an installed package name).
    component: the name of the teacher's fofe_ner component.
    labels: the student's labels; the teacher must know each of them. The probability of a
        label only the teacher has goes to the student's NONE.
    vocab: the student's vocab; a teacher with word vectors needs the same vectors, since it
        reads them from the student's docs.
    weight: the teacher's share of each fragment's target (soft_targets).
    """

    def __init__(self, path: Union[str, Path], component: str, labels: Sequence[str], vocab: Vocab,
                 weight: float = 0.5):
        nlp = spacy.load(path)
        if component not in nlp.pipe_names:
            raise ValueError(f"the teacher {path} has no component {component!r}; its components: {nlp.pipe_names}")
        pipe = nlp.get_pipe(component)
        if pipe.model.name not in ("fofe_ner", ENSEMBLE):
            raise ValueError(f"the teacher {path}'s {component!r} is not a fofe_ner component")
        missing = [label for label in labels if label not in pipe.labels]
        if missing:
            raise ValueError(f"the teacher {path} does not predict the labels {missing}; it has {list(pipe.labels)}")
        if nlp.vocab.vectors.size and not same_vectors(nlp.vocab.vectors, vocab.vectors):
            raise ValueError(f"the teacher {path} has word vectors that the student's pipeline lacks or has "
                             "other ones: the teacher reads them from the student's docs, so initialize the "
                             "student with the same vectors ([initialize] vectors)")
        self.model = pipe.model
        self.weight = weight
        # The components before the teacher's fofe_ner (a tok2vec or transformer its listener reads).
        self.upstream = [proc for _, proc in nlp.pipeline[:nlp.pipe_names.index(component)]]
        self.columns = numpy.asarray([0] + [pipe.labels.index(label) + 1 for label in labels])

    def probabilities(self, docs: List[Doc], fragments: numpy.ndarray) -> numpy.ndarray:
        """The teacher's probability of NONE and of each student label, a row per fragment."""
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

