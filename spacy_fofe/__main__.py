"""`python -m spacy_fofe ...`: the same commands as `python -m spacy fofe ...` (spacy_fofe/cli/app.py)."""

from typer.main import get_command

from .cli import fofe_cli

if __name__ == "__main__":
    get_command(fofe_cli)(prog_name="python -m spacy_fofe")
