"""`python -m spacy fofe ...`: the package's commands in spaCy's own CLI.

spaCy imports this module through the `spacy_cli` entry point when its CLI starts, and the
`fofe` command group joins spaCy's app. `python -m spacy_fofe ...` runs the same group.
"""

from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Callable, Dict, List, Optional

import spacy
import srsly
import typer
from spacy.cli import app
from spacy.scorer import Scorer
from thinc.api import fix_random_seed
from typer import Argument as Arg
from typer import Option as Opt
from wasabi import msg

from ..pipeline.gold import unknown_labels_note
from ..pipeline.loading import load_pipeline
from ..pipeline.scoring import predicted_levels
from ..training.corpus import read_examples
from . import convert as converters
from . import error_analysis, stats

SENTENCE_STARTS_HELP = "Give each doc the data's sentence starts, as a senter would (documents read whole)"
HELP = """FOFE-NER commands: convert corpora, tune decoding, evaluate with level
scores and an error-analysis page, and span statistics."""

fofe_cli = typer.Typer(name="fofe", help=HELP, no_args_is_help=True)
app.add_typer(fofe_cli)


class Format(str, Enum):
    columns = "columns"
    jsonl = "jsonl"


class Scheme(str, Enum):
    iob1 = "iob1"
    iob2 = "iob2"


class Objective(str, Enum):
    span = "span"
    strict = "strict"


def _fail(err: Exception) -> None:
    msg.fail(str(err), exits=1)


def _setup_gpu(gpu_id: int) -> None:
    """The GPU, or the CPU for -1, as spaCy's commands choose; one that cannot be used (no CuPy, no such
    device) is a clear error."""
    try:
        setup_gpu(gpu_id)
    except ValueError as err:
        _fail(ValueError(f"--gpu-id {gpu_id}: {err}"))


def setup_gpu(gpu_id: int, silent: bool = False) -> None:
    """What spaCy's commands do with --gpu-id: the GPU's ops for every model made from here on."""
    if gpu_id >= 0:
        if not silent:
            msg.info(f"Using GPU: {gpu_id}")
        spacy.require_gpu(gpu_id)
    elif not silent:
        msg.info("Using CPU")


def import_code(code_path: Optional[Path]) -> None:
    """Import the Python file given with --code, for the functions it registers (as spaCy's commands do)."""
    if code_path is None:
        return
    if not Path(code_path).exists():
        msg.fail("Path to Python code not found", str(code_path), exits=1)
    try:
        spacy.util.import_file("python_code", code_path)
    except Exception as err:  # whatever the user's file raises on import
        msg.fail(f"Couldn't load Python code: {code_path}", str(err), exits=1)


def _tokenizer(lang: Optional[str], model: Optional[str]):
    """The tokenizer that splits JSON lines with text: --model's (its language printed), or --lang's."""
    if model is not None:
        try:
            nlp = spacy.load(model)
        except (OSError, ValueError, ImportError) as err:
            raise ValueError(f"--model {model} cannot be loaded: {' '.join(str(err).split())[:200]}") from err
        msg.info(f"Text is split by {model}'s tokenizer (language {nlp.lang!r})")
        return nlp.tokenizer
    if lang is not None:
        try:
            return spacy.blank(lang).tokenizer
        except ImportError as err:
            raise ValueError(f"--lang {lang}: spaCy has no such language") from err
    return None  # records with tokens need none; one with text is an error that says to give --lang or --model


@fofe_cli.command("convert")
def convert_cli(
    # fmt: off
    input_path: Path = Arg(..., help="Corpus file: CoNLL-style columns or JSON lines", exists=True, dir_okay=False),
    output_path: Path = Arg(..., help="The .spacy file to write", dir_okay=False),
    file_format: Optional[Format] = Opt(None, "--format", "-f", help="Input format (default: jsonl for a .jsonl or "
                                        ".json file, else columns)"),
    token_column: int = Opt(0, "--token-column", help="Column of the token (0-based; negative counts from the end)"),
    tag_columns: str = Opt("-1", "--tag-columns", help="Tag columns, outer level first (GermEval: 1,2)"),
    scheme: Scheme = Opt(Scheme.iob2, "--scheme", help="iob1 (CoNLL-2003) or iob2 (BIO; IOBES, BILUO read too)"),
    separator: Optional[str] = Opt(None, "--separator", help="Column separator: 'tab' or a string (default: spaces)"),
    spans_key: str = Opt("sc", "--spans-key", "-sk", help="Write the spans to doc.spans[KEY]"),
    no_ents: bool = Opt(False, "--no-ents", help="Do not also write the outer level to doc.ents"),
    max_length: int = Opt(7, "--max-length", "-n", help="n: report the spans longer than this"),
    lang: Optional[str] = Opt(None, "--lang", help="Language whose tokenizer splits JSON lines that have text, not "
                              "tokens (e.g. en)"),
    model: Optional[str] = Opt(None, "--model", help="A pipeline whose tokenizer splits such text (instead of --lang)"),
    docs: bool = Opt(False, "--docs", help="A doc per document (from one -DOCSTART- line to the next, sentence "
                     "starts kept), not per sentence"),
    # fmt: on
):
    """Convert a column (IOB1/IOB2/IOBES/BILUO, a column per level) or JSON lines corpus
    to .spacy, with gold in doc.spans[KEY]. Prints what was kept, and every span dropped or
    repaired with its reason; a file it cannot read fully is an error and nothing is written."""
    unread_tags: Dict[int, Counter] = {}
    try:
        if output_path.suffix != ".spacy":
            raise ValueError(f"{output_path}: the output must be a .spacy file (spaCy's corpus readers skip "
                             "other names)")
        if output_path.exists() and output_path.resolve() == input_path.resolve():
            raise ValueError(f"{output_path} is the input file; writing it would destroy the corpus. Name another "
                             "output.")
        if max_length < 1:
            raise ValueError(f"--max-length must be at least 1, got {max_length}")
        if file_format is None:
            file_format = Format.jsonl if input_path.suffix.lower() in (".jsonl", ".json") else Format.columns
        if docs and file_format == Format.jsonl:
            raise ValueError("--docs groups the sentences of a column file; a JSON line is already one doc")
        if file_format == Format.jsonl:
            records = converters.read_jsonl(input_path, _tokenizer(lang, model))
        else:
            columns = _column_numbers(tag_columns)
            sep = "\t" if separator in ("tab", "\\t") else separator
            records = converters.read_columns(input_path, token_column, columns, scheme.value, sep, unread_tags)
            if docs:
                records = converters.group_documents(records, input_path)
        report = converters.convert(records, output_path, spans_key, not no_ents, max_length)
    except (ValueError, OSError) as err:
        _fail(err)
    msg.good(f"{input_path} -> {output_path}")
    print(report.summary())
    if report.dropped:
        msg.warn(f"{sum(report.dropped.values())} spans were dropped (see above)")
    for column, labels in sorted(unread_tags.items()):
        shown = ", ".join(label for label, _ in labels.most_common(6)) + (", ..." if len(labels) > 6 else "")
        msg.info(f"column {column} also holds tags ({shown}) and was not read; if it is a level of entities, "
                 f"name it in --tag-columns, outer level first (e.g. --tag-columns {column},{tag_columns})")


def _column_numbers(text: str) -> List[int]:
    """--tag-columns as column numbers: "1,2" -> [1, 2]."""
    try:
        return [int(c) for c in text.split(",")]
    except ValueError:
        raise ValueError(f"--tag-columns must be column numbers separated by commas (e.g. 1,2), got {text!r}") from None


@fofe_cli.command("tune")
def tune_cli(
    # fmt: off
    model: str = Arg(..., help="Trained pipeline (name or path)"),
    dev_path: Path = Arg(..., help="Dev data in .spacy format", exists=True, dir_okay=False),
    output_path: Path = Arg(..., help="Where to save the tuned pipeline (a directory)", file_okay=False),
    component: str = Opt("fofe_ner", "--component", help="Name of the fofe_ner component"),
    objective: Objective = Opt(Objective.span, "--objective", help="span F1 over all levels, or strict (level-aware)"),
    no_label_thresholds: bool = Opt(False, "--no-label-thresholds", help="Search levels only, no per-label thresholds"),
    holdout: float = Opt(0.0, "--holdout", help="Share of dev docs kept out of the search, to report on"),
    sentence_starts: bool = Opt(False, "--sentence-starts", help=SENTENCE_STARTS_HELP),
    code_path: Optional[Path] = Opt(None, "--code", "-c", help="Python file with registered functions to import"),
    use_gpu: int = Opt(-1, "--gpu-id", "-g", help="GPU ID or -1 for CPU"),
    # fmt: on
):
    """Tune the decoding (per-level algorithm, thresholds, per-label thresholds) on dev and
    save the pipeline. A setting changes only when dev F1 rises."""
    import_code(code_path)
    _setup_gpu(use_gpu)
    from ..training.tune import tune_pipeline

    try:
        tune_pipeline(Path(model), dev_path, output_path, component, objective=objective.value,
                      label_thresholds=not no_label_thresholds, holdout=holdout, sentence_starts=sentence_starts,
                      log=print)
    except (ValueError, OSError) as err:
        _fail(err)


class _KeepingScorer(Scorer):
    """spaCy's Scorer, keeping the predicted examples for the error analysis."""

    def score(self, examples, **kwargs):
        self.examples = list(examples)
        return super().score(self.examples, **kwargs)


@fofe_cli.command("evaluate")
def evaluate_cli(
    # fmt: off
    model: str = Arg(..., help="Trained pipeline (name or path)"),
    data_path: Path = Arg(..., help="Evaluation data in .spacy format", exists=True, dir_okay=False),
    output: Optional[Path] = Opt(None, "--output", "-o", help="JSON file for all scores", dir_okay=False),
    html_path: Optional[Path] = Opt(None, "--html", help="Write the error-analysis page (HTML) here", dir_okay=False),
    worst: int = Opt(20, "--worst", help="Documents shown on the HTML page, most errors first"),
    component: str = Opt("fofe_ner", "--component", help="Name of the fofe_ner component"),
    sentence_starts: bool = Opt(False, "--sentence-starts", help=SENTENCE_STARTS_HELP),
    train_path: Optional[Path] = Opt(None, "--train", exists=True, help="Training data (.spacy): also split recall "
                                     "and precision by whether a span's text is a training span with its label"),
    code_path: Optional[Path] = Opt(None, "--code", "-c", help="Python file with registered functions to import"),
    use_gpu: int = Opt(-1, "--gpu-id", "-g", help="GPU ID or -1 for CPU"),
    # fmt: on
):
    """Evaluate like `spacy evaluate`, plus the level-aware scores (outer, inner, strict),
    per-label scores, what became of the gold spans (found, or why not), with --train how the
    spans seen in training fare against the unseen ones, and optionally an HTML page of the
    errors per level with the worst documents' gold and predicted nested spans side by side."""
    import_code(code_path)
    if worst < 0:
        _fail(ValueError(f"--worst is a number of documents, at least 0; got {worst}"))
    _setup_gpu(use_gpu)
    fix_random_seed()
    try:
        nlp, ner = load_pipeline(model, component)
    except ValueError as err:
        _fail(err)
    key = ner.key
    scorer = _KeepingScorer(nlp=nlp)
    try:  # spaCy's reader says what is wrong with a file that is not a DocBin
        scores = nlp.evaluate(read_examples(data_path, nlp, sentence_starts), scorer=scorer)
        train = read_examples(train_path, nlp) if train_path is not None else None
    except ValueError as err:
        _fail(err)
    examples = scorer.examples
    note = unknown_labels_note(examples, key, ner.labels)
    if note:
        msg.warn(note)
    prefix = f"spans_{key}"
    results = {name: scores.get(f"{prefix}_{metric}") for name, metric in
               (("SPAN P", "p"), ("SPAN R", "r"), ("SPAN F", "f"))}
    results.update({"NER F": scores.get("ents_f"), "SPEED": scores.get("speed")})
    msg.table({name: (f"{value:.0f}" if name == "SPEED" else f"{100 * value:.2f}") for name, value in results.items()
               if isinstance(value, (int, float))}, title="Results")
    fates = error_analysis.gold_fates(ner, examples)
    # Flat data (no inner span in gold or predictions): the outer level is all of it.
    nested = any(fates["inner", fate] for fate in error_analysis.FATES) or \
        any(predicted_levels(eg, key)[1] for eg in examples)
    if nested:
        levels = [[level] + [f"{100 * (scores.get(f'{prefix}_{level}_{m}') or 0.0):.2f}" for m in "prf"]
                  for level in ("outer", "inner", "strict")]
        msg.table(levels, header=("level", "P", "R", "F"), aligns=("l", "r", "r", "r"),
                  title="Levels (GermEval 2014)")
    seen = None
    if train is not None:
        mentions = error_analysis.training_mentions((eg.reference for eg in train), key)
        seen = error_analysis.seen_in_training(examples, key, mentions)
    per_type = scores.get(f"{prefix}_per_type") or {}
    if per_type:
        rows = [[label] + [f"{100 * s[m]:.2f}" for m in "prf"] for label, s in sorted(per_type.items())]
        header = ("", "P", "R", "F")
        if seen is not None:  # where a label's recall is lost: on the names seen in training or on new ones
            rows = [row + [error_analysis.seen_recall(seen, category, row[0]) for category in ("seen", "unseen")]
                    for row in rows]
            header += ("R seen", "R unseen")
        msg.table(rows, header=header, aligns=("l",) + ("r",) * (len(header) - 1), title="Spans per type")
    header = ("level", "gold", *error_analysis.FATES)
    rows = error_analysis.fate_rows(fates)
    msg.table(rows if nested else rows[:1], header=header, aligns=("l",) + ("r",) * (len(header) - 1),
              title="What became of the gold spans")
    if seen is not None:
        header = error_analysis.SEEN_HEADER
        msg.table(error_analysis.seen_rows(seen), header=header, aligns=("l",) + ("r",) * (len(header) - 1),
                  title="Spans by whether their text is a training span")
        scores[f"{prefix}_seen"] = error_analysis.seen_counts(seen)
        scores[f"{prefix}_seen_per_type"] = error_analysis.seen_per_type(seen)
    scores[f"{prefix}_nested"] = nested  # whether the level table above was shown (scripts/errors.py reads it)
    scores[f"{prefix}_gold_fates"] = {level: {fate: fates[level, fate] for fate in error_analysis.FATES}
                                      for level in error_analysis.LEVELS}
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        srsly.write_json(output, scores)
        msg.good(f"Saved results to {output}")
    if html_path is not None:
        analysis = error_analysis.analyse(examples, key)
        analysis.fates = fates
        analysis.seen = seen
        html_path.parent.mkdir(parents=True, exist_ok=True)
        title = f"{component} errors: {model} on {data_path}"
        html_path.write_text(error_analysis.write_html(analysis, examples, key, title, worst), encoding="utf8")
        msg.good(f"Saved the error-analysis page to {html_path}")


@fofe_cli.command("ensemble")
def ensemble_cli(
    # fmt: off
    output_path: Path = Arg(..., help="Where to save the ensemble pipeline (a directory)", file_okay=False),
    models: List[str] = Arg(..., help="Two or more trained pipelines (names or paths) for the same task"),
    component: str = Opt("fofe_ner", "--component", help="Name of the fofe_ner component"),
    code_path: Optional[Path] = Opt(None, "--code", "-c", help="Python file with registered functions to import"),
    # fmt: on
):
    """Join pipelines trained apart (e.g. with different seeds) into one whose fofe_ner averages
    their fragment probabilities: more accurate than each, at the cost of running them all.
    The first pipeline gives the rest of the pipeline and the decoding: tune the result on dev."""
    import_code(code_path)
    from ..training.ensemble import merge_pipelines

    _join(merge_pipelines, models, component, output_path, "ensemble")


@fofe_cli.command("average")
def average_cli(
    # fmt: off
    output_path: Path = Arg(..., help="Where to save the averaged pipeline (a directory)", file_okay=False),
    models: List[str] = Arg(..., help="Two or more branches of one start (trained with the same init_weights)"),
    component: str = Opt("fofe_ner", "--component", help="Name of the fofe_ner component"),
    code_path: Optional[Path] = Opt(None, "--code", "-c", help="Python file with registered functions to import"),
    # fmt: on
):
    """Average the fofe_ner weights of branches: trainings started from one trained pipeline
    ([initialize.components.fofe_ner] init_weights) with different seeds. The average runs at one
    model's cost. The first pipeline gives the rest of the pipeline and the decoding: tune the
    result on dev."""
    import_code(code_path)
    from ..training.averaging import average_pipelines

    _join(average_pipelines, models, component, output_path, "average")


def _join(join: Callable, models: List[str], component: str, output_path: Path, what: str) -> None:
    """Save what `join` makes of the pipelines, or fail with its reason and write nothing."""
    try:
        nlp = join(models, component)
    except (ValueError, OSError) as err:
        _fail(err)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output_path)
    msg.good(f"Saved the {what} of {len(models)} pipelines to {output_path}")


@fofe_cli.command("stats")
def stats_cli(
    # fmt: off
    train_path: Path = Arg(..., help="Training data in .spacy format", exists=True, dir_okay=False),
    dev_path: Optional[Path] = Arg(None, help="Dev data (.spacy), for the overlap", exists=True, dir_okay=False),
    spans_key: str = Opt("sc", "--spans-key", "-sk", help="Read the gold from doc.spans[KEY] (else doc.ents)"),
    max_length: int = Opt(7, "--max-length", "-n", help="n: the longest span the component scores"),
    # fmt: on
):
    """Gold span statistics, as `spacy debug data` gives for ner: spans per label and
    nesting level, crossing spans, lengths against max_length, and train/dev overlap."""
    try:
        if max_length < 1:
            raise ValueError(f"--max-length must be at least 1, got {max_length}")
        corpora = {"train": stats.corpus_stats(train_path, spans_key)}
        if dev_path is not None:
            corpora["dev"] = stats.corpus_stats(dev_path, spans_key)
    except ValueError as err:  # spaCy's DocBin says what is wrong with a file that is not one
        _fail(err)
    for name, corpus in corpora.items():
        msg.divider(f"{name}: {corpus.docs} docs, {corpus.tokens} tokens, {corpus.spans} spans")
        rows, header = stats.label_table(corpus)
        if rows:
            msg.table(rows, header=header, aligns=["l"] + ["r"] * (len(header) - 1))
        else:
            msg.warn(f"no gold spans under doc.spans[{spans_key!r}] or doc.ents")
        print(stats.length_summary(corpus, max_length))
        if corpus.crossing:
            msg.warn(f"{corpus.crossing} pairs of spans cross (overlap without nesting); decoding keeps one of each")
        if corpus.on_space:
            msg.warn(f"{corpus.on_space} spans start or end on a whitespace token, where no prediction does: trim them")
    if "dev" in corpora:
        shared = stats.overlap(corpora["train"], corpora["dev"])
        msg.divider("train / dev")
        print(f"{shared['docs_in_both']} dev docs also occur in train; "
              f"{100 * shared['dev_mentions_seen']:.1f}% of dev mentions (text and label) occur in train")


class OutputFormat(str, Enum):
    jsonl = "jsonl"
    spacy = "spacy"


@fofe_cli.command("annotate")
def annotate_cli(
    # fmt: off
    pipeline: str = Arg(..., help="Trained pipeline (name or path), loaded once per worker"),
    inputs: str = Arg(..., help="Folder or glob of shards: .jsonl (\"text\", \"id\"), .txt (a doc per line), .spacy"),
    output: Path = Arg(..., help="Folder for one output (and one rejects file) per shard", file_okay=False),
    workers: int = Opt(2, "--workers", "-w", help="Worker processes of a local Dask cluster"),
    scheduler: Optional[str] = Opt(None, "--scheduler", help="A running Dask scheduler's address (not --workers)"),
    batch_size: int = Opt(256, "--batch-size", "-b", help="Docs per nlp.pipe batch"),
    output_format: OutputFormat = Opt(OutputFormat.jsonl, "--format", "-f", help="jsonl (spans as JSON) or spacy"),
    code_path: Optional[Path] = Opt(None, "--code", "-c", help="Python file with registered functions to import"),
    use_gpu: int = Opt(-1, "--gpu-id", "-g", help="GPU ID on each worker, or -1 for CPU"),
    # fmt: on
):
    """Annotate shards of documents on Dask, one task per shard. A shard's output appears
    only when complete; a rerun skips finished shards and redoes the rest. Bad records go to
    the shard's rejects file and never stop the run."""
    from .annotate import annotate

    try:
        import distributed  # noqa: F401  (the workers' package, before any work starts)
    except ImportError:
        _fail(ValueError("annotate runs on Dask, which is not installed: pip install 'spacy-fofe[dask]'"))
    import_code(code_path)
    try:
        load_pipeline(pipeline)  # a missing or damaged pipeline is one error here, not one per worker
        summary = annotate(pipeline, inputs, output, workers=workers, scheduler=scheduler, batch_size=batch_size,
                           gpu_id=use_gpu, fmt=output_format.value, code=str(code_path) if code_path else None)
    except (ValueError, OSError) as err:
        _fail(err)
    if summary.ignored:
        shown = ", ".join(p.name for p in summary.ignored[:5]) + (", ..." if len(summary.ignored) > 5 else "")
        msg.warn(f"{len(summary.ignored)} files of {inputs} are not shards (.jsonl, .txt, .spacy) and were not "
                 f"read: {shown}")
    if summary.skipped:
        msg.info(f"{summary.skipped} of {summary.shards} shards already had an output and were skipped")
    done = summary.shards - summary.skipped
    msg.good(f"{done} shards: {summary.docs} docs, {summary.words} words in {summary.seconds:.1f} s "
             f"({summary.words_per_second:.0f} words/s), {summary.rejects} rejects")
    if summary.per_worker:
        rows = [[worker, f"{seconds:.1f}"] for worker, seconds in sorted(summary.per_worker.items())]
        msg.table(rows, header=("worker", "seconds"), aligns=("l", "r"))
    if summary.rejects:
        msg.warn(f"{summary.rejects} bad records were skipped: see {output}/*.rejects.jsonl")
