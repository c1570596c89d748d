"""Write the project's small nested demo corpus (JSON lines), made up for spacy-fofe.

Sentences come from templates over invented names, so nothing is copied from any dataset.
Nested entities: organisations named after places ("Bank of [Velmora]LOC"]ORG) and people
("[Professor [Ilsa Varn]PER]ROLE"). Deterministic for a given seed.

    python scripts/make_demo_corpus.py assets/demo
"""

import json
import random
import sys
from pathlib import Path

PLACES = ["Velmora", "Ostrand", "Kettle Bay", "Marrowdale", "Lunford", "Port Ashby", "Greyholm", "Tamsin Falls",
          "Eddering", "North Quill", "Brackenridge", "Soloway"]
FIRST = ["Ilsa", "Tomas", "Brin", "Odile", "Kasper", "Mira", "Joss", "Anneke", "Ravi", "Sunniva", "Pell", "Dagny"]
LAST = ["Varn", "Okafor", "Lindqvist", "Marchetti", "Hale", "Tenbury", "Quist", "Abernathy", "Solberg", "Fenn"]
ORG_FORMS = [["Bank", "of", "{P}"], ["University", "of", "{P}"], ["{P}", "Rovers"], ["{P}", "City", "Council"],
             ["Royal", "{P}", "Orchestra"], ["{P}", "Gazette"]]
ROLES = ["Professor", "Mayor", "Captain", "Doctor", "Senator"]
TEMPLATES = [
    "{PER} joined {ORG} last spring .",
    "{ROLE} spoke in {LOC} on Monday .",
    "{ORG} opened an office in {LOC} .",
    "Yesterday {PER} met {ROLE} at {ORG} .",
    "The weather in {LOC} was mild .",
    "{ROLE} thanked {ORG} for the grant .",
    "Nobody expected the vote to pass .",
    "{PER} moved from {LOC} to {LOC} .",
]


def person(rng):
    return [rng.choice(FIRST), rng.choice(LAST)], []


def place(rng):
    return rng.choice(PLACES).split(), []


def organisation(rng):
    form = rng.choice(ORG_FORMS)
    words, inner = [], []
    for part in form:
        if part == "{P}":
            name = rng.choice(PLACES).split()
            inner.append((len(words), len(words) + len(name), "LOC"))
            words.extend(name)
        else:
            words.append(part)
    return words, inner


def role(rng):
    name, _ = person(rng)
    return [rng.choice(ROLES)] + name, [(1, 3, "PER")]


SLOTS = {"PER": person, "LOC": place, "ORG": organisation, "ROLE": role}


def sentence(rng):
    tokens, spans = [], []
    for piece in rng.choice(TEMPLATES).split():
        if piece.startswith("{") and piece.endswith("}"):
            label = piece[1:-1]
            words, inner = SLOTS[label](rng)
            start = len(tokens)
            spans.append((start, start + len(words), label))
            spans.extend((start + s, start + e, lab) for s, e, lab in inner)
            tokens.extend(words)
        else:
            tokens.append(piece)
    return {"tokens": tokens, "spans": sorted(spans)}


def main(output: str, seed: int = 13) -> None:
    rng = random.Random(seed)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", 600), ("dev", 120), ("test", 120)):
        with (out / f"{split}.jsonl").open("w", encoding="utf8") as file:
            for _ in range(size):
                file.write(json.dumps(sentence(rng)) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
