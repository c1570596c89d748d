"""Benchmark fofe_ner against spaCy's ner and spancat on one corpus, on this machine, in one run.

For each system (and each vectors setting; the -stock systems once) it trains a pipeline (or
reuses one whose training finished under OUT/<name>), every system with the same --max-steps and
the same corpus reader, spaCy's peers with the hash tables, the lexeme tables, the USE features and the
optimizer settings of fofe_ner's config (the systems `spancat-stock` and `ner-stock` are spaCy's
CPU efficiency configs as `spacy init config` writes them, only the n-gram sizes and the reader set);
fofe_ner's decoding is then tuned on dev (`python -m spacy fofe tune`, into
OUT/<name>/model-tuned, also reused when present), as the project's own workflows do. It
measures on the test split, each in a fresh process: P/R/F1 (one scorer for all systems: spans
under "sc", all levels, and for nested data GermEval's strict level-aware metric; on nested data
spaCy's `ner` learns the outer level, doc.ents, so its recall stops there: it is there as the
speed reference), training wall time, inference words/sec (nlp.pipe over the test texts, batch
size 1000: first the first pass, text the pipeline has never seen, after a start-up pass over
STARTUP_DOCS dev docs; then warm, the best of 3; each the best of --speed-rounds rounds that take the
systems in turn), the start-up apart (loading to the first doc out, seconds), and peak memory
(max RSS of the training and of the inference process). Every training and
measurement runs on one thread (ONE_THREAD). Writes OUT/benchmark.json, OUT/benchmark.md and
OUT/benchmark.png (F1 against words/sec), and the corpus's section of project/RESULTS.md (--results).

    python scripts/benchmark.py corpus/conll metrics/benchmark-conll --lang en --vectors vectors/glove50
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

from results import RESULTS, write_section
from spacy.util import load_config

ROOT = Path(__file__).resolve().parents[2]
# One thread for every system, in training and measurement alike: spaCy's blis runs on one,
# while numpy's BLAS (fofe_ner's matrix products, spacy_fofe/ml/ops.py) would take every core.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The embedding spaCy's peers get when fofe_ner's config has no hash embedding to copy (the
# vectors configs): spaCy's MultiHashEmbed with our attributes and sizes. Width 256 made spancat
# 2.8x slower on GermEval with no F1 gain.
# Docs of other text (the dev split) run through a pipeline after loading and before the first pass.
STARTUP_DOCS = 200
EMBED = {"width": 128, "attrs": ["NORM", "LOWER", "PREFIX", "SUFFIX", "SHAPE"], "rows": [5000, 5000, 1000, 2500, 2500]}


def fofe_config_path(args, vectors: bool) -> Path:
    """Our config for the corpus (or --fofe-config); with vectors, conll_vectors.cfg."""
    if vectors:
        return ROOT / "configs" / "conll_vectors.cfg"
    if args.fofe_config:
        return Path(args.fofe_config)
    name = "demo.cfg" if args.small else ("germeval.cfg" if args.nested else "conll.cfg")
    return ROOT / "configs" / name


def fofe_config(args, vectors: bool):
    config = load_config(fofe_config_path(args, vectors))
    config["nlp"]["lang"] = args.lang
    config["components"]["fofe_ner"]["max_length"] = args.max_length
    return config


LEXEME_EMBED = "spacy_fofe.LexemeTablesEmbed.v1"
USE_FEATURES = "spacy_fofe.USEFeatures.v1"


def fofe_embedding(fofe):
    """(the fofe_ner config's LexemeTablesEmbed settings without its inner embed, or None; the
    block that embeds the words: the wrapped one, or the tok2vec's embed, or the tok2vec).
    The tables are the tok2vec itself (conll.cfg, germeval.cfg), a Tok2Vec's embed, or a block
    next to the vectors in a concatenate (conll_vectors.cfg): the outermost one is taken."""
    model = fofe["components"]["fofe_ner"]["model"]
    places = lexeme_tables(model)
    if not places:
        return None, model["tok2vec"].get("embed", model["tok2vec"])
    section, key = places[0]
    return {k: v for k, v in section[key].items() if k != "embed"}, section[key]["embed"]


def blocks(section: dict):
    """A config section and every section below it, outer ones first."""
    yield section
    for value in section.values():
        if isinstance(value, dict):
            yield from blocks(value)


def lexeme_tables(model: dict):
    """(parent section, key) of every LexemeTablesEmbed in the model's config, however deep."""
    return [(section, key) for section in blocks(model) for key, value in section.items()
            if isinstance(value, dict) and value.get("@architectures") == LEXEME_EMBED]


def use_features(model: dict) -> list:
    """Every USEFeatures block in the model's config (germeval.cfg reads USE's word features next to
    its tables): pretrained features the peers get too, so that only the models differ."""
    return [dict(section) for section in blocks(model) if section.get("@layers") == USE_FEATURES]


def peer_embedding(words, vectors: bool, small: bool) -> dict:
    """The hash tables (width, attrs, rows) of the fofe_ner config's word embedding `words`, so that
    the peers embed tokens with the same tables (larger tables lift spancat too); EMBED when it has none."""
    if not vectors and all(key in words for key in ("width", "attrs", "rows")):
        return {key: words[key] for key in ("width", "attrs", "rows")}
    return EMBED if not small else {**EMBED, "width": 64}


STOCK = "-stock"  # suffix of a system trained with spaCy's config as it is ("spancat-stock")
SYSTEMS = ("fofe_ner", "ner", "spancat", "ner-stock", "spancat-stock")


def spacy_config(args, system: str, vectors: bool):
    """spaCy's own CPU efficiency config for `system`, with fofe_ner's embedding tables (lexeme tables
    and USE features included) and optimizer (spaCy's init config has weight decay 0.01 and no parameter averaging;
    our configs average); for "spancat-stock" and "ner-stock", spaCy's config as it is."""
    pipe = system.removesuffix(STOCK)
    out = subprocess.run([sys.executable, "-m", "spacy", "init", "config", "-", "--lang", args.lang, "--pipeline", pipe,
                          "--optimize", "efficiency"], capture_output=True, text=True, check=True).stdout
    from thinc.api import Config

    config = Config().from_str(out, interpolate=False)
    if pipe == "spancat":  # spaCy's suggester stops at 3 tokens; every system gets fofe_ner's n
        config["components"]["spancat"]["suggester"] = {
            "@misc": "spacy.ngram_range_suggester.v1", "min_size": 1, "max_size": args.max_length}
    if system.endswith(STOCK):
        return config
    fofe = fofe_config(args, vectors)
    model = config["components"]["tok2vec"]["model"]
    tables, words = fofe_embedding(fofe)
    settings = peer_embedding(words, vectors, args.small)
    model["embed"].update(settings)
    model["encode"]["width"] = settings["width"]  # spaCy ties the embedding width to the encoder's
    model["embed"]["include_static_vectors"] = vectors
    if tables:  # the same Brown clusters and word frequencies around spaCy's MultiHashEmbed
        model["embed"] = {**tables, "width": settings["width"], "embed": model["embed"]}
    use = use_features(fofe["components"]["fofe_ner"]["model"])
    if use:  # next to them, as in fofe_ner's concatenate; the encoder reads both
        model["embed"] = {"@layers": "concatenate.v1",
                          "*": {"hash": model["embed"], **{f"use{i}": block for i, block in enumerate(use)}}}
        model["encode"]["width"] = settings["width"] + sum(block["width"] for block in use)
    config["training"]["optimizer"] = dict(fofe["training"]["optimizer"])
    return config


def run_measured(command):
    """Run a command on one thread; return (seconds, peak RSS in MB)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env={**os.environ, **ONE_THREAD})
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(map(str, command))}")
    return seconds, usage.ru_maxrss / 1024


def for_training(config, max_steps: int):
    """The same steps and corpus reader for every system: spacy_fofe.CachedCorpus.v1 reads the .spacy
    files once (spacy_fofe/training/corpus.py), so no system's training time is mostly DocBin reading."""
    config["training"]["max_steps"] = max_steps
    for split in ("train", "dev"):
        config["corpora"][split]["@readers"] = "spacy_fofe.CachedCorpus.v1"
    return config


def train(args, name, config, vectors):
    """Train one system, or reuse a finished training of the same config: train_time.json is written
    only when `spacy train` has finished, so the model-best of an interrupted one is trained again, not
    reused, and so is one whose config.cfg differs from this run's (a changed config or --max-steps)."""
    out = Path(args.out) / name
    info = out / "train_time.json"
    config_text = for_training(config, args.max_steps).to_str()
    same_config = (out / "config.cfg").exists() and (out / "config.cfg").read_text() == config_text
    if info.exists() and (out / "model-best").exists() and same_config:
        return json.loads(info.read_text())
    if (out / "model-best").exists():
        why = "a different config" if info.exists() else "an unfinished training (no train_time.json)"
        print(f"== {name}: {out} holds {why}: training it again")
    shutil.rmtree(out / "model-tuned", ignore_errors=True)  # tuned from the model this training replaces
    info.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.cfg").write_text(config_text)
    corpus = Path(args.corpus)
    command = [sys.executable, "-m", "spacy", "train", str(out / "config.cfg"), "--output", str(out),
               "--paths.train", str(corpus / "train.spacy"), "--paths.dev", str(corpus / "dev.spacy"),
               "--gpu-id", str(args.gpu_id)]
    if vectors:
        command += ["--paths.vectors", args.vectors]
    seconds, peak = run_measured(command)
    times = {"train_seconds": round(seconds, 1), "train_peak_mb": round(peak)}
    info.write_text(json.dumps(times))
    return times


def tune(args, name) -> Path:
    """fofe_ner's dev-tuned pipeline (made once); spaCy's components have no such step."""
    out = Path(args.out) / name
    if not (out / "model-tuned").exists():
        subprocess.run([sys.executable, "-m", "spacy", "fofe", "tune", str(out / "model-best"),
                        str(Path(args.corpus) / "dev.spacy"), str(out / "model-tuned")], check=True)
    return out / "model-tuned"


def measure(model: str, test: str, result: str, gpu_id: int, cpu_ops: str = "numpy_blas") -> None:
    """Child process: scores and words/sec of one pipeline on the test set. cpu_ops "blis" runs
    fofe_ner's model on thinc's default NumpyOps (blis) instead of its numpy-BLAS Ops."""
    import spacy
    from spacy.training import Corpus
    from thinc.api import NumpyOps

    from spacy_fofe.pipeline.component import FOFENER
    from spacy_fofe.pipeline.scoring import score_fofe_ner

    device = "cpu"
    if gpu_id >= 0 and spacy.prefer_gpu(gpu_id):
        device = f"gpu {gpu_id}"
    # Start-up, apart: from loading to the first doc out (files, lazy tables, the first calls).
    start = time.perf_counter()
    nlp = spacy.load(model)
    if cpu_ops == "blis" and device == "cpu":
        for _, pipe in nlp.pipeline:
            if isinstance(pipe, FOFENER):
                for node in pipe.model.walk():
                    node.ops = NumpyOps()
    other = _other_texts(test, nlp.lang)
    nlp(other[0] if other else "Start .")
    startup = time.perf_counter() - start
    # A start-up pass over other text (the dev split), then the first pass over the test texts: text the
    # pipeline has never seen, as a user's new text is (spaCy makes its lexemes, features of new words).
    list(nlp.pipe(other, batch_size=1000))
    texts = [eg.reference.text for eg in Corpus(test)(spacy.blank(nlp.lang))]
    first = _timed(lambda: list(nlp.pipe(texts, batch_size=1000)))
    # Scored on spaCy's own reader's examples (what `spacy evaluate` does); timed on raw texts.
    examples = list(Corpus(test)(nlp))
    words = sum(len(eg.reference) for eg in examples)
    for eg, doc in zip(examples, nlp.pipe([eg.predicted for eg in examples], batch_size=1000)):
        eg.predicted = doc
    best = min(_timed(lambda: list(nlp.pipe(texts, batch_size=1000))) for _ in range(3))
    scores = score_fofe_ner(examples, spans_key="sc", ents="off")
    keep = {k: v for k, v in scores.items() if isinstance(v, (int, float)) or k.endswith("per_type")}
    Path(result).write_text(json.dumps({"words_per_second": round(words / best),
                                        "first_pass_words_per_second": round(words / first),
                                        "startup_seconds": round(startup, 2), "device": device, **keep}))


def _other_texts(test: str, lang: str) -> List[str]:
    """The start-up pass's texts: up to STARTUP_DOCS docs of the dev split beside the test file, if any."""
    import spacy
    from spacy.training import Corpus

    dev = Path(test).with_name("dev.spacy")
    if not dev.exists() or dev.resolve() == Path(test).resolve():
        return []
    return [eg.reference.text for _, eg in zip(range(STARTUP_DOCS), Corpus(dev)(spacy.blank(lang)))]


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", help="folder with train.spacy, dev.spacy, test.spacy (gold under 'sc')")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--lang", default="en")
    parser.add_argument("--nested", action="store_true")
    parser.add_argument("--systems", default="fofe_ner,ner,spancat",
                        help=f"any of {', '.join(SYSTEMS)} (-stock: spaCy's configs as they are)")
    parser.add_argument("--vectors", default=None, help="spaCy vectors folder; adds a with-vectors run of each "
                        "(not of the -stock systems: spaCy's efficiency configs read no vectors)")
    parser.add_argument("--vector-systems", default=None, help="those of --systems to run with vectors (default: "
                        "all; a -stock system runs once either way)")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--max-length", type=int, default=7)
    parser.add_argument("--gpu-id", type=int, default=-1)
    parser.add_argument("--speed-rounds", type=int, default=3, help="rounds of words/s measurement, the best kept")
    parser.add_argument("--small", action="store_true", help="small models (the demo corpus)")
    parser.add_argument("--fofe-config", default=None, help="path to fofe_ner's config for the run without vectors "
                        "(default: configs/germeval.cfg with --nested, else configs/conll.cfg)")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    parser.add_argument("--cpu-ops", choices=["numpy_blas", "blis"], default="numpy_blas",
                        help="with --measure: fofe_ner's CPU ops (blis: thinc's default, for the BLAS comparison)")
    parser.add_argument("--measure", nargs=3, metavar=("MODEL", "TEST", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure(*args.measure, args.gpu_id, args.cpu_ops)
    if not (args.corpus and args.out):
        parser.error("corpus and out are required")
    if args.speed_rounds < 1:
        parser.error("--speed-rounds must be at least 1: the first round also scores the systems")
    if systems_error(args.systems, args.vector_systems):
        parser.error(systems_error(args.systems, args.vector_systems))
    from tqdm import tqdm

    settings = [False] + ([True] if args.vectors else [])
    if args.vectors and not Path(args.vectors).exists():
        raise SystemExit(f"vectors {args.vectors} not found: run `spacy project run vectors` first")
    runs = benchmark_runs(args.systems, args.vector_systems, bool(args.vectors))
    rows = []
    for system, vectors in tqdm(runs, desc="benchmark", unit="system"):
        name = system + ("-vectors" if vectors else "")
        tqdm.write(f"== {name}: training (max_steps={args.max_steps})")
        config = fofe_config(args, vectors) if system == "fofe_ner" else spacy_config(args, system, vectors)
        info = train(args, name, config, vectors)
        model = tune(args, name) if system == "fofe_ner" else Path(args.out) / name / "model-best"
        tqdm.write(f"== {name}: measuring {model.name} on test")
        result = Path(args.out) / name / "measure.json"
        peak = measure_in_process(args, model, result)
        rows.append({"system": system, "vectors": vectors, **info, "inference_peak_mb": round(peak),
                     **json.loads(result.read_text()), "model": str(model)})
    speed_rounds(args, rows)
    configs = [os.path.relpath(fofe_config_path(args, v), Path.cwd()) for v in settings]
    write_reports(rows, Path(args.out), args.nested)
    body = ("Test split; span P/R/F1 over all levels under `sc`; fofe_ner tuned on dev; words/s: `nlp.pipe` over "
            f"the test texts, batch 1000, best of 3 in each of {args.speed_rounds} rounds that take the systems in "
            "turn, one process at a time, the best kept; first pass: the test texts once, after a start-up pass over "
            f"{STARTUP_DOCS} dev docs (text the pipeline has never seen), the best of the rounds; start-up: loading "
            "to the first doc out, seconds; peers: spaCy's `ner` / `spancat` with "
            "fofe_ner's embeddings (hash tables, lexeme tables, USE features where it has them) and optimizer "
            "(`-stock`: spaCy's efficiency config as it is). Plot: "
            f"`{(Path(args.out) / 'benchmark.png').as_posix()}`.\n\n" + (Path(args.out) / "benchmark.md").read_text())
    write_section(f"Benchmark on {Path(args.corpus).name}", body, configs=configs, path=Path(args.results),
                  raw=Path(args.out) / "benchmark.json")


def systems_error(systems: str, vector_systems: Optional[str]) -> Optional[str]:
    """What is wrong with --systems and --vector-systems, or None: a name that is no system, or a
    vector system not in --systems, would otherwise be found out hours into a run, or never."""
    names = systems.split(",")
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        return f"--systems: unknown {', '.join(unknown)}; the systems are {', '.join(SYSTEMS)}"
    missing = [name for name in (vector_systems or "").split(",") if name and name not in names]
    if missing:
        return f"--vector-systems: {', '.join(missing)} not in --systems {systems}"
    return None


def benchmark_runs(systems: str, vector_systems: Optional[str], vectors: bool) -> List[Tuple[str, bool]]:
    """(system, with vectors) for each training: every system without vectors, then those of vector_systems
    (default: all) with them, but for the `-stock` systems: spaCy's efficiency configs read no vectors, so they
    run once and stand as the stock peer of both settings."""
    names = systems.split(",")
    with_vectors = (vector_systems or systems).split(",") if vectors else []
    return [(s, False) for s in names] + [(s, True) for s in names if s in with_vectors and not s.endswith(STOCK)]


def measure_in_process(args, model: Path, result: Path) -> float:
    """`--measure` in a fresh process on one thread; its peak memory in MB."""
    _, peak = run_measured([sys.executable, __file__, "--measure", str(model),
                            str(Path(args.corpus) / "test.spacy"), str(result), "--gpu-id", str(args.gpu_id)])
    return peak


def speed_rounds(args, rows) -> None:
    """Measure the systems' words/s again, in turn, for --speed-rounds in all, and keep each one's best:
    this machine's speed drifts between minutes, and a ratio of two single passes carries that drift."""
    for round_ in range(2, args.speed_rounds + 1):
        for row in rows:
            name = row["system"] + ("-vectors" if row["vectors"] else "")
            print(f"== {name}: words/s, round {round_} of {args.speed_rounds}", flush=True)
            result = Path(args.out) / name / "speed.json"
            measure_in_process(args, Path(row["model"]), result)
            again = json.loads(result.read_text())
            for key in ("words_per_second", "first_pass_words_per_second"):
                row[key] = max(row[key], again[key])
            if "startup_seconds" in again:
                row["startup_seconds"] = min(row.get("startup_seconds", again["startup_seconds"]),
                                             again["startup_seconds"])


def write_reports(rows, out: Path, nested: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(rows, indent=2))
    header = "| system | vectors | P | R | F1 |" + (" strict F1 |" if nested else "") + \
        " words/s, first pass | words/s, warm | start-up s | train s | train peak MB | inference peak MB | device |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        strict = f" {100 * r['spans_sc_strict_f']:.2f} |" if nested else ""
        lines.append(f"| {r['system']} | {'yes' if r['vectors'] else 'no'} | {100 * r['spans_sc_p']:.2f} | "
                     f"{100 * r['spans_sc_r']:.2f} | {100 * r['spans_sc_f']:.2f} |{strict} "
                     f"{r['first_pass_words_per_second']} | {r['words_per_second']} | {r.get('startup_seconds', '')} | "
                     f"{r['train_seconds']} | {r['train_peak_mb']} | "
                     f"{r['inference_peak_mb']} | {r['device']} |")
    lines.append("")
    for vectors in (False, True):
        by_system = {r["system"]: r for r in rows if r["vectors"] == vectors or r["system"].endswith(STOCK)}
        fofe = by_system.get("fofe_ner")
        for peer in ("ner", "spancat", "ner" + STOCK, "spancat" + STOCK):
            if fofe and peer in by_system:
                p = by_system[peer]
                startup = ""
                if fofe.get("startup_seconds") and p.get("startup_seconds"):
                    startup = f", start-up {fofe['startup_seconds'] / p['startup_seconds']:.2f}x its time"
                lines.append(f"- vectors={'yes' if vectors else 'no'}: fofe_ner vs {peer}: F1 "
                             f"{100 * (fofe['spans_sc_f'] - p['spans_sc_f']):+.2f} points, words/s on a first pass "
                             f"{fofe['first_pass_words_per_second'] / p['first_pass_words_per_second']:.2f}x (warm "
                             f"{fofe['words_per_second'] / p['words_per_second']:.2f}x){startup}")
    (out / "benchmark.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'spacy-fofe[bench]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        label = r["system"] + (" + vectors" if r["vectors"] else "")
        ax.scatter(r["words_per_second"], 100 * r["spans_sc_f"], s=40)
        ax.annotate(label, (r["words_per_second"], 100 * r["spans_sc_f"]), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel(f"inference words/s ({rows[0]['device'] if rows else 'cpu'}, nlp.pipe)")
    ax.set_ylabel("test span F1")
    ax.set_title(out.name)
    fig.tight_layout()
    fig.savefig(out / "benchmark.png", dpi=120)


if __name__ == "__main__":
    main()
