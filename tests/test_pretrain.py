"""`spacy pretrain` with the FOFE language-model objective, and its weights in training."""

import numpy
import pytest
import spacy
import srsly
from spacy.tokens import Doc, DocBin
from spacy.training.initialize import init_nlp
from spacy.training.pretrain import pretrain
from thinc.api import Config

from helpers import NESTED, make_examples

CONFIG = """
[paths]
raw_text = null
train = null
init_tok2vec = null

[system]
seed = 0
gpu_allocator = null

[nlp]
lang = "en"
pipeline = ["fofe_ner"]

[components]

[components.fofe_ner]
factory = "fofe_ner"

[components.fofe_ner.model]
@architectures = "spacy_fofe.FOFENER.v2"
hidden_width = 32

[components.fofe_ner.model.tok2vec]
@architectures = "spacy.MultiHashEmbed.v2"
width = 16
attrs = ["NORM", "SHAPE"]
rows = [200, 50]
include_static_vectors = false

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${paths.train}

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${paths.train}

[corpora.pretrain]
@readers = "spacy.JsonlCorpus.v1"
path = ${paths.raw_text}
min_length = 1
max_length = 0
limit = 0

[training]
seed = ${system.seed}
gpu_allocator = ${system.gpu_allocator}

[pretraining]
max_epochs = 30
dropout = 0.0
n_save_every = null
n_save_epoch = null
component = "fofe_ner"
layer = "tok2vec"
corpus = "corpora.pretrain"

[pretraining.batcher]
@batchers = "spacy.batch_by_words.v1"
size = 1000
discard_oversize = false
tolerance = 0.2
get_length = null

[pretraining.objective]
@architectures = "spacy_fofe.PretrainFOFELM.v1"
alpha = 0.5
hidden_size = 32
maxout_pieces = 2
n_characters = 2

[pretraining.optimizer]
@optimizers = "Adam.v1"
learn_rate = 0.01

[initialize]
init_tok2vec = ${paths.init_tok2vec}
"""


@pytest.fixture
def config(tmp_path):
    raw = tmp_path / "raw.jsonl"
    srsly.write_jsonl(raw, [{"text": text} for text, _ in NESTED] * 4)
    nlp = spacy.blank("en")
    DocBin(docs=[eg.reference for eg in make_examples(nlp, NESTED)]).to_disk(tmp_path / "train.spacy")
    overrides = {"paths.raw_text": str(raw), "paths.train": str(tmp_path / "train.spacy")}
    # Filled as `spacy init fill-config` would: `spacy pretrain` takes a complete config.
    return spacy.util.load_model_from_config(Config().from_str(CONFIG, overrides=overrides), auto_fill=True).config


def test_pretraining_lowers_the_loss_and_training_starts_from_its_weights(config, tmp_path):
    (tmp_path / "pretrained").mkdir()
    pretrain(config, tmp_path / "pretrained")
    log = list(srsly.read_jsonl(tmp_path / "pretrained" / "log.jsonl"))
    losses = [row["epoch_loss"] for row in log]
    assert len(losses) >= 30 and losses[-1] < 0.5 * losses[0]
    weights = tmp_path / "pretrained" / "model29.bin"
    nlp = init_nlp(Config(config).merge({"initialize": {"init_tok2vec": str(weights)}}))
    tok2vec = nlp.get_pipe("fofe_ner").model.get_ref("tok2vec")
    fresh = init_nlp(config).get_pipe("fofe_ner").model.get_ref("tok2vec")
    expected = fresh.from_bytes(weights.read_bytes())
    for (name, ours), (_, theirs) in zip(_params(tok2vec), _params(expected)):
        numpy.testing.assert_array_equal(ours, theirs, err_msg=name)
    assert any(numpy.abs(a - b).max() > 1e-3 for (_, a), (_, b) in zip(_params(tok2vec), _params(
        init_nlp(config).get_pipe("fofe_ner").model.get_ref("tok2vec"))))  # they are not the initial weights


def test_a_word_is_predicted_from_its_context_alone(config):
    from spacy.training.pretrain import create_pretraining_model
    from spacy.util import registry

    nlp = init_nlp(config)
    settings = registry.resolve(nlp.config.interpolate()["pretraining"])
    model = create_pretraining_model(nlp, settings)
    output = [node for node in model.walk() if node.name == "multisoftmax"][0]
    output.set_param("W", numpy.random.default_rng(0).normal(size=output.get_param("W").shape).astype("float32"))
    words = ["Ann", "met", "Bob", "in", "Rome"]
    docs = [Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words[:2] + ["Quillmere"] + words[3:])]
    first, second = model.predict(docs[:1]), model.predict(docs[1:])
    numpy.testing.assert_allclose(first[2], second[2], atol=1e-6)  # the changed word's own row
    assert numpy.abs(first[[1, 3]] - second[[1, 3]]).max() > 1e-4  # its neighbours see it


def test_alpha_outside_the_open_interval_is_an_error():
    with pytest.raises(ValueError, match="alpha"):
        spacy.registry.architectures.get("spacy_fofe.PretrainFOFELM.v1")(alpha=1.0)


def _params(model):
    return [(f"{node.name}.{name}", node.get_param(name)) for node in model.walk() for name in node.param_names
            if node.has_param(name)]


def test_raw_text_script_writes_the_texts_and_never_overwrites_the_corpus(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "project" / "scripts" / "raw_text.py"
    nlp = spacy.blank("en")
    corpus = tmp_path / "train.spacy"
    DocBin(docs=[eg.reference for eg in make_examples(nlp, NESTED)] + [nlp.make_doc("")]).to_disk(corpus)
    before = corpus.read_bytes()
    done = subprocess.run([sys.executable, script, corpus, corpus], capture_output=True, text=True)
    assert done.returncode == 2 and "is the corpus" in done.stderr and corpus.read_bytes() == before
    done = subprocess.run([sys.executable, script, corpus, tmp_path / "raw.jsonl"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(srsly.read_jsonl(tmp_path / "raw.jsonl")) == [{"text": text} for text, _ in NESTED]
    assert "1 empty docs left out" in done.stdout
