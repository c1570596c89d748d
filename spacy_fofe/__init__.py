"""spacy-fofe: FOFE-based local-detection named entity recognition for spaCy."""

from . import corpus, ensemble, lexeme_tables, model, pretrain, scoring, vectors, word_dropout  # noqa: F401  (register the architectures, the reader, the scorer, the layers)
from .component import FOFENER, make_fofe_ner  # noqa: F401  (registers the fofe_ner factory)

__version__ = "0.1.0"
