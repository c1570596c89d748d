"""Ablation: fofe_ner with each feature group switched off and each addition switched on, one
config, the same steps and seed; dev span F1 of each run's model-best (untuned, so the rows differ
only in the model). It decides what a config keeps, so it never scores the test split: that is
scored by the benchmark (scripts/benchmark.py) alone. Writes OUT/ablation.json, OUT/ablation.md and the corpus's
"Ablation" section of project/RESULTS.md. A variant whose training finished (OUT/<name>/trained.json)
is not trained again, so an interrupted run resumes; one interrupted in training is trained again.

    python scripts/ablation.py corpus/conll metrics/ablation-conll --config ../configs/conll.cfg \
        --docs-corpus corpus/conll-docs --raw-text corpus/conll/raw.jsonl

Variants: `full` (the config as it is); `-left_context`, `-right_context`, `-bag_of_words`,
`-char_fofe` (one feature group off); `-lexeme_tables` (each LexemeTablesEmbed in the config
replaced by its inner embedding); `-cluster_prefix_bits`, `-hyphen_parts`, `-compound_heads` (that
LexemeTablesEmbed option off); `-use_features` (each USEFeatures block taken out of its concatenate;
one left alone there takes the concatenate's place); `-sentence_vector` (USEFeatures' doc vector off,
`sentence = false`); `-consistency` (R-Drop off); `+learned_alphas` / `-learned_alphas`
(learn_word_alpha and learn_char_alpha on / off);
`+length_bias` / `-length_bias` (a first-layer row per fragment length); a `+` or `-` variant that
the base already is, or an option the base lacks, is skipped;
`+documents` (trained on --docs-corpus, a doc per document, `fofe convert --docs`); `+both_forms`
(trained on the sentence docs and the documents together). A feature group or model setting is
switched on FOFENER.v2, which has these switches (a FOFENER.v3 base is written as v2 first).
With --docs-corpus every variant is also scored on
the dev documents, as a user's whole documents reach it; with --strict (nested data) the table also
gives GermEval's strict level-aware dev F1. Each variant's words/s (`nlp.pipe` over the dev
texts, batch 1000, best of 3, as scripts/benchmark.py measures) is taken in --speed-rounds
alternating rounds, the best of its rounds kept, so that drift of the machine's speed reaches
every variant alike; the cost of a variant is its ratio to `full` in this run.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmark import ONE_THREAD, USE_FEATURES, blocks, lexeme_tables
from results import RESULTS, mark_start, write_section
from spacy.util import load_config

GROUPS = ("left_context", "right_context", "bag_of_words", "char_fofe")
OPTIONS = ("length_bias",)  # the model's on / off additions
# Each +x / -x variant and the model settings it switches on / off together.
SWITCHES = {"learned_alphas": ("learn_word_alpha", "learn_char_alpha"), **{o: (o,) for o in OPTIONS}}
TABLE_OPTIONS = ("cluster_prefix_bits", "hyphen_parts", "compound_heads")  # LexemeTablesEmbed's additions, switched off
VARIANTS = ("full", *(f"-{g}" for g in GROUPS), "-lexeme_tables", *(f"-{o}" for o in TABLE_OPTIONS), "-use_features",
            "-sentence_vector", "-consistency", *(f"{sign}{o}" for o in SWITCHES for sign in "+-"), "+documents",
            "+both_forms")
NEEDS_DOCS = ("+documents", "+both_forms")
BENCHMARK = Path(__file__).with_name("benchmark.py")
FINISHED = "trained.json"  # written in a variant's folder when its training has finished


def variant_config(base: Path, name: str):
    """The base config changed as the variant says (None when the variant does not apply)."""
    config = load_config(base)
    model = config["components"]["fofe_ner"]["model"]
    if name[1:] in GROUPS or name[1:] in SWITCHES:
        as_v2(model)
    if name.startswith("-") and name[1:] in GROUPS:
        model[name[1:]] = False
    elif name == "-lexeme_tables":
        places = lexeme_tables(model)
        if not places:
            return None
        for section, key in places:
            section[key] = section[key]["embed"]
    elif name == "-use_features":
        if not drop_use_features(model):
            return None
    elif name == "-sentence_vector":
        with_vector = [section for section in blocks(model)
                       if section.get("@layers") == USE_FEATURES and section.get("sentence", False)]
        if not with_vector:
            return None
        for section in with_vector:
            section["sentence"] = False
    elif name == "-consistency":
        component = config["components"]["fofe_ner"]
        if not component.get("consistency", 0.0):
            return None
        component["consistency"] = 0.0
    elif name[1:] in SWITCHES:
        on, settings = name.startswith("+"), SWITCHES[name[1:]]
        if all(model.get(setting, False) == on for setting in settings):
            return None  # the base already is this variant
        for setting in settings:
            model[setting] = on
    elif name[1:] in TABLE_OPTIONS:
        tables = [section[key] for section, key in lexeme_tables(model) if section[key].get(name[1:])]
        if not tables:
            return None
        for block in tables:
            block.pop(name[1:])  # back to LexemeTablesEmbed's default, off
    return config


def drop_use_features(model: dict) -> bool:
    """Take every USEFeatures block out of the concatenate that holds it (a concatenate left with one
    block becomes that block); False when the model has none."""
    found = False
    for section in list(blocks(model)):
        for key, value in list(section.items()):
            if not isinstance(value, dict) or value.get("@layers") != "concatenate.v1":
                continue
            kept = {name: block for name, block in value["*"].items() if block.get("@layers") != USE_FEATURES}
            if len(kept) < len(value["*"]):
                found = True
                section[key] = next(iter(kept.values())) if len(kept) == 1 else {**value, "*": kept}
    return found


def token_width(tok2vec: dict):
    """The width of the token vectors a tok2vec block gives: its own width, or the sum of a
    concatenate's parts (germeval.cfg: tables next to USE features); None when it does not say."""
    if "width" in tok2vec:
        return tok2vec["width"]
    if tok2vec.get("@layers") == "concatenate.v1":
        widths = [token_width(part) for part in tok2vec["*"].values()]
        return None if None in widths else sum(widths)
    return None


def device_options(args) -> list:
    """`--gpu-id N` for the tuning, scoring and timing commands when the trainings run on GPU N."""
    gpu = getattr(args, "gpu_id", -1)
    return ["--gpu-id", gpu] if gpu >= 0 else []


def run(command) -> None:
    """Run a command on one thread, as the benchmark does."""
    print("$", " ".join(map(str, command)), flush=True)
    subprocess.run([str(c) for c in command], check=True, env={**os.environ, **ONE_THREAD})


def training_paths(args, name: str, out: Path):
    """The train and dev paths of a variant: the corpus's files, or a folder with both forms."""
    if name == "+both_forms":
        paths = []
        for split in ("train", "dev"):
            folder = out / "both_forms" / split
            folder.mkdir(parents=True, exist_ok=True)
            for form, corpus in (("sentences", args.corpus), ("documents", args.docs_corpus)):
                link = folder / f"{form}.spacy"
                if not link.exists():
                    link.symlink_to((Path(corpus) / f"{split}.spacy").resolve())
            paths.append(folder)
        return paths
    corpus = Path(args.docs_corpus if name == "+documents" else args.corpus)
    return corpus / "train.spacy", corpus / "dev.spacy"


def as_v2(model: dict) -> None:
    """FOFENER.v3's settings as FOFENER.v2 writes them, so a switch can be set."""
    if model.get("@architectures") == "spacy_fofe.FOFENER.v3":
        model.update({"@architectures": "spacy_fofe.FOFENER.v2", "learn_word_alpha": True, "learn_char_alpha": True,
                      "length_bias": True})


def train_variant(args, name: str) -> Path:
    """Train a variant, or reuse a finished one: FINISHED is written only when its training
    ended, so the model-best of an interrupted run is trained again, not reused."""
    out = Path(args.out) / name
    if (out / FINISHED).exists() and (out / "model-best").exists():
        return out / "model-best"
    if (out / "model-best").exists():
        print(f"== {name}: {out} holds an unfinished training (no {FINISHED}): training it again", flush=True)
    for scores in out.glob("*.json"):  # scores of the model this training replaces
        scores.unlink()
    config = variant_config(Path(args.config), name)
    out.mkdir(parents=True, exist_ok=True)
    config.to_disk(out / "config.cfg")
    train, dev = training_paths(args, name, out)
    command = [sys.executable, "-m", "spacy", "train", out / "config.cfg", "--output", out,
               "--paths.train", train, "--paths.dev", dev,
               "--training.max_steps", args.max_steps, "--system.seed", args.seed]
    run(command)
    (out / FINISHED).write_text(json.dumps({"max_steps": args.max_steps, "seed": args.seed}))
    return out / "model-best"


def evaluate(args, name: str, model: Path) -> dict:
    """Dev span F1 on the sentence corpus (on the documents for +documents), and on the dev documents
    where there are documents; with --strict, the strict F1 too. The ablation and ensemble.py score dev
    alone (they decide what a config keeps; test is the benchmark's)."""
    cases = {"dev": args.docs_corpus if name == "+documents" else args.corpus}
    if args.docs_corpus:
        cases["dev_documents"] = args.docs_corpus
    scores = {}
    for key, corpus in cases.items():
        result = Path(args.out) / name / f"{key}.json"
        if not result.exists():
            starts = ["--sentence-starts"] if getattr(args, "sentence_starts", False) else []
            run([sys.executable, "-m", "spacy", "fofe", "evaluate", model, Path(corpus) / "dev.spacy",
                 "--output", result, *starts, *device_options(args)])
        found = json.loads(result.read_text())
        scores[key] = round(100 * found["spans_sc_f"], 2)
        if key == "dev" and args.strict:
            scores["dev_strict"] = round(100 * found["spans_sc_strict_f"], 2)
    return scores


def words_per_second(args, models: dict, rounds: int) -> dict:
    """Each model's best words/s on the dev texts over `rounds` rounds that take the models in turn."""
    best = {}
    for round_ in range(rounds):
        for name, model in models.items():
            print(f"== {name}: words/s, round {round_ + 1} of {rounds}", flush=True)
            result = Path(args.out) / name / "speed.json"
            run([sys.executable, BENCHMARK, "--measure", model, Path(args.corpus) / "dev.spacy", result,
                 *device_options(args)])
            best[name] = max(best.get(name, 0), json.loads(result.read_text())["words_per_second"])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="folder with train.spacy and dev.spacy")
    parser.add_argument("out")
    parser.add_argument("--config", required=True, help="fofe_ner's config, the `full` row")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--docs-corpus", default=None, help="the corpus as a doc per document (+documents)")
    parser.add_argument("--strict", action="store_true", help="also give GermEval's strict (level-aware) dev F1")
    parser.add_argument("--speed-rounds", type=int, default=2, help="rounds of words/s measurement (0: none)")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    args = parser.parse_args()
    mark_start()
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    for name in names:
        if name in NEEDS_DOCS and not args.docs_corpus:
            parser.error(f"{name} needs --docs-corpus")
    rows, models = [], {}
    for name in names:
        if variant_config(Path(args.config), name) is None:
            print(f"== {name}: does not apply to {args.config}; skipped")
            continue
        print(f"== {name}", flush=True)
        models[name] = train_variant(args, name)
        rows.append({"variant": name, **evaluate(args, name, models[name])})
    if args.speed_rounds > 0:
        measured = words_per_second(args, models, args.speed_rounds)
        for row in rows:
            row["words_per_second"] = measured[row["variant"]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps(rows, indent=2))
    full = next((row for row in rows if row["variant"] == "full"), None)
    documents, speed = bool(args.docs_corpus), args.speed_rounds > 0
    header = ["variant", "dev F1", "dev vs full"] + (["dev strict F1"] if args.strict else []) \
        + (["dev F1, documents"] if documents else []) + (["words/s", "words/s vs full"] if speed else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        delta = f"{row['dev'] - full['dev']:+.2f}" if full and row is not full else ""
        cells = [row["variant"], f"{row['dev']:.2f}", delta]
        if args.strict:
            cells.append(f"{row['dev_strict']:.2f}")
        if documents:
            cells.append(f"{row['dev_documents']:.2f}")
        if speed:
            ratio = row["words_per_second"] / full["words_per_second"] if full and row is not full else None
            cells += [f"{row['words_per_second']:,}", f"{ratio:.2f}x" if ratio else ""]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (out / "ablation.md").write_text(table)
    model = load_config(Path(args.config))["components"]["fofe_ner"]["model"]
    body = (f"Base config `{args.config}` (hidden_width {model['hidden_width']}, token vectors "
            f"{token_width(model['tok2vec']) or '?'} wide). "
            f"Span F1 under `sc` of each variant's model-best (untuned), {args.max_steps} steps, seed {args.seed}; "
            "`-x`: feature group or resource x off, `+x`: addition x on (see scripts/ablation.py); dev of "
            "+documents is the documents' dev; dev on the sentence docs, and on the same text as whole "
            "documents where given; the test split is not scored" + ("; words/s: `nlp.pipe` over the dev texts, "
                                                                     "batch 1000, best of 3 in each "
                                      f"of {args.speed_rounds} alternating rounds, the best kept" if speed else "")
            + ".\n\n" + table)
    write_section(f"Ablation on {Path(args.corpus).name}", body, configs=[args.config], path=Path(args.results),
                  raw=out / "ablation.json")
    print(table)


if __name__ == "__main__":
    main()
