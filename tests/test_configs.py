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
    assert {p.name for p in CONFIGS} >= {"conll.cfg", "conll_vectors.cfg", "germeval.cfg", "demo.cfg"}


# Settings a config may set for its own use; every other setting must be the same in every shipped
# config (where they have it), so a change made to one cannot silently miss the others.
PER_USE = {
    "nlp.lang": "the corpus's language",
    "components.fofe_ner.model.tok2vec": "the embedding is what differs between the uses",
    "components.fofe_ner.model.hidden_width": "the scorer's width is the main speed knob (see their comments)",
    "components.fofe_ner.model.dropout": "GermEval regularises with word dropout and weight decay instead",
    "training.dropout": "as the model's dropout",
    "training.optimizer.L2": "GermEval's hash tables need more weight decay (see its comment)",
    "training.max_steps": "corpus size",
    "training.patience": "corpus size",
    "training.eval_frequency": "corpus size",
    "training.batcher.size.stop": "the demo corpus is tiny",
    "nlp.pipeline": "the transformer config runs the transformer before fofe_ner",
    "nlp.batch_size": "a transformer's batches are bound by memory",
    "training.optimizer.use_averages": "a fine-tuned transformer is not averaged, as in spaCy's transformer configs",
    "training.optimizer.learn_rate": "a fine-tuned transformer warms up to a small rate",
    "components.fofe_ner.learn_rate_scale": "the scorer over a fine-tuned transformer learns faster than it",
}


def flatten(config, prefix=""):
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from flatten(value, path + ".")
        else:
            yield path, value


def test_shipped_configs_agree_on_every_shared_setting():
    values = {}
    for path in CONFIGS:
        for key, value in flatten(spacy.util.load_config(path)):
            if not any(key == k or key.startswith(k + ".") for k in PER_USE):
                values.setdefault(key, {})[path.name] = value
    drift = {key: seen for key, seen in values.items() if len({repr(v) for v in seen.values()}) > 1}
    assert not drift, drift


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_builds_initializes_and_overfits_a_few_docs(path, tmp_path):
    overrides = {}
    if "transformer" in path.name:
        pytest.importorskip("spacy_transformers")
        minilm = pytest.importorskip("all_minilm_l6_v2", reason="the offline MiniLM package")
        overrides["paths.transformer"] = str(minilm.extract_model(str(tmp_path)))
        overrides["training.optimizer.learn_rate.warmup_steps"] = 10  # 150 updates are fewer than its warm-up
    nlp = load_model_from_config(spacy.util.load_config(path, overrides=overrides), auto_fill=True, validate=True)
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
    losses = []
    for _ in range(150):
        losses.append(nlp.update(examples, sgd=optimizer, losses={})["fofe_ner"])
        optimizer.step_schedules()  # as spacy train does after each update
    assert losses[-1] < losses[0] / 2, losses
    assert [predicted(nlp(text), cfg["spans_key"]) for text, _ in data] == [sorted(spans) for _, spans in data]
