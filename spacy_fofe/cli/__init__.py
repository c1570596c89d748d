"""The `spacy fofe` commands (spaCy's CLI, through the `spacy_cli` entry point)."""

from .app import fofe_cli  # noqa: F401
