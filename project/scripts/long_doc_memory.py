"""Peak memory of fofe_ner on one long document, against a 1,000-token one (chunked scoring keeps
the grid of fragment activations bounded; what grows is the doc, its token vectors and the scores).

    python scripts/long_doc_memory.py MODEL [tokens]
"""

import resource
import sys
import time

import spacy


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(model: str, tokens: str = "100000") -> None:
    nlp = spacy.load(model)
    sentence = "Ann Lee of the University of Toronto met Bob in Rome ."
    words = sentence.split()
    nlp(" ".join(words * (1000 // len(words))))
    base = peak_mb()
    text = " ".join((words * (int(tokens) // len(words) + 1))[: int(tokens)])
    start = time.perf_counter()
    doc = nlp(text)
    seconds = time.perf_counter() - start
    print(f"{len(doc)} tokens in {seconds:.1f} s, {len(doc.spans['sc'])} spans; "
          f"peak RSS {base:.0f} MB after a 1,000-token doc, {peak_mb():.0f} MB after this one")


if __name__ == "__main__":
    main(*sys.argv[1:])
