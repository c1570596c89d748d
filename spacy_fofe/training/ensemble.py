"""Ensembles: one fofe_ner model whose fragment probabilities are the mean of several models'.

Models trained alike from different seeds make partly different errors, so the mean of their
probabilities is more accurate than any one of them; the price is running every member. The
members are whole FOFENER models (each with its own tok2vec), so a model trained alone is a
member as it is: `merge_pipelines` (`spacy fofe ensemble`) joins pipelines trained apart, on one
machine or several, into one pipeline with the members' weights unchanged.
"""

from pathlib import Path
from typing import Callable, Sequence, Tuple, Union

from spacy.language import Language
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from ..features.vectors import same_vectors
from ..ml.model import ENSEMBLE, InT, reads_listener, stops_at_sentences
from ..pipeline.loading import load_pipeline

ARCHITECTURE = "spacy_fofe.FOFEEnsemble.v1"
# Component settings every member's pipeline must share: the members' output columns and fragments.
SHARED_SETTINGS = ("labels", "spans_key", "max_length")


@registry.architectures(ARCHITECTURE)
def build_fofe_ensemble(*members: Model[InT, Floats2d]) -> Model[InT, Floats2d]:
    """The mean of the members' fragment probabilities. In training each member still learns the
    targets by itself: the gradient fofe_ner passes back is (mean - targets) / rows, as for thinc's
    Softmax, and a member's own is that plus (its probabilities - mean) / rows.

    members: spacy_fofe.FOFENER models (in a config: `[...model.*.NAME]` blocks, one per member).
    """
    if not members:
        raise ValueError(f"{ARCHITECTURE}: give at least one member model")
    for member in members:
        if member.name != "fofe_ner" or not member.has_ref("codes"):
            raise ValueError(f"{ARCHITECTURE}: every member must be a spacy_fofe.FOFENER model, got {member.name!r}")
    if len({stops_at_sentences(member) for member in members}) > 1:
        raise ValueError(f"{ARCHITECTURE}: the members must agree on stop_at_sentences, since they score the "
                         "same fragments")
    return Model(ENSEMBLE, _forward, init=_init, layers=list(members), dims={"nO": None})


def _init(model: Model[InT, Floats2d], X=None, Y=None) -> None:
    if model.has_dim("nO") is not True:
        raise ValueError("fofe_ner ensemble: the number of outputs (labels + 1) must be set before initialize")
    for member in model.layers:
        member.set_dim("nO", model.get_dim("nO"), force=True)
        member.initialize(X=X)


def _forward(model: Model[InT, Floats2d], inputs: InT, is_train: bool) -> Tuple[Floats2d, Callable]:
    if not is_train:
        scores = model.layers[0].predict(inputs)
        for member in model.layers[1:]:
            scores = scores + member.predict(inputs)
        return scores / len(model.layers), _no_backprop
    outputs = [member(inputs, is_train) for member in model.layers]
    mean = sum(out for out, _ in outputs) / len(outputs)

    def backprop(d_scores: Floats2d):
        rows = max(len(d_scores), 1)
        for out, backprop_member in outputs:
            backprop_member(d_scores + (out - mean) / rows)
        return []

    return mean, backprop


def _no_backprop(d_scores):
    raise ValueError("fofe_ner ensemble: backprop called on a forward pass run with is_train=False")


def merge_pipelines(paths: Sequence[Union[str, Path]], component: str = "fofe_ner") -> Language:
    """One pipeline whose `component` is the ensemble of the given pipelines' (two or more).

    The pipelines must have been trained for the same task: the same labels, spans_key,
    max_length, language and word vectors. The first one gives everything else: the other
    components, the vocab, and the decoding settings (tune the result on dev: an ensemble's
    probabilities are better calibrated than one model's, so its best thresholds differ).
    """
    if len(paths) < 2:
        raise ValueError(f"an ensemble needs two or more pipelines, got {len(paths)}")
    pipelines = [load_pipeline(path, component)[0] for path in paths]
    for path, nlp in zip(paths, pipelines):
        _check_member(path, nlp, component)
    first, ners = pipelines[0], [nlp.get_pipe(component) for nlp in pipelines]
    check_same_task(paths, pipelines, component, "an ensemble's members")
    members = {f"member{i}": nlp.config["components"][component]["model"] for i, nlp in enumerate(pipelines)}
    settings = {key: value for key, value in first.config["components"][component].items()
                if key not in ("factory", "model")}
    merged = first.replace_pipe(component, first.get_pipe_meta(component).factory,
                                config={**settings, "model": {"@architectures": ARCHITECTURE, "*": members}})
    for member, ner in zip(merged.model.layers, ners):
        member.from_bytes(ner.model.to_bytes())
    merged.cfg.update(ners[0].cfg)
    # A [pretraining] block (spaCy's, or one of an older pipeline) reads one model's settings
    # by reference, and an ensemble has no single tok2vec to pretrain.
    first.config["pretraining"] = {}
    first.meta.pop("performance", None)  # the first member's dev scores, not the ensemble's
    return first


def check_same_task(paths: Sequence, pipelines: Sequence[Language], component: str, what: str) -> None:
    """The pipelines' components predict the same spans (SHARED_SETTINGS) and read the first
    pipeline's vocab alike (language, word vectors); `what` names them in the error."""
    first = pipelines[0].get_pipe(component)
    for path, nlp in zip(paths[1:], pipelines[1:]):
        ner = nlp.get_pipe(component)
        for setting in SHARED_SETTINGS:
            if ner.cfg[setting] != first.cfg[setting]:
                raise ValueError(f"{path}'s {component} has {setting} {ner.cfg[setting]!r} but {paths[0]}'s has "
                                 f"{first.cfg[setting]!r}: {what} must be trained for the same task")
        if nlp.lang != pipelines[0].lang or not same_vectors(nlp.vocab.vectors, pipelines[0].vocab.vectors):
            raise ValueError(f"{path} and {paths[0]} differ in language or word vectors; {what} read the first "
                             "pipeline's vocab, so they must share them")


def _check_member(path, nlp: Language, component: str) -> None:
    model = nlp.get_pipe(component).model
    if model.name == ENSEMBLE:
        raise ValueError(f"{path}'s {component} is an ensemble already: merge the pipelines it was made from")
    if reads_listener(model):
        raise ValueError(f"{path}'s {component} reads a shared tok2vec (a listener); an ensemble's members need "
                         "their own, so train each pipeline with the tok2vec inside fofe_ner")

