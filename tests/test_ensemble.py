"""Ensembles: the mean of the members' probabilities, merging trained pipelines, training one from a config."""

import numpy
import pytest
import spacy
from test_cli import run

from spacy_fofe.training.ensemble import ARCHITECTURE, merge_pipelines

from helpers import (
    NESTED,
    SMALL_MODEL,
    check_round_trip,
    fragment_scores,
    make_examples,
    predicted,
    small_pipeline,
    train,
)

TEXTS = [text for text, _ in NESTED]


def trained_member(seed, data=NESTED, steps=200):
    nlp = small_pipeline()
    spacy.util.fix_random_seed(seed)  # after the pipeline is built: the weights are drawn at initialize
    return train(nlp, make_examples(nlp, data), steps=steps)


@pytest.fixture(scope="module")
def member_paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("members")
    paths = []
    for seed in (0, 1):
        nlp = trained_member(seed)
        nlp.meta["performance"] = {"spans_sc_f": 0.5 + seed / 10}  # as spacy train writes its dev scores
        nlp.to_disk(folder / f"seed{seed}")
        paths.append(folder / f"seed{seed}")
    return paths


def test_a_merged_pipeline_averages_its_members_finds_the_spans_and_round_trips(member_paths, tmp_path):
    alone = [fragment_scores(spacy.load(path)) for path in member_paths]
    assert numpy.abs(alone[0] - alone[1]).max() > 1e-4, "members that score alike would make the mean vacuous"
    merged = merge_pipelines(member_paths)
    numpy.testing.assert_allclose(fragment_scores(merged), (alone[0] + alone[1]) / 2, rtol=1e-5, atol=1e-6)
    assert merged.config["components"]["fofe_ner"]["model"]["@architectures"] == ARCHITECTURE
    assert "performance" not in merged.meta  # a member's scores are not the ensemble's
    check_round_trip(merged, tmp_path / "ensemble")


def test_a_long_doc_is_scored_in_windows_reaching_as_far_as_the_widest_member(member_paths, monkeypatch):
    from spacy_fofe.pipeline import component

    merged = merge_pipelines(member_paths)
    ner = merged.get_pipe("fofe_ner")
    margins = [spacy.load(path).get_pipe("fofe_ner")._window_margin() for path in member_paths]
    assert ner._window_margin() == max(margins)
    doc = merged.make_doc(" ".join(TEXTS * 40))
    _, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    assert len(doc) > 4 * 300 and ner._window_margin() < 300
    numpy.testing.assert_allclose(ner.predict([doc])[1], whole, atol=1e-5)


def ensemble_pipeline():
    """A blank pipeline whose fofe_ner is an untrained ensemble of two small members of other widths."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    member = {"@architectures": "spacy_fofe.FOFENER.v3", **SMALL_MODEL,
              "tok2vec": {"@architectures": "spacy.MultiHashEmbed.v2", "width": 32, "rows": [500, 200, 200, 200],
                          "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"], "include_static_vectors": False}}
    model = {"@architectures": ARCHITECTURE, "*": {"a": member, "b": {**member, "hidden_width": 32}}}
    nlp.add_pipe("fofe_ner", config={"model": model, "overlap_rate": 1.0, "disjoint_rate": 1.0})
    return nlp


def test_an_ensemble_in_a_config_trains_every_member_on_the_targets():
    nlp = train(ensemble_pipeline(), make_examples(spacy.blank("en"), NESTED), steps=300)
    ner = nlp.get_pipe("fofe_ner")
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    ensemble = ner.model
    for each in ensemble.layers:  # each member learnt the spans by itself
        ner.model = each
        for text, spans in NESTED:
            assert predicted(nlp(text)) == sorted(spans), text
    ner.model = ensemble


def test_the_ensemble_command_writes_a_pipeline_that_loads(member_paths, tmp_path):
    result = run("ensemble", tmp_path / "out", *member_paths)
    assert result.exit_code == 0, result.output
    assert "ensemble of 2 pipelines" in " ".join(result.output.split())
    assert spacy.load(tmp_path / "out").get_pipe("fofe_ner").model.layers[0].name == "fofe_ner"


def test_merging_pipelines_for_another_task_or_a_single_one_is_an_error(member_paths, tmp_path):
    other_labels = [(text, [s for s in spans if s[2] != "LOC"]) for text, spans in NESTED]
    trained_member(2, other_labels, steps=5).to_disk(tmp_path / "no_loc")
    merge_pipelines(member_paths).to_disk(tmp_path / "ensemble")
    cases = [
        ([member_paths[0]], "two or more pipelines"),
        ([member_paths[0], tmp_path / "no_loc"], "has labels"),
        ([tmp_path / "ensemble", member_paths[0]], "is an ensemble already"),
    ]
    for paths, message in cases:
        with pytest.raises(ValueError, match=message):
            merge_pipelines(paths)
    with_vectors = spacy.load(member_paths[1])
    with_vectors.vocab.set_vector("Paris", numpy.ones(4, dtype="float32"))
    with_vectors.to_disk(tmp_path / "vectors")
    with pytest.raises(ValueError, match="word vectors"):
        merge_pipelines([member_paths[0], tmp_path / "vectors"])
    result = run("ensemble", tmp_path / "out", member_paths[0], tmp_path / "no_loc")
    assert result.exit_code == 1 and "same task" in " ".join(result.output.split())  # wasabi wraps lines
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="no component 'ner'"):
        merge_pipelines(member_paths, component="ner")


def test_members_must_be_fofe_models_that_agree_on_sentence_stops():
    from spacy_fofe.ml.model import build_fofe_ner_model
    from spacy_fofe.training.ensemble import build_fofe_ensemble

    from test_model import table_tok2vec

    def member(**options):
        return build_fofe_ner_model(table_tok2vec(6, 12), hidden_width=8, char_width=4, n_char_buckets=64, **options)

    assert len(build_fofe_ensemble(member(), member()).layers) == 2
    with pytest.raises(ValueError, match="stop_at_sentences"):
        build_fofe_ensemble(member(), member(stop_at_sentences=True))
    with pytest.raises(ValueError, match="FOFENER"):
        build_fofe_ensemble(member(), table_tok2vec(6, 12))
    with pytest.raises(ValueError, match="at least one"):
        build_fofe_ensemble()
