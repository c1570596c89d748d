"""spacy-fofe: FOFE-based local-detection named entity recognition for spaCy.

    ml/        the FOFENER architecture: fragments, FOFE codes, the first layer, the numpy-BLAS Ops
    features/  token embeddings a config chains in: lexeme tables, vectors, word dropout, USE, memory
    pipeline/  the fofe_ner component, its settings, decoding and scoring
    training/  the corpus reader, teachers, ensembles, averaging, decoding tuning
    cli/       the `spacy fofe` commands
"""

# Imported for their registrations: the architectures, the layers, the reader, the scorer, the factory.
from .features import document_memory, lexeme_tables, use_features, vectors, word_dropout  # noqa: F401
from .ml import model, ops  # noqa: F401
from .pipeline import scoring  # noqa: F401
from .pipeline.component import FOFENER, make_fofe_ner  # noqa: F401
from .training import corpus, ensemble  # noqa: F401

__version__ = "0.2.0"
