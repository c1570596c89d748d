"""Every config in configs/ builds, initializes and overfits a few docs, as `spacy train` would run it."""

from pathlib import Path

import numpy
import pytest
import spacy
from spacy.util import load_model_from_config

from helpers import NESTED, make_examples, outer_level, predicted

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.cfg"))
# The outer level of NESTED: what the flat (CoNLL) configs are made for.
FLAT = [(text, outer_level(spans)) for text, spans in NESTED]


def test_the_configs_folder_is_found():
    assert len(CONFIGS) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_builds_initializes_and_overfits_a_few_docs(path):
    nlp = load_model_from_config(spacy.util.load_config(path), auto_fill=True, validate=True)
    if "vectors" in path.name:
        # What --paths.vectors would load: a few rows keyed by the lower-case form.
        nlp.vocab.reset_vectors(width=8)
        for word in {w.lower() for text, _ in NESTED for w in text.split()}:
            nlp.vocab.set_vector(word, numpy.random.default_rng(len(word)).normal(size=8).astype("float32"))
    cfg = nlp.get_pipe("fofe_ner").cfg
    data = FLAT if path.name.startswith("conll") else NESTED
    spacy.util.fix_random_seed(0)
    examples = make_examples(nlp, data, key=cfg["spans_key"])
    optimizer = nlp.initialize(lambda: examples)
    losses = [nlp.update(examples, sgd=optimizer, losses={})["fofe_ner"] for _ in range(150)]
    assert losses[-1] < losses[0] / 2, losses
    assert [predicted(nlp(text), cfg["spans_key"]) for text, _ in data] == [sorted(spans) for _, spans in data]
