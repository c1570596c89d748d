"""spacy-fofe: FOFE-based local-detection named entity recognition for spaCy."""

# Imported for their registrations: the architectures, the corpus reader, the scorer and the layers.
from . import (  # noqa: F401
    corpus,
    document_memory,
    ensemble,
    lexeme_tables,
    model,
    pretrain,
    scoring,
    use_features,
    vectors,
    word_dropout,
)
from .component import FOFENER, make_fofe_ner  # noqa: F401  (registers the fofe_ner factory)

__version__ = "0.1.0"
