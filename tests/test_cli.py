"""`python -m spacy fofe ...`: the commands, their outputs and their errors."""

import json
import re
import subprocess
import sys

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span
from typer.testing import CliRunner

from spacy_fofe.cli import fofe_cli
from spacy_fofe.cli.error_analysis import classify
from spacy_fofe.pipeline.span_geometry import depths

from helpers import NESTED, SMALL_MODEL, make_examples, train


def run(*args):
    return CliRunner().invoke(fofe_cli, [str(a) for a in args])


def said(result) -> str:
    """The command's output with its words joined by one space: wasabi wraps messages at 80
    columns, wherever the tmp path's length puts the break."""
    return " ".join(result.output.split())


def gold_file(nlp, path, data):
    DocBin(docs=[eg.reference for eg in make_examples(nlp, data)]).to_disk(path)
    return path


def test_spacy_lists_the_fofe_commands_through_the_entry_point():
    for command in (["-m", "spacy", "fofe", "--help"], ["-m", "spacy_fofe", "--help"]):
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert all(name in done.stdout for name in ("convert", "tune", "evaluate", "stats"))


def test_every_argument_has_help():
    for name in ("convert", "tune", "evaluate", "stats"):
        result = run(name, "--help")
        assert result.exit_code == 0
        command = next(c for c in fofe_cli.registered_commands if c.name == name)
        import inspect

        for parameter in inspect.signature(command.callback).parameters.values():
            assert parameter.default.help, f"{name}: {parameter.name} has no help"


def test_stats_counts_labels_per_level_lengths_and_overlap(tmp_path):
    nlp = spacy.blank("en")
    train = gold_file(nlp, tmp_path / "train.spacy", NESTED)
    dev = gold_file(nlp, tmp_path / "dev.spacy", NESTED[:2] + [("Lima is far .", [(0, 1, "LOC")])])
    result = run("stats", train, dev, "--max-length", "1")
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert "LOC 3 2 5" in lines  # train: LOC outer 3, inside ORG 2
    assert "ORG 2 0 2" in lines and "PER 4 0 4" in lines
    assert any("4 spans (36.36%) are longer than max_length=1" in line for line in lines)  # ORG x2, PER x2
    # dev mentions: University of Toronto, Toronto, Ann Lee (in train), Lima (not)
    assert any(line.startswith("2 dev docs also occur in train; 75.0% of dev mentions") for line in lines)
    assert "whitespace" not in result.output
    spaced = gold_file(nlp, tmp_path / "spaced.spacy", [("Ann  Lee left", [(0, 2, "PER"), (0, 3, "PER")])])
    assert "1 spans start or end on a whitespace token" in said(run("stats", spaced))  # "Ann " only


def test_nesting_depths_on_hand_made_spans():
    assert depths([(0, 10), (2, 6), (4, 8), (5, 6), (0, 10), (11, 12)]) == [0, 1, 1, 2, 0, 0]


def test_error_kinds_on_hand_made_sets():
    gold = {(0, 2, "ORG"), (3, 4, "PER"), (5, 7, "LOC"), (9, 10, "LOC"), (12, 13, "MISC")}
    pred = {(0, 2, "ORG"), (3, 4, "LOC"), (5, 6, "LOC"), (15, 16, "PER"), (12, 13, "MISC")}
    assert sorted(classify(gold, pred)) == [("boundary", (5, 7, "LOC")), ("label", (3, 4, "PER")),
                                            ("missed", (9, 10, "LOC")), ("spurious", (15, 16, "PER"))]


def test_evaluate_prints_levels_writes_scores_and_the_error_page(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    data = [NESTED[0], ("Ann Lee lives in Toronto .", [(0, 2, "PER"), (4, 5, "LOC"), (2, 3, "MISC")])]
    gold = gold_file(trained, tmp_path / "test.spacy", data)
    train = gold_file(trained, tmp_path / "train.spacy", NESTED)
    result = run("evaluate", tmp_path / "model", gold, "--output", tmp_path / "out" / "scores.json",
                 "--html", tmp_path / "out" / "errors.html", "--train", train)
    assert result.exit_code == 0, result.output
    assert "Levels" in result.output and "strict" in result.output
    assert "1 gold spans have labels the model does not predict (MISC: 1); they count as missed" in said(result)
    scores = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert scores["spans_sc_r"] == pytest.approx(5 / 6) and scores["spans_sc_p"] == 1.0
    assert {"spans_sc_outer_f", "spans_sc_inner_f", "spans_sc_strict_f"} <= set(scores)
    # five gold spans found (one inside "University of Toronto"); "lives" (MISC) scored as no entity
    fates = scores["spans_sc_gold_fates"]
    assert scores["spans_sc_nested"] is True  # the level table was shown
    assert fates["outer"]["found"] + fates["inner"]["found"] == 5 and fates["inner"]["found"] == 1
    assert fates["outer"]["no entity"] == 1 and sum(map(sum, (f.values() for f in fates.values()))) == 6
    assert "What became of the gold spans" in result.output
    # --train (NESTED): every gold span's text is a training span with its label but "lives" (MISC)
    seen = scores["spans_sc_seen"]
    assert seen["seen"] == {"gold": 5, "found": 5, "predicted": 5, "correct": 5}
    assert seen["unseen"] == {"gold": 1, "found": 0, "predicted": 0, "correct": 0}
    assert scores["spans_sc_seen_per_type"]["MISC"]["unseen"]["gold"] == 1
    assert scores["spans_sc_seen_per_type"]["PER"]["seen"] == {"gold": 2, "found": 2, "predicted": 2, "correct": 2}
    assert "R unseen" in result.output
    assert "Spans by whether their text is a training span" in result.output
    page = (tmp_path / "out" / "errors.html").read_text()
    assert "<h2>Spans by whether their text is a training span</h2>" in page
    assert "<h2>Scores and errors per level</h2>" in page and "<h2>What became of the gold spans</h2>" in page
    # the one error: "lives" (MISC), which nothing predicted, in doc 1; doc 0 is all right
    assert "<li>outer missed: &#x27;lives&#x27; [2, 3) MISC</li>" in page
    assert "doc 1: 1 errors" in page and "doc 0:" not in page
    assert page.count("<h4>gold</h4>") == 1 and "Toronto" in page


def test_evaluate_on_flat_data_shows_one_level(trained, tmp_path):
    model = tmp_path / "model"
    trained.to_disk(model)
    data = [NESTED[1], ("Ann Lee visited Paris .", [(0, 2, "PER"), (3, 4, "LOC")])]
    flat = gold_file(trained, tmp_path / "flat.spacy", data)
    result = run("evaluate", model, flat, "--output", tmp_path / "flat.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "flat.json").read_text())["spans_sc_nested"] is False
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert "Levels" not in result.output and "What became of the gold spans" in result.output
    assert "outer 4 4 0 0 0 0 0 0 0" in lines and not any(line.startswith("inner ") for line in lines)
    nested = run("evaluate", model, gold_file(trained, tmp_path / "nested.spacy", NESTED[:1]))
    assert "Levels" in nested.output and any(" ".join(line.split()).startswith("inner 1 1 ")
                                             for line in nested.output.splitlines())


def test_evaluate_and_tune_name_a_missing_component(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    gold = gold_file(trained, tmp_path / "dev.spacy", NESTED)
    for command in (["evaluate", tmp_path / "model", gold], ["tune", tmp_path / "model", gold, tmp_path / "out"]):
        result = run(*command, "--component", "ner")
        assert result.exit_code == 1 and "has no component 'ner'" in said(result)
    assert not (tmp_path / "out").exists()


def model_commands(model, gold, out):
    """Every fofe command that loads a pipeline, with `model` where the pipeline goes."""
    return [["evaluate", model, gold], ["tune", model, gold, out], ["ensemble", out, model, model],
            ["average", out, model, model], ["annotate", model, gold.parent / "shards", out]]


def damage(folder):
    """A saved pipeline whose fofe_ner weights are cut short, as an interrupted copy leaves them."""
    weights = folder / "fofe_ner" / "model"
    weights.write_bytes(weights.read_bytes()[:100])


@pytest.mark.parametrize("problem", ["missing", "damaged", "not a pipeline"])
def test_every_command_on_a_missing_or_damaged_pipeline_says_so_in_one_error_and_writes_nothing(
        trained, tmp_path, problem):
    gold = gold_file(trained, tmp_path / "dev.spacy", NESTED)
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.txt").write_text("Ann Lee lives in Toronto .\n", encoding="utf8")
    model = tmp_path / "model"
    if problem == "damaged":
        trained.to_disk(model)
        damage(model)
    elif problem == "not a pipeline":
        model.mkdir()
        (model / "notes.txt").write_text("hello", encoding="utf8")
    expected = {"missing": "no such pipeline", "damaged": "truncated, corrupted",
                "not a pipeline": "cannot be loaded as a spaCy pipeline"}[problem]
    for command in model_commands(model, gold, tmp_path / "out"):
        result = run(*command)
        assert result.exit_code == 1 and expected in said(result), (command, result.output)
        assert "Traceback" not in result.output and result.output.count("✘") == 1, (command, result.output)
        assert not (tmp_path / "out").exists(), command


def test_annotate_without_dask_says_which_extra_to_install(trained, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    trained.to_disk(tmp_path / "model")
    result = run("annotate", tmp_path / "model", tmp_path, tmp_path / "out")
    assert result.exit_code == 1 and "pip install 'spacy-fofe[dask]'" in said(result)
    assert not (tmp_path / "out").exists()


def test_tune_reports_progress_and_the_held_out_gain(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    gold = gold_file(trained, tmp_path / "dev.spacy", NESTED * 4)
    result = run("tune", tmp_path / "model", gold, tmp_path / "tuned", "--holdout", "0.25")
    assert result.exit_code == 0, result.output
    assert "[1/" in result.output and "outer level: algorithm x threshold" in result.output
    assert "on 15 docs" in result.output and "held-out dev (5 docs, not searched on)" in result.output
    assert (tmp_path / "tuned" / "fofe_ner" / "cfg").exists()
    assert "does not predict" not in result.output  # dev has only the model's labels


def test_tune_says_when_dev_has_labels_the_model_does_not_predict(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    data = NESTED + [("Ann Lee speaks German .", [(0, 2, "PER"), (3, 4, "LANGUAGE")])]
    result = run("tune", tmp_path / "model", gold_file(trained, tmp_path / "dev.spacy", data), tmp_path / "tuned")
    assert result.exit_code == 0, result.output
    assert "1 gold spans have labels the model does not predict (LANGUAGE: 1)" in said(result)
    assert "The model's labels: LOC, ORG, PER." in said(result)


def test_evaluate_tune_and_stats_say_when_the_data_is_not_a_docbin(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    (tmp_path / "dev.spacy").write_text("token\tB-PER\n")
    for command in (["evaluate", tmp_path / "model", tmp_path / "dev.spacy", "--output", tmp_path / "out.json"],
                    ["tune", tmp_path / "model", tmp_path / "dev.spacy", tmp_path / "out"],
                    ["stats", tmp_path / "dev.spacy"],
                    ["evaluate", tmp_path / "model", gold_file(trained, tmp_path / "test.spacy", NESTED), "--train",
                     tmp_path / "dev.spacy", "--output", tmp_path / "out.json"]):
        result = run(*command)
        assert result.exit_code == 1 and "doesn't look like the data is in DocBin (.spacy) format" in said(result)
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.json").exists()


def test_evaluate_and_tune_refuse_a_file_spacy_would_skip_and_a_docbin_without_docs(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    (tmp_path / "dev.tsv").write_text("Ann\tB-PER\n")
    DocBin(docs=[]).to_disk(tmp_path / "empty.spacy")
    for data, message in ((tmp_path / "dev.tsv", "dev.tsv is not a .spacy file"), (tmp_path / "empty.spacy",
                                                                                  "empty.spacy holds no docs")):
        for command in (["evaluate", tmp_path / "model", data, "--output", tmp_path / "out.json"],
                        ["tune", tmp_path / "model", data, tmp_path / "out"]):
            result = run(*command)
            assert result.exit_code == 1 and message in said(result), said(result)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.json").exists()


def test_a_negative_worst_and_a_gpu_that_cannot_be_used_are_clear_errors(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    dev = gold_file(trained, tmp_path / "dev.spacy", NESTED)
    result = run("evaluate", tmp_path / "model", dev, "--worst", "-1", "--html", tmp_path / "e.html")
    assert result.exit_code == 1 and "--worst is a number of documents, at least 0; got -1" in said(result)
    assert not (tmp_path / "e.html").exists()
    try:
        import cupy  # noqa: F401
    except ImportError:
        for command in (["evaluate", tmp_path / "model", dev], ["tune", tmp_path / "model", dev, tmp_path / "out"]):
            result = run(*command, "--gpu-id", "0")
            assert result.exit_code == 1 and "--gpu-id 0: Cannot use GPU, CuPy is not installed" in said(result)
            assert result.exception is None or isinstance(result.exception, SystemExit)


def test_tune_and_ensemble_refuse_to_write_a_pipeline_over_a_file(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    dev = gold_file(trained, tmp_path / "dev.spacy", NESTED)
    before = dev.read_bytes()
    for command in (["tune", tmp_path / "model", dev, dev], ["ensemble", dev, tmp_path / "model", tmp_path / "model"]):
        result = run(*command)
        assert result.exit_code == 2 and "Invalid value for 'output_path'" in said(result), said(result)
    assert dev.read_bytes() == before


@pytest.mark.parametrize("holdout,message", [("1.5", "holdout is the share"), ("0.99", "leaves no gold spans")])
def test_tune_with_a_bad_holdout_is_an_error_and_writes_nothing(trained, tmp_path, holdout, message):
    trained.to_disk(tmp_path / "model")
    gold = gold_file(trained, tmp_path / "dev.spacy", NESTED[:2])
    result = run("tune", tmp_path / "model", gold, tmp_path / "tuned", "--holdout", holdout)
    assert result.exit_code == 1 and message in said(result)
    assert not (tmp_path / "tuned").exists()


def test_sentence_starts_score_a_document_as_its_sentences(tmp_path):
    # A model whose codes stop at sentence starts, scored on the sentences and on one document of
    # them: with --sentence-starts the document gets the data's starts, so evaluate and tune see
    # what they see on the sentences; without, its codes run across them.
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": {**SMALL_MODEL, "stop_at_sentences": True},
                                     "overlap_rate": 1.0, "disjoint_rate": 1.0})
    train(nlp, make_examples(nlp, NESTED), steps=100)  # not fitted to 100%, so the context still matters
    nlp.to_disk(tmp_path / "model")
    sentences = [eg.reference for eg in make_examples(nlp, NESTED)]
    DocBin(docs=sentences).to_disk(tmp_path / "sentences.spacy")
    document = Doc(nlp.vocab, words=[t.text for doc in sentences for t in doc],
                   sent_starts=[t.i == 0 for doc in sentences for t in doc])
    offsets = numpy.cumsum([0] + [len(doc) for doc in sentences])
    document.spans["sc"] = [Span(document, s.start + offset, s.end + offset, s.label_)
                            for doc, offset in zip(sentences, offsets) for s in doc.spans["sc"]]
    DocBin(docs=[document]).to_disk(tmp_path / "document.spacy")
    scores = {}
    for name, data, flags in (("sentences", "sentences", []), ("starts", "document", ["--sentence-starts"]),
                              ("across", "document", [])):
        result = run("evaluate", tmp_path / "model", tmp_path / f"{data}.spacy", *flags,
                     "--output", tmp_path / f"{name}.json")
        assert result.exit_code == 0, result.output
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())
    keys = ("spans_sc_p", "spans_sc_r", "spans_sc_strict_f")
    assert [scores["starts"][k] for k in keys] == [scores["sentences"][k] for k in keys]
    assert [scores["across"][k] for k in keys] != [scores["sentences"][k] for k in keys]
    tuned = [run("tune", tmp_path / "model", tmp_path / f"{data}.spacy", tmp_path / data, *flags).output
             for data, flags in (("sentences", []), ("document", ["--sentence-starts"]))]
    figures = [re.findall(r"(?:before|after): ([0-9.]+)", output) for output in tuned]
    assert figures[0] == figures[1] and figures[0]


def test_spans_in_gold_only_as_ents_are_read(tmp_path):
    nlp = spacy.blank("en")
    doc = nlp.make_doc("Ann met Bob")
    doc.ents = [Span(doc, 0, 1, "PER"), Span(doc, 2, 3, "PER")]
    DocBin(docs=[doc]).to_disk(tmp_path / "ents.spacy")
    result = run("stats", tmp_path / "ents.spacy")
    assert result.exit_code == 0 and "PER 2 2" in [" ".join(line.split()) for line in result.output.splitlines()]
