"""Write the text of a .spacy corpus as JSON lines ({"text": ...}), labels dropped: raw text for
`spacy pretrain` (its reader, spacy.JsonlCorpus.v1, tokenizes it again).

    python scripts/raw_text.py corpus/conll/train.spacy corpus/conll/raw.jsonl
"""

import argparse
from pathlib import Path

import spacy
import srsly
from spacy.tokens import DocBin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help=".spacy file")
    parser.add_argument("output", type=Path, help="JSON lines file to write")
    args = parser.parse_args()
    docs = DocBin().from_disk(args.corpus).get_docs(spacy.blank("xx").vocab)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    srsly.write_jsonl(args.output, ({"text": doc.text} for doc in docs if doc.text.strip()))
    print(f"{args.corpus} -> {args.output}")


if __name__ == "__main__":
    main()
