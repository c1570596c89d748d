"""The benchmark of one corpus: every shipped fofe_ner config against spaCy's ner and spancat, in one run.

Each system is trained with each of --seeds (a transformer config with the first seed alone on a CPU,
with all of them on a GPU), on the same data, each fofe_ner config for its own shipped steps and the
peers for --peer-steps; trainings run --jobs at a time, one thread each. Peers: spaCy's own CPU
efficiency configs as `spacy init config` writes them (`ner-stock`, `spancat-stock`; only spancat's
n-gram sizes, 1 to --max-length, and the reader set), and optionally the same with the first config's
embedding tables and optimizer (`ner`, `spancat`: is it the model or the features?). fofe_ner's
decoding is tuned on dev (`spacy fofe tune`); nothing is chosen on test. Then, one process at a time
and with nothing else running, each model is scored on test once and timed: words/s of `nlp.pipe` over
the test texts (batch 1000) on a first pass (text the pipeline has never seen, after a start-up pass
over STARTUP_DOCS dev docs, whose objects are then frozen out of the garbage collector's reach, in a process
whose memory stays as a long-running process's: STEADY_MEMORY), then warm
(best of 3), and the same for the components alone (the
tokenizer's time aside: on new text it makes the lexemes of new words, for every pipeline alike), their
first pass also without its time making the USE rows of words a pipeline ships none for; the
start-up (loading to the first doc out) apart;
peak memory (max RSS) of that process. The first seed's model of each system is timed again in
--speed-rounds rounds that take the systems in turn, the best kept (this machine's speed drifts).
A config trained on another form of the corpus (CONFIG=FOLDER: whole documents) is compared with the
stock peers' first seeds timed on its own test texts ("PEER on FOLDER"), not on the sentences.

A training is reused only when its fingerprint matches what this run would train: the config text
(seed and steps included), the train and dev files, and the code (spaCy's and Thinc's versions, and
spacy_fofe's sources: all of them for a fofe_ner config, those its config runs for a peer). Writes
OUT/benchmark.json (one row per model, the raw figures), OUT/benchmark.md (mean and standard deviation
over the seeds, speed ratios to the stock peers) and the section "Benchmark on CORPUS" of
project/RESULTS.md with its raw figures in project/metrics/ (a run of some systems alone, --only, writes
"Benchmark on CORPUS: SYSTEMS" instead, leaving a fuller run's figures in place).

    python scripts/benchmark.py corpus/conll metrics/benchmark-conll --lang en \
        --configs ../configs/conll.cfg,../configs/conll_documents.cfg=corpus/conll-docs --paths.vectors vectors/glove50

--speed-only times the first seed's trained models again (none is trained; a model whose fingerprint does
not match is an error) into OUT/speed-DEVICE.json and .md and its own section: the GPU form (`--gpu-id 0`),
or, with --openblas-kernel KERNEL, on one core with OpenBLAS's KERNEL forced (OPENBLAS_CORETYPE, e.g.
Haswell: no AVX-512), a stand-in for another CPU (OUT/speed-cpu-openblas-KERNEL.json).
"""

import argparse
import ast
import gc
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

from results import RESULTS, mark_start, write_section
from spacy.util import load_config

ROOT = Path(__file__).resolve().parents[2]
# One thread for every system, in training and measurement alike: spaCy's blis runs on one,
# while numpy's BLAS (fofe_ner's matrix products, spacy_fofe/ml/ops.py) would take every core.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The timed processes' memory, as in a long-running process, so that a pass does not measure how fast the
# system supplies new pages: glibc's malloc takes arrays up to 32 MB (its largest setting) from the heap and keeps
# the heap between passes, so a pass reuses the memory the passes before it touched; and numpy does not advise
# huge pages for its arrays (a documented numpy setting): with the kernel's transparent huge pages on "madvise",
# defragmentation included, a first touch of each advised array stalls on compacting memory (on this project's
# virtual machines numpy.ones of 80 MB took 1.1 s, 0.03 s without the advice, and the peers' first pass halved).
STEADY_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
                 "NUMPY_MADVISE_HUGEPAGE": "0"}
# Docs a timed pass gives nlp.pipe at a time.
BATCH_DOCS = 1000
# Docs of other text (the dev split) run through a pipeline after loading and before the first pass: one
# whole batch, so that the process's first batch-sized arrays, on memory new to it, are made there (STEADY_MEMORY).
STARTUP_DOCS = BATCH_DOCS
# The embedding the `ner` / `spancat` peers get when the first config has no hash embedding to copy (the
# vectors configs): spaCy's MultiHashEmbed with our attributes and sizes.
EMBED = {"width": 128, "attrs": ["NORM", "LOWER", "PREFIX", "SUFFIX", "SHAPE"], "rows": [5000, 5000, 1000, 2500, 2500]}
# What in a config reads the pipeline's vectors.
VECTOR_LAYERS = ("spacy_fofe.WordVectors.v1", "spacy_fofe.TunedVectors.v1", "include_static_vectors = true")
LEXEME_EMBED = "spacy_fofe.LexemeTablesEmbed.v1"
USE_FEATURES = "spacy_fofe.USEFeatures.v1"
STOCK = "-stock"  # suffix of a peer trained with spaCy's config as it is ("spancat-stock")
PEERS = ("ner-stock", "spancat-stock", "ner", "spancat")
TRAINED = "trained.json"  # written in a model's folder when its training has finished: fingerprint, time, memory


class Run(NamedTuple):
    """One model to train: system name (a config's file stem or a peer), its config file (None for a
    peer), corpus folder, seed and output folder."""

    system: str
    config: Optional[Path]
    corpus: Path
    seed: int
    out: Path

    @property
    def is_fofe(self) -> bool:
        return self.config is not None


def config_specs(text: str) -> List[tuple]:
    """--configs "a.cfg,b.cfg=corpus/x": (config path, corpus folder or None) each."""
    specs = []
    for item in filter(None, text.split(",")):
        path, _, corpus = item.partition("=")
        specs.append((Path(path), Path(corpus) if corpus else None))
    return specs


def is_transformer(config_path: Path) -> bool:
    return "spacy-transformers" in config_path.read_text(encoding="utf8")


def plan(args) -> List[Run]:
    """Every model of the run: each config and each peer with each seed (a transformer config on a CPU
    with the first seed alone: a night on 2 cores holds one)."""
    runs = []
    for path, corpus in config_specs(args.configs):
        seeds = args.seeds[:1] if is_transformer(path) and args.gpu_id < 0 else args.seeds
        runs += [Run(path.stem, path, corpus or Path(args.corpus), seed, Path(args.out) / path.stem / f"seed{seed}")
                 for seed in seeds]
    for peer in filter(None, args.peers.split(",")):
        runs += [Run(peer, None, Path(args.corpus), seed, Path(args.out) / peer / f"seed{seed}") for seed in args.seeds]
    only = set(filter(None, getattr(args, "only", "").split(",")))
    return [run for run in runs if run.system in only] if only else runs


def fofe_config(args, run: Run):
    """The shipped config as it is, but for the seed, the paths given (--paths.NAME, only those it has), the
    corpus reader, and its steps capped at --max-steps (with a schedule's total_steps) where given."""
    config = load_config(run.config)
    for key, value in args.paths.items():
        if takes_path(run.config.read_text(encoding="utf8"), config, key):
            config["paths"][key] = value
    steps = config["training"]["max_steps"]
    if args.max_steps and args.max_steps < steps:
        config["training"]["max_steps"] = args.max_steps
        learn_rate = config["training"]["optimizer"].get("learn_rate")
        if isinstance(learn_rate, dict) and "total_steps" in learn_rate:
            learn_rate["total_steps"] = args.max_steps
    return with_reader(config, run.seed)


def takes_path(text: str, config, key: str) -> bool:
    """Whether a --paths.KEY is for this config: it names the key with a default to replace (a transformer,
    a source pipeline), or it is `vectors` and the config reads vectors (a config without them would only
    load and ship them)."""
    if key not in config["paths"]:
        return False
    if key == "vectors":
        return any(name in text for name in VECTOR_LAYERS)
    return config["paths"][key] is not None


def peer_steps(args) -> int:
    """The peers' steps: --peer-steps, else the first config's (capped at --max-steps)."""
    steps = args.peer_steps or load_config(config_specs(args.configs)[0][0])["training"]["max_steps"]
    return min(steps, args.max_steps) if args.max_steps else steps


def with_reader(config, seed: int):
    """The seed, and spacy_fofe.CachedCorpus.v1 for train and dev: it reads the .spacy files once
    (spacy_fofe/training/corpus.py), so no system's training time is mostly DocBin reading."""
    config["system"]["seed"] = seed
    for split in ("train", "dev"):
        config["corpora"][split]["@readers"] = "spacy_fofe.CachedCorpus.v1"
    return config


def spacy_config(args, system: str, seed: int = 0):
    """spaCy's own CPU efficiency config for the peer `system`, trained for peer_steps; for `ner` and
    `spancat`, with the first config's embedding tables (lexeme tables and USE features included) and
    optimizer (spaCy's init config has weight decay 0.01 and no parameter averaging; our configs average)."""
    pipe = system.removesuffix(STOCK)
    out = subprocess.run([sys.executable, "-m", "spacy", "init", "config", "-", "--lang", args.lang, "--pipeline", pipe,
                          "--optimize", "efficiency"], capture_output=True, text=True, check=True).stdout
    from thinc.api import Config

    config = Config().from_str(out, interpolate=False)
    config["training"]["max_steps"] = peer_steps(args)
    if pipe == "spancat":  # spaCy's suggester stops at 3 tokens; spancat gets fofe_ner's n
        config["components"]["spancat"]["suggester"] = {
            "@misc": "spacy.ngram_range_suggester.v1", "min_size": 1, "max_size": args.max_length}
    if not system.endswith(STOCK):
        with_our_embedding(config, load_config(config_specs(args.configs)[0][0]), args.small)
    return with_reader(config, seed)


def with_our_embedding(config, fofe, small: bool) -> None:
    """Give spaCy's config fofe_ner's embedding tables (around spaCy's MultiHashEmbed), USE features and
    optimizer, so that only the models differ."""
    model = config["components"]["tok2vec"]["model"]
    tables, words = fofe_embedding(fofe)
    settings = peer_embedding(words, small)
    model["embed"].update(settings)
    model["encode"]["width"] = settings["width"]  # spaCy ties the embedding width to the encoder's
    if tables:  # the same Brown clusters and word frequencies around spaCy's MultiHashEmbed
        model["embed"] = {**tables, "width": settings["width"], "embed": model["embed"]}
    use = use_features(fofe["components"]["fofe_ner"]["model"])
    if use:  # next to them, as in fofe_ner's concatenate; the encoder reads both
        model["embed"] = {"@layers": "concatenate.v1",
                          "*": {"hash": model["embed"], **{f"use{i}": block for i, block in enumerate(use)}}}
        model["encode"]["width"] = settings["width"] + sum(block["width"] for block in use)
    config["training"]["optimizer"] = dict(fofe["training"]["optimizer"])


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


def peer_embedding(words, small: bool) -> dict:
    """The hash tables (width, attrs, rows) of the fofe_ner config's word embedding `words`, so that
    the peers embed tokens with the same tables (larger tables lift spancat too); EMBED when it has none."""
    if all(key in words for key in ("width", "attrs", "rows")):
        return {key: words[key] for key in ("width", "attrs", "rows")}
    return EMBED if not small else {**EMBED, "width": 64}


def run_config(args, run: Run):
    return fofe_config(args, run) if run.is_fofe else spacy_config(args, run.system, run.seed)


def fingerprint(config_text: str, corpus: Path, every_source: bool = False) -> Dict[str, str]:
    """What a trained model depends on: its config, its train and dev files, and the code that trains it
    (with `every_source`, all of spacy_fofe's sources, whatever the config runs)."""
    return {"config": hashlib.sha256(config_text.encode()).hexdigest()[:16],
            "data": _digest([corpus / "train.spacy", corpus / "dev.spacy"]),
            "code": code_fingerprint(config_text, every_source)}


def code_fingerprint(config_text: str, every_source: bool = False) -> str:
    import spacy
    import thinc

    return _digest(code_sources(config_text, every_source)) + f"; spaCy {spacy.__version__}; Thinc {thinc.__version__}"


def _digest(paths) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.as_posix().encode() if not path.is_file() else path.read_bytes())
    return sha.hexdigest()[:16]


def code_sources(config_text: str, every_source: bool = False) -> List[Path]:
    """The spacy_fofe sources a config's training runs: all of them for a config with a fofe_ner component;
    for one that only names spacy_fofe functions (a peer's corpus reader), the modules that define them and
    the spacy_fofe modules these import, so that a change to fofe_ner does not retrain spaCy's own
    components (importing the package runs the other modules' registrations, which train nothing)."""
    package = ROOT / "spacy_fofe"
    if every_source or re.search(r'^factory = "fofe_ner"$', config_text, re.MULTILINE):
        return sorted(package.rglob("*.py"))
    from spacy.util import registry

    named = re.findall(r'^@(\w+) = "(spacy_fofe\.[^"]+)"$', config_text, re.MULTILINE)
    todo = [registry.find(kind, name)["module"] for kind, name in named]
    found: Dict[str, Path] = {}
    while todo:
        module = todo.pop()
        path = ROOT.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if module in found or not path.is_file():
            continue
        found[module] = path
        todo.extend(imported_modules(path, module, is_package=path.name == "__init__.py"))
    return sorted(found.values())


def imported_modules(path: Path, module: str, is_package: bool = False) -> List[str]:
    """The spacy_fofe modules that the source `path` (of `module`) imports, anywhere in it (a function's
    import included); for `from PACKAGE import NAME`, NAME too, which may be a module."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            source = ".".join(base + (node.module.split(".") if node.module else []))
            names += [source] + [f"{source}.{alias.name}" for alias in node.names]
    return [name for name in names if name == "spacy_fofe" or name.startswith("spacy_fofe.")]


def trained(run: Run, config_text: str) -> Optional[dict]:
    """The finished training of `run` (its TRAINED record) when its fingerprint is this run's, else None.
    A record of every source (as peers' were written before they had their own) matches when none changed."""
    record = run.out / TRAINED
    if not (record.exists() and (run.out / "model-best").exists()):
        return None
    found = json.loads(record.read_text())
    now = fingerprint(config_text, run.corpus)
    return found if found.get("fingerprint") in (now, {**now, "code": code_fingerprint(config_text, True)}) else None


def train_and_tune(args, run: Run) -> dict:
    """Train one model (or reuse its training when the fingerprint matches) and tune fofe_ner's decoding on
    dev; spaCy's output goes to train.log / tune.log in its folder. Returns its TRAINED record."""
    config_text = run_config(args, run).to_str()
    found = trained(run, config_text)
    if found is None:
        if run.out.exists():
            print(f"== {run.system} seed {run.seed}: {run.out} holds another or an unfinished training: "
                  "training it again", flush=True)
            shutil.rmtree(run.out)
        run.out.mkdir(parents=True)
        (run.out / "config.cfg").write_text(config_text)
        now = fingerprint(config_text, run.corpus)  # the code that trains it: taken before, as it may change meanwhile
        command = [sys.executable, "-m", "spacy", "train", str(run.out / "config.cfg"), "--output", str(run.out),
                   "--paths.train", str(run.corpus / "train.spacy"), "--paths.dev", str(run.corpus / "dev.spacy"),
                   "--gpu-id", str(args.gpu_id)]
        seconds, peak = run_measured(command, run.out / "train.log")
        found = {"fingerprint": now, "train_seconds": round(seconds, 1), "train_peak_mb": round(peak)}
        (run.out / TRAINED).write_text(json.dumps(found))
    if run.is_fofe and not (run.out / "model-tuned").exists():
        run_measured([sys.executable, "-m", "spacy", "fofe", "tune", str(run.out / "model-best"),
                      str(run.corpus / "dev.spacy"), str(run.out / "model-tuned")], run.out / "tune.log")
    return found


def model_of(run: Run) -> Path:
    return run.out / ("model-tuned" if run.is_fofe else "model-best")


def run_measured(command, log: Optional[Path] = None, kernel: str = "", timed: bool = False):
    """Run a command on one thread (its output to `log` when given); return (seconds, peak RSS in MB).
    With `kernel`, on one core (the first this process may use) with OpenBLAS's `kernel` forced; `timed`:
    a process that times passes (STEADY_MEMORY)."""
    start = time.perf_counter()
    with open(log, "w") if log else open(os.devnull, "w") as sink:
        output = {"stdout": sink, "stderr": subprocess.STDOUT} if log else {}
        if kernel:
            core = min(os.sched_getaffinity(0))
            output["preexec_fn"] = lambda: os.sched_setaffinity(0, {core})
        env = {**os.environ, **ONE_THREAD, **({"OPENBLAS_CORETYPE": kernel} if kernel else {}),
               **(STEADY_MEMORY if timed else {})}
        process = subprocess.Popen([str(part) for part in command], env=env, **output)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:]) if log else ""
        raise RuntimeError(f"failed: {' '.join(map(str, command))}" + (f" (log: {log})\n{tail}" if log else ""))
    return seconds, usage.ru_maxrss / 1024


def measure(model: str, test: str, result: str, gpu_id: int, cpu_ops: str = "numpy_blas") -> None:
    """Child process: scores and words/sec of one pipeline on the test set. cpu_ops "blis" runs
    fofe_ner's model on thinc's default NumpyOps (blis) instead of its numpy-BLAS Ops."""
    import spacy
    from spacy.training import Corpus

    from spacy_fofe.features.use_features import new_word_seconds
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
                pipe.model.to_cpu()  # thinc's default CPU ops
    other = _other_texts(test, nlp.lang)
    nlp(other[0] if other else "Start .")
    startup = time.perf_counter() - start
    # A start-up pass over other text (the dev split), then the first pass over the test texts: text the
    # pipeline has never seen, as a user's new text is (spaCy makes its lexemes, features of new words).
    list(nlp.pipe(other, batch_size=BATCH_DOCS))
    texts = [eg.reference.text for eg in Corpus(test)(spacy.blank(nlp.lang))]
    freeze_startup_objects()
    encoding_before = new_word_seconds()
    first = _timed_pass(nlp, texts)
    # The first pass's time making the USE rows of words the pipeline ships none for, measured apart.
    encoding = new_word_seconds() - encoding_before
    # Scored on spaCy's own reader's examples (what `spacy evaluate` does); timed on raw texts.
    examples = list(Corpus(test)(nlp))
    words = sum(len(eg.reference) for eg in examples)
    for eg, doc in zip(examples, nlp.pipe([eg.predicted for eg in examples], batch_size=BATCH_DOCS)):
        eg.predicted = doc
    warm = [_timed_pass(nlp, texts) for _ in range(3)]
    gc.unfreeze()  # for a caller in its own process (a test): the objects go back to the collector
    scores = score_fofe_ner(examples, spans_key="sc", ents="off")
    keep = {k: v for k, v in scores.items() if isinstance(v, (int, float)) or k.endswith("per_type")}
    if encoding > 0:
        keep.update(first_pass_new_word_seconds=round(encoding, 3),
                    **{NEW_WORDS_APART: round(words / (first[1] - encoding))})
    Path(result).write_text(json.dumps({"words_per_second": round(words / min(map(sum, warm))),
                                        "first_pass_words_per_second": round(words / sum(first)),
                                        "components_words_per_second": round(words / min(c for _, c in warm)),
                                        "components_first_pass_words_per_second": round(words / first[1]),
                                        "startup_seconds": round(startup, 2), "device": device,
                                        "openblas_kernel": openblas_kernel(), **keep}))


def freeze_startup_objects() -> None:
    """Move every object alive after the start-up out of Python's garbage collector's reach (gc.freeze), as a
    long-running service would: spaCy's imports leave ~370,000 tracked objects, and a full collection that walks
    them all in the middle of one timed pass (~0.15 s) lands in a single first pass at random, while the warm
    figure, the best of 3, escapes it. Objects made by the passes are collected as usual."""
    gc.collect()
    gc.freeze()


def openblas_kernel() -> str:
    """The kernel numpy's OpenBLAS runs (threadpoolctl's report), "" where it cannot be told."""
    try:
        import numpy  # noqa: F401  (threadpoolctl reports the libraries loaded)
        from threadpoolctl import threadpool_info
    except ImportError:
        return ""
    return next((info.get("architecture", "") for info in threadpool_info() if info.get("internal_api") == "openblas"),
                "")


def _timed_pass(nlp, texts: List[str]) -> Tuple[float, float]:
    """Seconds of one pass over `texts`: spaCy's tokenizer (on a first pass, it makes the lexemes of the
    words the vocab has not seen, as it does for every pipeline), then the components (batch 1000)."""
    start = time.perf_counter()
    docs = [nlp.make_doc(text) for text in texts]
    tokenized = time.perf_counter()
    list(nlp.pipe(docs, batch_size=BATCH_DOCS))
    return tokenized - start, time.perf_counter() - tokenized


def _other_texts(test: str, lang: str) -> List[str]:
    """The start-up pass's texts: up to STARTUP_DOCS docs of the dev split beside the test file, if any."""
    import spacy
    from spacy.training import Corpus

    dev = Path(test).with_name("dev.spacy")
    if not dev.exists() or dev.resolve() == Path(test).resolve():
        return []
    return [eg.reference.text for _, eg in zip(range(STARTUP_DOCS), Corpus(dev)(spacy.blank(lang)))]


def measure_in_process(args, run: Run, result: Path, cpu_ops: str = "numpy_blas") -> dict:
    """`--measure` in a fresh process on one thread: its figures, with its peak memory in MB."""
    _, peak = run_measured([sys.executable, __file__, "--measure", model_of(run), run.corpus / "test.spacy", result,
                            "--gpu-id", args.gpu_id, "--cpu-ops", cpu_ops], kernel=args.openblas_kernel, timed=True)
    return {**json.loads(result.read_text()), "inference_peak_mb": round(peak)}


# The components' first pass less its time making the USE rows of words a pipeline ships none for (measure).
NEW_WORDS_APART = "components_first_pass_words_per_second_without_new_words"
SPEED_KEYS = ("words_per_second", "first_pass_words_per_second", "components_words_per_second",
              "components_first_pass_words_per_second", NEW_WORDS_APART)


def speed_rounds(args, rows: List[dict], runs: List[Run]) -> None:
    """Time the first seed's model of each system again, in turn, for --speed-rounds in all (the first was
    the scoring pass), and keep each one's best words/s and least start-up; with --blis, fofe_ner's models
    (but over a transformer) on thinc's default ops (blis) too, in every round."""
    for round_ in range(1, args.speed_rounds + 1):
        for row, run in ((rows[i], runs[i]) for i in first_seeds([run.system for run in runs])):
            variants = [("numpy_blas", "")] if round_ > 1 else []
            if args.blis and run.is_fofe and not is_transformer(run.config):  # a transformer's time is torch's
                variants.append(("blis", "blis_"))
            for cpu_ops, prefix in variants:
                print(f"== {run.system}{' on blis' if prefix else ''}: words/s, round {round_} of "
                      f"{args.speed_rounds}", flush=True)
                again = measure_in_process(args, run, run.out / f"speed-{cpu_ops}.json", cpu_ops)
                for key in (key for key in SPEED_KEYS if key in again):
                    row[prefix + key] = max(row.get(prefix + key, 0), again[key])
                key = prefix + "startup_seconds"
                row[key] = min(row.get(key, again["startup_seconds"]), again["startup_seconds"])


def same_text_runs(runs: List[Run]) -> List[Run]:
    """The stock peers' first seeds again on the corpus of each config trained on another form of the data
    (whole documents), as "PEER on CORPUS": that config's speed is compared with theirs on the same texts."""
    corpora = dict.fromkeys(run.corpus for run in runs if run.is_fofe)
    peers = [runs[i] for i in first_seeds([run.system for run in runs])
             if not runs[i].is_fofe and runs[i].system.endswith(STOCK)]
    return [peer._replace(system=f"{peer.system} on {corpus.name}", corpus=corpus)
            for corpus in corpora for peer in peers if corpus != peer.corpus]


def first_seeds(systems: List[str]) -> List[int]:
    """The index of each system's first run (its first seed) in `systems`, the runs' system names in turn."""
    seen: Dict[str, int] = {}
    for i, system in enumerate(systems):
        seen.setdefault(system, i)
    return list(seen.values())


def mean_sd(values: List[float]) -> str:
    """'mean ± sd' in points (sample sd over the seeds), or the one value."""
    values = [100 * v for v in values if v is not None]
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def summary(rows: List[dict], nested: bool, accuracy: bool = True) -> str:
    """The accuracy table (mean ± sd over seeds; not with `accuracy` false) and the speed table (first
    seed's model) with its ratios to the stock peers."""
    systems: Dict[str, List[dict]] = {}
    for row in rows:
        systems.setdefault(row["system"], []).append(row)
    trained = {name: group for name, group in systems.items() if "timing_of" not in group[0]}
    lines = accuracy_table(trained, nested) + [""] if accuracy else []
    return "\n".join(lines + speed_table(systems)) + "\n"


def accuracy_table(systems: Dict[str, List[dict]], nested: bool) -> List[str]:
    levels = [("strict F1", "spans_sc_strict_f"), ("outer F1", "spans_sc_outer_f"),
              ("inner F1", "spans_sc_inner_f")] if nested else []
    header = ["system", "seeds", "P", "R", "F1", *(name for name, _ in levels), "train s", "train peak MB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, group in systems.items():
        cells = [name, ",".join(str(r["seed"]) for r in group)]
        cells += [mean_sd([r[key] for r in group]) for key in ("spans_sc_p", "spans_sc_r", "spans_sc_f")]
        cells += [mean_sd([r.get(key) for r in group]) for _, key in levels]
        cells += [f"{statistics.mean(r['train_seconds'] for r in group):.0f}",
                  str(max(r["train_peak_mb"] for r in group))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def speed_table(systems: Dict[str, List[dict]]) -> List[str]:
    """A row per system (and per system on blis), with its ratios to each stock peer timed on the same texts
    (a "PEER on CORPUS" row for a config with a corpus of its own, else the peer's own row)."""
    stock = {name: group[0] for name, group in systems.items() if name.endswith(STOCK)}
    same_text = {(group[0]["timing_of"], group[0]["corpus"]): group[0] for group in systems.values()
                 if "timing_of" in group[0]}
    apart = any(prefix + NEW_WORDS_APART in group[0] for group in systems.values() for prefix in ("", "blis_"))
    header = ["system", "words/s, first pass", "words/s, warm", "first pass / warm, components alone",
              *(["the same without new words' USE rows"] if apart else []), "start-up s", "inference peak MB",
              *(f"vs {peer}, first pass / warm" for peer in stock), "device"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, group in systems.items():
        for prefix in ("", "blis_"):
            row = group[0]
            if prefix + "words_per_second" not in row:
                continue
            components = [row.get(prefix + key) for key in ("components_words_per_second",
                                                            "components_first_pass_words_per_second")]
            cells = [name + (" (blis)" if prefix else ""), str(row[prefix + "first_pass_words_per_second"]),
                     str(row[prefix + "words_per_second"]), _ratio(components[1], components[0]),
                     *([_ratio(row.get(prefix + NEW_WORDS_APART), components[0])] if apart else []),
                     str(row.get(prefix + "startup_seconds", "")),
                     str(row["inference_peak_mb"]) if not prefix else ""]
            peers = [same_text.get((name, row.get("corpus")), own) for name, own in stock.items()]
            cells += [f"{row[prefix + 'first_pass_words_per_second'] / peer['first_pass_words_per_second']:.2f}x / "
                      f"{row[prefix + 'words_per_second'] / peer['words_per_second']:.2f}x" for peer in peers]
            lines.append("| " + " | ".join(cells + [row["device"]]) + " |")
    return lines


def _ratio(words_per_second: Optional[float], reference: Optional[float]) -> str:
    """A speed table's cell: words/s over its reference's, blank where either was not measured."""
    return f"{words_per_second / reference:.2f}" if words_per_second and reference else ""


def plot(rows: List[dict], path: Path) -> None:
    """Mean test F1 against words/s on a first pass, a point per system."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'spacy-fofe[bench]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in (rows[i] for i in first_seeds([row["system"] for row in rows]) if "timing_of" not in rows[i]):
        f1 = statistics.mean(100 * r["spans_sc_f"] for r in rows if r["system"] == row["system"])
        ax.scatter(row["first_pass_words_per_second"], f1, s=40)
        ax.annotate(row["system"], (row["first_pass_words_per_second"], f1), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel(f"words/s on a first pass ({rows[0]['device']}, nlp.pipe)")
    ax.set_ylabel("test span F1, mean over seeds")
    ax.set_title(path.parent.name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def train_all(args, runs: List[Run]) -> List[dict]:
    """Train and tune every run, --jobs at a time (transformer configs first: the longest); a failed one is
    reported with its log's end after the others have finished, and stops the benchmark."""
    order = sorted(range(len(runs)), key=lambda i: not (runs[i].is_fofe and is_transformer(runs[i].config)))
    records: Dict[int, dict] = {}
    failures = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(train_and_tune, args, runs[i]): i for i in order}
        for done, future in enumerate(as_completed(futures), 1):
            run = runs[futures[future]]
            try:
                records[futures[future]] = future.result()
                print(f"== [{done}/{len(runs)}] {run.system} seed {run.seed}: trained "
                      f"({records[futures[future]]['train_seconds']} s)", flush=True)
            except RuntimeError as err:
                failures.append(f"{run.system} seed {run.seed}: {err}")
                print(f"== [{done}/{len(runs)}] {run.system} seed {run.seed}: FAILED", flush=True)
    if failures:
        raise SystemExit("training failed:\n" + "\n".join(failures))
    return [records[i] for i in range(len(runs))]


def main() -> None:
    args = parse_args()
    if args.measure:
        return measure(*args.measure, args.gpu_id, args.cpu_ops)
    mark_start()
    runs = plan(args)
    for corpus in {run.corpus for run in runs}:
        missing = [split for split in ("train", "dev", "test") if not (corpus / f"{split}.spacy").exists()]
        if missing:
            raise SystemExit(f"{corpus}: no {', '.join(s + '.spacy' for s in missing)}: convert the corpus first")
    if args.speed_only:
        runs = [runs[i] for i in first_seeds([run.system for run in runs])]
        records = []
        for run in runs:
            record = trained(run, run_config(args, run).to_str())
            if record is None:
                raise SystemExit(f"{run.out}: no finished training of this config, data and code: run the "
                                 "benchmark without --speed-only first (or carry its OUT folder in)")
            if not model_of(run).exists():
                raise SystemExit(f"{model_of(run)} not found: run the benchmark without --speed-only first")
            records.append(record)
    else:
        print(f"== {len(runs)} trainings, {args.jobs} at a time, one thread each; logs in {args.out}/*/seed*/",
              flush=True)
        records = train_all(args, runs)
    rows = []
    for i, (run, record) in enumerate(zip(runs, records), 1):
        print(f"== [{i}/{len(runs)}] {run.system} seed {run.seed}: scoring {model_of(run).name} on test", flush=True)
        row = measure_in_process(args, run, run.out / ("speed-only.json" if args.speed_only else "measure.json"))
        rows.append({"system": run.system, "seed": run.seed, "config": str(run.config or ""),
                     "corpus": str(run.corpus), **record, **row, "model": str(model_of(run))})
    same_text = same_text_runs(runs)
    for run in same_text:
        print(f"== {run.system}: the peer timed on that corpus's test texts", flush=True)
        row = measure_in_process(args, run, run.out / f"measure-{run.corpus.name}.json")
        rows.append({"system": run.system, "seed": run.seed, "config": "", "corpus": str(run.corpus),
                     "timing_of": run.system.split(" on ")[0], **row, "model": str(model_of(run))})
    speed_rounds(args, rows, runs + same_text)
    out = Path(args.out)
    # The speed-only run keeps its own files beside the benchmark's, one per device.
    stem = f"speed-{rows[0]['device'].replace(' ', '-')}" if args.speed_only else "benchmark"
    if args.openblas_kernel:
        stem += f"-openblas-{args.openblas_kernel.lower()}"
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    table = summary(rows, args.nested, accuracy=not args.speed_only)
    (out / f"{stem}.md").write_text(table)
    print(table)
    plot(rows, out / f"{stem}.png")
    write_section(section_title(args, runs, rows[0]["device"]), protocol(args, runs, rows) + "\n\n" + table,
                  path=Path(args.results), raw=out / f"{stem}.json",
                  configs=[str(path) for path, _ in config_specs(args.configs)])


def section_title(args, runs: List[Run], device: str) -> str:
    """The RESULTS.md section a run rewrites: a run of some systems alone (--only) names them, so that it
    never replaces the figures of a run of others."""
    if args.section:
        return args.section
    title = (f"Speed on {Path(args.corpus).name}, {device}" if args.speed_only
             else f"Benchmark on {Path(args.corpus).name}")
    if args.openblas_kernel:
        title += f", one core, OpenBLAS {args.openblas_kernel} kernel"
    if args.only:
        title += ": " + ", ".join(systems(runs))
    return title


def systems(runs: List[Run]) -> List[str]:
    """The systems of the runs, each once, in the run's order."""
    return list(dict.fromkeys(run.system for run in runs))


def protocol(args, runs: List[Run], rows: Optional[List[dict]] = None) -> str:
    seeds = ", ".join(f"{system} {len([r for r in runs if r.system == system])}"
                      for system in systems(runs))
    scored = ("Speed only (the first seed's models of the benchmark, not retrained). " if args.speed_only else
              f"Test split, scored once per model; fofe_ner tuned on dev. Seeds per system: {seeds}; F1 etc.: mean "
              f"± sample sd over them. Peers trained {peer_steps(args)} steps; each fofe_ner config its own steps"
              + (f" (at most {args.max_steps})" if args.max_steps else "") + ". ")
    if args.only:
        left = sorted({path.stem for path, _ in config_specs(args.configs)} - {run.system for run in runs})
        scored += (f"Systems run: {', '.join(systems(runs))} (--only)"
                   + (f"; not run: {', '.join(left)}" if left else "") + ". ")
    if args.nested and any(run.system.startswith("ner") for run in runs):
        scored += "spaCy's `ner` learns the outer level (doc.ents) alone: on nested data it is the speed reference. "
    return (scored + f"Words/s: the first seed's model, `nlp.pipe` over the test texts, batch {BATCH_DOCS}, one "
            f"thread; first pass after a start-up pass over up to {STARTUP_DOCS} dev docs (the start-up's objects "
            "then frozen out of Python's garbage collector, gc.freeze; malloc keeping its heap between passes and "
            "numpy advising no huge pages, NUMPY_MADVISE_HUGEPAGE=0, as memory is in a long-running service), warm "
            "the best of 3 (the components alone: without the tokenizer's time, which on new text makes the "
            "lexemes of new words); "
            f"best of {args.speed_rounds} rounds taking the systems in turn. "
            + ("A config trained on another form of the corpus (whole documents) is compared with the stock peers "
               "timed on its test texts (\"PEER on CORPUS\"). " if same_text_runs(runs) else "")
            + ("Without new words' USE rows: the components' first pass less its time making the USE rows (the "
               "encoder over their pieces) of words the pipeline ships none for, timed apart in the same pass. "
               if any(NEW_WORDS_APART in row for row in rows or []) else "")
            + "Start-up: loading to the first doc out. Peak memory: max RSS of the process that scores and times the "
            "model." + (" " + kernel_sentence(args.openblas_kernel, rows or []) if args.openblas_kernel else ""))


def kernel_sentence(kernel: str, rows: List[dict]) -> str:
    """What a --openblas-kernel run changed, with the kernels numpy's OpenBLAS reported in its processes."""
    reported = sorted({row.get("openblas_kernel") or "not reported" for row in rows})
    return (f"Every process on one core, with OPENBLAS_CORETYPE={kernel} (OpenBLAS reported: {', '.join(reported)}): "
            "a stand-in for a CPU without this machine's kernels. It changes numpy's BLAS, which fofe_ner's "
            "products run on; spaCy's ner and spancat, and fofe_ner's (blis) rows, run on thinc's blis, which it "
            "leaves as it is.")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Any --paths.NAME VALUE is set in the configs that have paths.NAME.")
    parser.add_argument("corpus", nargs="?", help="folder with train.spacy, dev.spacy, test.spacy (gold under 'sc')")
    parser.add_argument("out", nargs="?", help="folder for the models and figures")
    parser.add_argument("--configs", default="", help="fofe_ner configs, comma-separated; CONFIG=FOLDER trains "
                        "and scores that one on another form of the corpus (whole documents)")
    parser.add_argument("--peers", default="ner-stock,spancat-stock", help=f"any of {', '.join(PEERS)}")
    parser.add_argument("--seeds", default="0,1,2", type=lambda text: [int(s) for s in text.split(",")])
    parser.add_argument("--lang", default="en", help="the peers' language")
    parser.add_argument("--nested", action="store_true", help="also report the outer, inner and strict F1")
    parser.add_argument("--max-steps", type=int, default=0, help="cap every training's steps (0: the configs' own)")
    parser.add_argument("--peer-steps", type=int, default=0, help="the peers' steps (0: the first config's)")
    parser.add_argument("--max-length", type=int, default=7, help="spancat's longest n-gram (fofe_ner's n)")
    parser.add_argument("--jobs", type=int, default=2, help="trainings side by side, one thread each")
    parser.add_argument("--gpu-id", type=int, default=-1)
    parser.add_argument("--speed-rounds", type=int, default=3, help="rounds of words/s measurement, the best kept")
    parser.add_argument("--blis", action="store_true", help="also time fofe_ner on thinc's default ops (blis)")
    parser.add_argument("--speed-only", action="store_true", help="time the trained models again; train nothing")
    parser.add_argument("--only", default="", help="these systems of the run alone (config file stems or peers), "
                        "e.g. the models one GPU lease can carry in with --speed-only")
    parser.add_argument("--section", default="", help="the RESULTS.md section to write (default from the corpus)")
    parser.add_argument("--openblas-kernel", default="", metavar="KERNEL", help="with --speed-only: time on "
                        "one core with OpenBLAS's KERNEL forced (OPENBLAS_CORETYPE, e.g. Haswell), as on another CPU")
    parser.add_argument("--small", action="store_true", help="the ner/spancat peers' fallback embedding at width 64")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    parser.add_argument("--cpu-ops", choices=["numpy_blas", "blis"], default="numpy_blas", help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=3, metavar=("MODEL", "TEST", "RESULT"), help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args()
    args.paths = {}
    while extra:
        name = extra.pop(0)
        if not name.startswith("--paths.") or not extra:
            parser.error(f"unrecognized argument {name} (only --paths.NAME VALUE pairs pass to the configs)")
        args.paths[name.removeprefix("--paths.")] = extra.pop(0)
    if args.measure:
        return args
    if not (args.corpus and args.out and args.configs):
        parser.error("corpus, out and --configs are required")
    error = settings_error(args)
    if error:
        parser.error(error)
    return args


def settings_error(args) -> Optional[str]:
    """What is wrong with the settings, or None: found now rather than hours into a run."""
    unknown = [peer for peer in args.peers.split(",") if peer and peer not in PEERS]
    if unknown:
        return f"--peers: unknown {', '.join(unknown)}; the peers are {', '.join(PEERS)}"
    missing = [str(path) for path, _ in config_specs(args.configs) if not path.exists()]
    if missing:
        return f"--configs: {', '.join(missing)} not found"
    stems = [path.stem for path, _ in config_specs(args.configs)]
    if len(set(stems)) < len(stems) or set(stems) & set(PEERS):
        return "--configs: two systems of the same name (the configs' file names name them)"
    unknown = set(filter(None, args.only.split(","))) - set(stems) - set(filter(None, args.peers.split(",")))
    if unknown:
        return f"--only: {', '.join(sorted(unknown))} not among the configs and peers of this run"
    if args.openblas_kernel and not args.speed_only:
        return "--openblas-kernel times trained models again: give it with --speed-only"
    if args.openblas_kernel and not args.openblas_kernel.isalnum():
        return f"--openblas-kernel: {args.openblas_kernel!r} is not an OpenBLAS core type name (e.g. Haswell)"
    if args.speed_rounds < 1 or args.jobs < 1 or not args.seeds:
        return "--speed-rounds and --jobs must be at least 1, and --seeds name one seed or more"
    return None


if __name__ == "__main__":
    main()
