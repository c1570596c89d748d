"""Write the text of a .spacy corpus as JSON lines ({"text": ...}), labels dropped: raw text for
`spacy pretrain` (its reader, spacy.JsonlCorpus.v1, tokenizes it again).

    python scripts/raw_text.py corpus/conll/train.spacy corpus/conll/raw.jsonl
"""

import argparse
from pathlib import Path

import spacy
import srsly

from spacy_fofe.corpus import docbin_docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help=".spacy file")
    parser.add_argument("output", type=Path, help="JSON lines file to write")
    args = parser.parse_args()
    if args.output.exists() and args.output.resolve() == args.corpus.resolve():
        parser.error(f"{args.output} is the corpus; writing it would destroy it. Name another output.")
    docs = list(docbin_docs(args.corpus, spacy.blank("xx").vocab))
    texts = [{"text": doc.text} for doc in docs if doc.text.strip()]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    srsly.write_jsonl(args.output, texts)
    print(f"{args.corpus} -> {args.output}: {len(texts)} texts ({len(docs) - len(texts)} empty docs left out)")


if __name__ == "__main__":
    main()
