"""Seed ensembles: one config trained with each seed, every seed alone, every pair and all of them
merged (`spacy fofe ensemble`); each model tuned on dev, then scored on dev and timed on the dev
texts: a tool to choose with, so it never reads test (the benchmark scores the shipped configs). With
--distill, also single models trained with the largest ensemble as their teacher (distillation:
`[initialize.components.fofe_ner] teacher`), which run at one model's speed.

With --no-ensembles, only the seeds alone (a config whose fofe_ner reads a shared transformer
cannot be merged). With --branches, each seed's model is also trained on from its weights with each
branch seed (`[initialize.components.fofe_ner] init_weights`, --branch-steps steps) and those
branches are averaged into one network (`spacy fofe average`), at one model's cost.

A seed whose training finished (OUT/seedS/trained.json) with the same config and overrides, neither
the config file nor a teacher changed since, is not trained again, so an interrupted run resumes.
Rows: each seed alone, each ensemble; their means by size answer "what does a user gain from k
models", since a single ensemble's figure hides the seed noise. Words/s: `nlp.pipe` over the dev
texts, batch 1000, best of 3 (as scripts/benchmark.py measures), in --speed-rounds alternating
rounds, the best kept; the cost of an ensemble is its ratio to the first seed alone. When the
pipeline runs components before fofe_ner (conll_transformer.cfg's OntoNotes ner), they are also timed
alone, so the table says what fofe_ner adds to them.
Writes OUT/ensemble.json and the corpus's "Ensemble" section of project/RESULTS.md (--section
names another, for a second config on the same corpus).

    python scripts/ensemble.py corpus/germeval metrics/ensemble-germeval --config ../configs/germeval.cfg --strict
"""

import argparse
import itertools
import json
import shutil
import statistics
import sys
from pathlib import Path

from ablation import FINISHED, device_options, evaluate, run, words_per_second
from results import RESULTS, mark_start, write_section
from spacy.util import load_config


def ensemble_name(seeds: list) -> str:
    return "ensemble" + "+".join(map(str, seeds))


def train_seed(args, seed: int, name: str = "", extra: tuple = ()) -> Path:
    """Train the config with one seed (and `extra` spacy train overrides) into OUT/name, or reuse a
    finished training (FINISHED is written at its end). A seed trained anew drops what was made from
    the model it replaces: its tuned model and scores, the ensembles it is in and the distilled
    models (their teacher is the ensemble of all seeds), and the upstream components taken from it."""
    name = name or f"seed{seed}"
    out = Path(args.out) / name
    overrides = [str(option) for option in [*args.overrides, *extra]]
    if reusable(out, overrides, args.config):
        return out / "model-best"
    made_from = []
    if name.startswith("branch"):  # branchS-B: its trunk's average is made from it
        made_from.append(Path(args.out) / ("average" + name.removeprefix("branch").split("-")[0]))
    if name.startswith("seed"):
        made_from = [folder for folder in Path(args.out).glob("ensemble*")
                     if str(seed) in folder.name.removeprefix("ensemble").split("+")]
        made_from += Path(args.out).glob("distilled*")
        made_from.append(Path(args.out) / UPSTREAM)  # taken from the first seed's pipeline
    for path in [out / "model-tuned", *made_from]:
        shutil.rmtree(path, ignore_errors=True)
    for scores in out.glob("*.json"):
        scores.unlink()
    corpus = Path(args.corpus)
    run([sys.executable, "-m", "spacy", "train", args.config, "--output", out, "--paths.train",
         corpus / "train.spacy", "--paths.dev", corpus / "dev.spacy", "--system.seed", seed, *overrides])
    (out / FINISHED).write_text(json.dumps({"seed": seed, "config": args.config, "overrides": overrides}))
    return out / "model-best"


def reusable(out: Path, overrides: list, config: str) -> bool:
    """Whether OUT holds a finished training of this config with these spacy train overrides, neither
    the config file nor a path they name (a teacher, vectors)
    changed since: a retrained teacher makes its students train again, and so does an edited config."""
    record = out / FINISHED
    if not (record.exists() and (out / "model-best").exists()):
        return False
    finished = json.loads(record.read_text())
    if finished.get("config") != config or finished.get("overrides") != overrides or "with_dev" in finished:
        return False  # "with_dev": trained on dev too by an earlier version
    finished_at = record.stat().st_mtime
    return not any(Path(option).exists() and last_written(Path(option)) > finished_at
                   for option in [config, *overrides])


def last_written(path: Path) -> float:
    """When a file, or the newest file in a folder (a model saved again rewrites its files in place,
    which leaves the folder's own time as it was), was last written."""
    return max(item.stat().st_mtime for item in [path, *(path.rglob("*") if path.is_dir() else [])])


def tuned(args, name: str, model: Path) -> Path:
    """The model with its decoding tuned on dev (made once)."""
    out = Path(args.out) / name / "model-tuned"
    if not out.exists():
        objective = ["--objective", "strict"] if args.strict_objective else []
        starts = ["--sentence-starts"] if args.sentence_starts else []
        run([sys.executable, "-m", "spacy", "fofe", "tune", model, Path(args.corpus) / "dev.spacy", out, *objective,
             *starts, *device_options(args)])
    return out


def merged(args, name: str, members: list, command: str = "ensemble") -> Path:
    """The members joined by `spacy fofe ensemble` (or `average`), made once."""
    out = Path(args.out) / name / "model-best"
    if not out.exists():
        run([sys.executable, "-m", "spacy", "fofe", command, out, *members])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="folder with train.spacy and dev.spacy")
    parser.add_argument("out")
    parser.add_argument("--config", required=True)
    parser.add_argument("--seeds", default="0,1,2", help="the seeds; ensembles are made of two or more")
    parser.add_argument("--no-ensembles", action="store_true", help="the seeds alone, e.g. for a config whose "
                        "fofe_ner reads a shared transformer (a listener), which `spacy fofe ensemble` cannot merge")
    parser.add_argument("--branches", default="", help="seeds of branches of each seed's model, e.g. 10,11,12 "
                        "(trained on from its weights, then averaged; none by default)")
    parser.add_argument("--branch-steps", type=int, default=3000, help="training steps of each branch")
    parser.add_argument("--strict", action="store_true", help="also give GermEval's strict (level-aware) dev F1")
    parser.add_argument("--strict-objective", action="store_true", help="tune for strict F1 (fofe tune --objective)")
    parser.add_argument("--distill", default="", help="seeds of single models trained with the ensemble of all "
                        "--seeds as their teacher, e.g. 0,1 (none by default)")
    parser.add_argument("--sentence-starts", action="store_true", help="documents with their sentence starts: "
                        "train, tune and evaluate with the data's starts on the docs (for stop_at_sentences)")
    parser.add_argument("--speed-rounds", type=int, default=2, help="rounds of words/s measurement (0: none)")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    parser.add_argument("--section", default="", help="its title (default: Ensemble on CORPUS)")
    args, args.overrides = parser.parse_known_args()  # the rest goes to spacy train, e.g. --paths.vectors V
    mark_start()
    if args.sentence_starts:
        args.overrides += ["--corpora.train.sentence_starts", "true", "--corpora.dev.sentence_starts", "true"]
    args.docs_corpus = None  # ablation.evaluate's documents form: sentence docs only here
    args.gpu_id = gpu_of(args.overrides)
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(set(seeds)) < len(seeds):
        parser.error("--seeds: each seed once")
    groups = [list(pair) for pair in itertools.combinations(seeds, 2)] + ([seeds] if len(seeds) > 2 else [])
    if args.no_ensembles:
        groups = []
    if args.distill and not groups:
        parser.error("--distill needs an ensemble of two or more --seeds as the teacher")
    args.branch_seeds = [int(s) for s in args.branches.split(",") if s]
    if len(args.branch_seeds) == 1 or len(set(args.branch_seeds)) < len(args.branch_seeds):
        parser.error("--branches: two or more seeds, each once (their average is the point)")
    models = {f"seed{s}": train_seed(args, s) for s in seeds}
    sizes = {**{name: 1 for name in models}, **{ensemble_name(group): len(group) for group in groups}}
    for seed in seeds if args.branch_seeds else []:
        start = ["--initialize.components.fofe_ner.init_weights", str(models[f"seed{seed}"]),
                 "--training.max_steps", str(args.branch_steps)]
        names = [f"branch{seed}-{branch}" for branch in args.branch_seeds]
        for name, branch in zip(names, args.branch_seeds):
            models[name] = train_seed(args, branch, name, start)
        models[f"average{seed}"] = merged(args, f"average{seed}", [models[name] for name in names], "average")
        sizes.update({name: 1 for name in [*names, f"average{seed}"]})
    for group in groups:
        models[ensemble_name(group)] = merged(args, ensemble_name(group), [models[f"seed{s}"] for s in group])
    args.teacher = ensemble_name(seeds)
    for seed in [int(s) for s in args.distill.split(",") if s]:
        teacher = ["--initialize.components.fofe_ner.teacher", str(models[args.teacher])]
        models[f"distilled{seed}"] = train_seed(args, seed, f"distilled{seed}", teacher)
        sizes[f"distilled{seed}"] = 1
    rows = []
    for name, model in models.items():
        print(f"== {name}", flush=True)
        models[name] = tuned(args, name, model)
        rows.append({"model": name, "members": sizes[name], **evaluate(args, name, models[name])})
    if args.speed_rounds > 0:
        # One model of each size: the first seed, the first pair, all seeds.
        names = [f"seed{seeds[0]}"] + ([ensemble_name(seeds[:2])] if groups else [])
        if len(seeds) > 2 and groups:
            names.append(ensemble_name(seeds))
        timed = {name: models[name] for name in names}
        upstream = upstream_alone(args, models[f"seed{seeds[0]}"])
        if upstream:
            timed[UPSTREAM] = upstream
        measured = words_per_second(args, timed, args.speed_rounds)
        for row in rows:
            row["words_per_second"] = measured.get(row["model"])
        if upstream:
            rows.append({"model": UPSTREAM, "members": 0, "components": load_config(upstream / "config.cfg")[
                "nlp"]["pipeline"], "words_per_second": measured[UPSTREAM]})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ensemble.json").write_text(json.dumps(rows, indent=2))
    write_section(args.section or f"Ensemble on {Path(args.corpus).name}", report(args, rows, seeds),
                  configs=[args.config], path=Path(args.results), raw=out / "ensemble.json")


def gpu_of(overrides: list) -> int:
    """The GPU that spacy train's `--gpu-id` among the overrides names, or -1 (CPU): the tuning,
    scoring and timing then run there too."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--gpu-id", "-g", type=int, default=-1)
    return parser.parse_known_args(overrides)[0].gpu_id


UPSTREAM = "upstream"  # the row of the components that run before fofe_ner, timed without it


def upstream_alone(args, model: Path):
    """The pipeline `model` without fofe_ner and what follows it, saved under OUT/upstream, or None
    when fofe_ner is its first component."""
    import spacy

    out = Path(args.out) / UPSTREAM / "model"
    names = load_config(model / "config.cfg")["nlp"]["pipeline"]
    before = names[:names.index("fofe_ner")]
    if not before:
        return None
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        spacy.load(model, exclude=names[len(before):]).to_disk(out)
    return out


def mean_and_spread(values: list) -> str:
    """The mean, and with two or more values the sample standard deviation: "90.33 ± 0.18"."""
    mean = f"{statistics.mean(values):.2f}"
    return mean + (f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else "")


def report(args, rows: list, seeds: list) -> str:
    columns = ["dev"] + (["dev_strict"] if args.strict else [])
    header = ["model", "members", "dev F1"] + (["dev strict F1"] if args.strict else []) + \
        ["words/s", "words/s vs one model"]
    base = next(row for row in rows if row["model"] == f"seed{seeds[0]}").get("words_per_second")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    upstream = next((row for row in rows if row["model"] == UPSTREAM), None)
    rows = [row for row in rows if row is not upstream]
    for row in rows:
        speed = row.get("words_per_second")
        cells = [row["model"], str(row["members"])] + [f"{row[c]:.2f}" for c in columns]
        cells += [f"{speed:,}" if speed else "", f"{speed / base:.2f}x" if speed and base else ""]
        lines.append("| " + " | ".join(cells) + " |")
    means = []
    kinds = [(1, "seed", "1 member"), (1, "distilled", f"1 member distilled from {args.teacher}"),
             (1, "branch", "1 branch"), (1, "average", f"average of {len(args.branch_seeds)} branches")]
    kinds += [(size, "ensemble", f"{size} members") for size in sorted({row["members"] for row in rows}) if size > 1]
    for size, prefix, what in kinds:
        group = [row for row in rows if row["members"] == size and row["model"].startswith(prefix)]
        if group:
            figures = ", ".join(f"{c} {mean_and_spread([row[c] for row in group])}" for c in columns)
            means.append(f"- {what}, mean of {len(group)}: {figures}")
    if upstream and base:
        speed = upstream["words_per_second"]
        components = ", ".join(upstream["components"])
        means.append(f"- the components before fofe_ner alone ({components}): {speed:,} words/s; "
                     f"seed{seeds[0]} runs at {base / speed:.2f}x of them")
    objective = "strict F1" if args.strict_objective else "span F1"
    overrides = f" (spacy train overrides: `{' '.join(args.overrides)}`)" if args.overrides else ""
    return (f"Config `{args.config}`{overrides}, seeds {', '.join(map(str, seeds))}; `seedS`: that seed's "
            "model-best alone"
            + (", `ensembleA+B`: `spacy fofe ensemble` of those seeds' model-best"
               if any(row["members"] > 1 for row in rows) else "")
            + (f"; `distilledS`: seed S trained with {args.teacher}'s model-best as its teacher (the config's "
               "teacher_weight)" if args.distill else "")
            + (f"; `branchS-B`: seed S's model-best trained on for {args.branch_steps:,} steps with seed B "
               "(`init_weights`), `averageS`: `spacy fofe average` of seed S's branches" if args.branch_seeds else "")
            + f"; every model tuned on dev for {objective} (`spacy fofe tune`), then its dev span F1 under `sc` "
               "(what the tuning saw, so a little high for every row alike; test is the benchmark's)"
            + (", the docs given their sentence starts (`--sentence-starts`)" if args.sentence_starts else "") + "."
            + (" Words/s: `nlp.pipe` over the dev texts, batch 1000, best of 3 in each of "
               f"{args.speed_rounds} alternating rounds, "
               + (f"on GPU {args.gpu_id} (the CPU side on one thread)." if getattr(args, "gpu_id", -1) >= 0
                  else "one thread.")
               if args.speed_rounds > 0 else "")
            + "\n\n" + "\n".join(lines) + "\n\n"
            + "\n".join(means) + "\n")


if __name__ == "__main__":
    main()
