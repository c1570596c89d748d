"""spacy-fofe: FOFE-based local-detection named entity recognition for spaCy."""

from . import model, scoring  # noqa: F401  (register the architecture and the scorer)
from .component import FOFENER, make_fofe_ner  # noqa: F401  (registers the fofe_ner factory)

__version__ = "0.1.0"
