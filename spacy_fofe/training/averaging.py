"""Weight averaging: one fofe_ner model whose weights are the mean of several branches' weights.

Branches are trainings that start from the same trained weights (`[initialize.components.fofe_ner]
init_weights`) with different seeds, so each sees the data in another order and under other
dropout. They stay close enough that the mean of their weights is a model too (a "model soup",
Wortsman et al. 2022), which like an ensemble tends to make fewer errors than its branches do on
average, while it runs at the cost of one model. Means of networks trained from different random
weights are not models, so `average_pipelines` (`spacy fofe average`) only averages pipelines that share a start.
"""

import hashlib
from pathlib import Path
from typing import List, Sequence, Union

from spacy.language import Language

from ..ml.model import reads_listener
from ..pipeline.loading import load_pipeline
from .ensemble import check_same_task


def start_from(component, path: Union[str, Path]) -> str:
    """Give `component` (an initialized fofe_ner) the weights of the same-named component of the
    trained pipeline at `path`, and return their fingerprint (the component's cfg["start"])."""
    trained = _load(path, component.name)
    other = trained.get_pipe(component.name)
    if tuple(other.labels) != tuple(component.labels):
        raise ValueError(f"[{component.name}] init_weights: {path} was trained for the labels {list(other.labels)}, "
                         f"this training has {list(component.labels)}; a branch needs the same labels")
    _check_shapes(component.model, other.model, f"[{component.name}] init_weights: {path}")
    data = other.model.to_bytes()
    component.model.from_bytes(data)
    return hashlib.sha256(data).hexdigest()[:16]


def average_pipelines(paths: Sequence[Union[str, Path]], component: str = "fofe_ner") -> Language:
    """One pipeline whose `component` has the mean of the given pipelines' weights (two or more).

    The pipelines must be branches of one start (trained with the same init_weights) for the same
    task: the same labels, spans_key, max_length, language and word vectors. The first one gives
    everything else: the other components, the vocab and the decoding settings (tune the result
    on dev).
    """
    if len(paths) < 2:
        raise ValueError(f"averaging needs two or more pipelines, got {len(paths)}")
    pipelines = [_load(path, component) for path in paths]
    first, ners = pipelines[0], [nlp.get_pipe(component) for nlp in pipelines]
    for path, ner in zip(paths, ners):
        if ner.cfg.get("start") is None:
            raise ValueError(f"{path}'s {component} was trained from random weights, and the mean of networks trained "
                             "from different random weights is not a model: average branches, trainings started "
                             f"from one trained pipeline with [initialize.components.{component}] init_weights")
    check_same_task(paths, pipelines, component, "averaged pipelines")
    for path, ner in zip(paths[1:], ners[1:]):
        if ner.cfg["start"] != ners[0].cfg["start"]:
            raise ValueError(f"{path} and {paths[0]} started from different weights (init_weights), so their "
                             "mean is not a model: average branches of one start")
        _check_shapes(ners[0].model, ner.model, f"{path} against {paths[0]}")
    nodes = [list(ner.model.walk()) for ner in ners]
    for i, node in enumerate(nodes[0]):
        for name in node.param_names:
            if node.has_param(name):
                node.set_param(name, sum(other[i].get_param(name) for other in nodes) / len(nodes))
    first.meta.pop("performance", None)  # the first branch's dev scores, not the average's
    return first


def _load(path: Union[str, Path], component: str) -> Language:
    nlp, pipe = load_pipeline(path, component)
    model = pipe.model
    if reads_listener(model):
        raise ValueError(f"{path}'s {component} reads a shared tok2vec (a listener), whose weights are not the "
                         "component's: train the tok2vec inside fofe_ner to branch or average it")
    return nlp


def _check_shapes(model, other, where: str) -> None:
    """Both models hold the same weights by name and shape, layer by layer."""
    if _param_shapes(model) != _param_shapes(other):
        raise ValueError(f"{where}: the fofe_ner models differ in architecture (layers or widths); branches and their "
                         "average need the config of the pipeline they start from")


def _param_shapes(model) -> List[List[tuple]]:
    return [[(name, node.get_param(name).shape) for name in node.param_names if node.has_param(name)]
            for node in model.walk()]
