"""Weight averaging: branches start from a trained pipeline's weights; their average is a model of them all."""

import numpy
import pytest
import spacy
from test_cli import run, said

from spacy_fofe.training.averaging import average_pipelines

from helpers import NESTED, SMALL_MODEL, check_round_trip, fragment_scores, make_examples, small_pipeline, train


def branch(trunk, seed, steps=100, data=NESTED, model=SMALL_MODEL):
    """A pipeline trained for `steps` from the trunk's weights with its own seed (data order aside,
    the seed gives it its own dropout)."""
    nlp = small_pipeline()
    if model is not SMALL_MODEL:
        nlp.replace_pipe("fofe_ner", "fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    examples = make_examples(nlp, data)
    nlp.get_pipe("fofe_ner").initialize(lambda: examples, nlp=nlp, init_weights=trunk)
    spacy.util.fix_random_seed(seed)
    optimizer = nlp.create_optimizer()
    for _ in range(steps):
        order = numpy.random.permutation(len(examples))
        nlp.update([examples[i] for i in order[:3]], sgd=optimizer, drop=0.3)
    return nlp


@pytest.fixture(scope="module")
def trunk(tmp_path_factory):
    path = tmp_path_factory.mktemp("trunk") / "trunk"
    train(small_pipeline(), make_examples(spacy.blank("en"), NESTED), steps=200).to_disk(path)
    return path


@pytest.fixture(scope="module")
def branches(trunk, tmp_path_factory):
    folder = tmp_path_factory.mktemp("branches")
    paths = []
    for seed in (1, 2):
        nlp = branch(trunk, seed)
        nlp.meta["performance"] = {"spans_sc_f": 0.9}  # as spacy train writes its dev scores
        nlp.to_disk(folder / f"branch{seed}")
        paths.append(folder / f"branch{seed}")
    return paths


def test_a_branch_starts_from_the_trunks_weights_and_keeps_their_fingerprint(trunk, tmp_path):
    nlp = branch(trunk, seed=1, steps=0)
    numpy.testing.assert_array_equal(fragment_scores(nlp), fragment_scores(spacy.load(trunk)))
    start = nlp.get_pipe("fofe_ner").cfg["start"]
    assert isinstance(start, str) and len(start) == 16
    assert branch(trunk, seed=2, steps=0).get_pipe("fofe_ner").cfg["start"] == start
    nlp.to_disk(tmp_path / "branch")
    assert spacy.load(tmp_path / "branch").get_pipe("fofe_ner").cfg["start"] == start
    assert spacy.load(trunk).get_pipe("fofe_ner").cfg["start"] is None  # trained from random weights


def test_the_average_holds_the_mean_of_the_branches_weights_finds_the_spans_and_round_trips(branches, tmp_path):
    ners = [spacy.load(path).get_pipe("fofe_ner") for path in branches]
    averaged = average_pipelines(branches)
    params = 0
    for node, first, second in zip(averaged.get_pipe("fofe_ner").model.walk(), *(n.model.walk() for n in ners)):
        for name in node.param_names:
            if node.has_param(name):
                params += 1
                mean = (first.get_param(name) + second.get_param(name)) / 2
                numpy.testing.assert_allclose(node.get_param(name), mean, rtol=1e-6, atol=1e-7)
    assert params > 5
    assert numpy.abs(fragment_scores(spacy.load(branches[0])) - fragment_scores(spacy.load(branches[1]))).max() > 1e-3
    assert "performance" not in averaged.meta  # a branch's dev scores are not the average's
    check_round_trip(averaged, tmp_path / "average")


def test_the_average_command_writes_a_pipeline_that_loads(branches, tmp_path):
    result = run("average", tmp_path / "out", *branches)
    assert result.exit_code == 0, result.output
    assert "average of 2 pipelines" in said(result)
    assert spacy.load(tmp_path / "out").get_pipe("fofe_ner").cfg["start"] is not None


def test_pipelines_without_one_start_or_for_another_task_are_not_averaged(trunk, branches, tmp_path):
    other_trunk = tmp_path / "other_trunk"
    nlp = small_pipeline()
    spacy.util.fix_random_seed(3)
    train(nlp, make_examples(nlp, NESTED), steps=5).to_disk(other_trunk)
    branch(other_trunk, seed=1, steps=2).to_disk(tmp_path / "other_branch")
    cases = [
        ([branches[0]], "two or more pipelines"),
        ([trunk, branches[0]], "random weights"),
        ([branches[0], tmp_path / "other_branch"], "different weights"),
    ]
    for paths, message in cases:
        with pytest.raises(ValueError, match=message):
            average_pipelines(paths)
    result = run("average", tmp_path / "out", branches[0], tmp_path / "other_branch")
    assert result.exit_code == 1 and "different weights" in said(result)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="no component 'ner'"):
        average_pipelines(branches, component="ner")


def test_a_branch_needs_the_trunks_labels_and_architecture(trunk):
    no_loc = [(text, [s for s in spans if s[2] != "LOC"]) for text, spans in NESTED]
    with pytest.raises(ValueError, match="labels"):
        branch(trunk, seed=1, steps=0, data=no_loc)
    with pytest.raises(ValueError, match="architecture"):
        branch(trunk, seed=1, steps=0, model={**SMALL_MODEL, "hidden_width": 32})
