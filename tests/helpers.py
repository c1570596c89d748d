"""What several test modules share: a tiny nested corpus, small model settings, training helpers.

Fixtures built from these live in conftest.py.
"""

import numpy
import spacy
from spacy.tokens import Span
from spacy.training import Example

NESTED = [
    ("The University of Toronto hired Ann Lee .", [(1, 4, "ORG"), (3, 4, "LOC"), (5, 7, "PER")]),
    ("Ann Lee lives in Toronto .", [(0, 2, "PER"), (4, 5, "LOC")]),
    ("Bank of Paris fired Bob .", [(0, 3, "ORG"), (2, 3, "LOC"), (4, 5, "PER")]),
    ("Nothing to see here .", []),
    ("Bob visited Paris and Toronto .", [(0, 1, "PER"), (2, 3, "LOC"), (4, 5, "LOC")]),
]
SMALL_MODEL = {"hidden_width": 64, "dropout": 0.0, "tok2vec": {"width": 32, "rows": [500, 200, 200, 200]}}


def make_examples(nlp, data, key="sc"):
    examples = []
    for text, spans in data:
        reference = nlp.make_doc(text)
        reference.spans[key] = [Span(reference, s, e, label=label) for s, e, label in spans]
        examples.append(Example(nlp.make_doc(text), reference))
    return examples


def train(nlp, examples, steps=200):
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


def small_pipeline():
    """A blank English pipeline with a small, untrained fofe_ner, the random seed fixed."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    config = {"model": SMALL_MODEL, "overlap_rate": 1.0, "disjoint_rate": 1.0}
    nlp.add_pipe("fofe_ner", config=config)
    return nlp


def predicted(doc, key="sc"):
    return sorted((s.start, s.end, s.label_) for s in doc.spans[key])


def fragment_scores(nlp, texts=None):
    """fofe_ner's fragment scores of the texts (NESTED's by default), as predict gives them."""
    texts = [text for text, _ in NESTED] if texts is None else texts
    return nlp.get_pipe("fofe_ner").predict([nlp.make_doc(text) for text in texts])[1]


def check_round_trip(nlp, path):
    """Saved to `path` and loaded, `nlp` scores as before and finds NESTED's spans."""
    nlp.to_disk(path)
    loaded = spacy.load(path)
    # rtol 1e-5: rows that `nlp`'s predictions kept were embedded in other batches (float rounding)
    numpy.testing.assert_allclose(fragment_scores(loaded), fragment_scores(nlp), rtol=1e-5)
    for text, spans in NESTED:
        assert predicted(loaded(text)) == sorted(spans), text


def outer_level(spans):
    """The (start, end, label) spans inside no other span."""
    return [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]


WORD_DROPOUT_EMBED = {"@architectures": "spacy_fofe.WordDropoutHashEmbed.v1", "width": 32,
                      "rows": [500, 200, 200, 200], "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
                      "include_static_vectors": False, "word_dropout": 0.2}


def overfit_with_tok2vec(nlp, tok2vec):
    """Add a small fofe_ner with `tok2vec` to `nlp`, train it on NESTED and check it learnt every span."""
    spacy.util.fix_random_seed(0)
    config = {"model": {**SMALL_MODEL, "tok2vec": tok2vec}, "overlap_rate": 1.0, "disjoint_rate": 1.0}
    nlp.add_pipe("fofe_ner", config=config)
    train(nlp, make_examples(nlp, NESTED), steps=300)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    return nlp


def overfit_with_consistency():
    """A small fofe_ner trained with R-Drop (consistency 1.0, dropout 0.1) on NESTED, checked to have
    learnt every span."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    model = {**SMALL_MODEL, "dropout": 0.1}
    nlp.add_pipe("fofe_ner", config={"model": model, "consistency": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=150)
    for text, spans in NESTED:
        assert predicted(nlp(text)) == sorted(spans), text
    return nlp


CLUSTERS = {"Ann": 40, "Bob": 40, "Lee": 41, "Toronto": 7, "Paris": 7, "paris": 9, "Quillmere": 7}
PROBS = {"Ann": -10.2, "ann": -14.7, "the": -3.5, "Paris": -9.0}
# fofe_ner's tok2vec in the lexeme-table pipeline tests: the word-dropout embedding plus both tables.
LEXEME_TABLES_EMBED = {"@architectures": "spacy_fofe.LexemeTablesEmbed.v1", "width": 32,
                       "tables": ["lexeme_cluster", "lexeme_prob"], "attrs": ["ORTH", "LOWER"], "rows": [50, 20],
                       "embed": WORD_DROPOUT_EMBED}


def with_tables(lang="en"):
    nlp = spacy.blank(lang)
    nlp.vocab.lookups.add_table("lexeme_cluster", CLUSTERS)
    nlp.vocab.lookups.add_table("lexeme_prob", PROBS)
    return nlp


# fofe_ner reading a shared CNN tok2vec through a listener.
LISTENER_PIPELINE = """
[nlp]
lang = "en"
pipeline = ["tok2vec", "fofe_ner"]

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.Tok2Vec.v2"

[components.tok2vec.model.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = 32
attrs = ["NORM", "SHAPE"]
rows = [500, 100]
include_static_vectors = false

[components.tok2vec.model.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = 32
depth = 2
window_size = 1
maxout_pieces = 3

[components.fofe_ner]
factory = "fofe_ner"
overlap_rate = 1.0
disjoint_rate = 1.0

[components.fofe_ner.model]
@architectures = "spacy_fofe.FOFENER.v3"
hidden_width = 64
dropout = 0.0

[components.fofe_ner.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "*"
"""
