"""The spaCy project's demo workflow, end to end (convert, train, tune, evaluate) on the demo corpus."""

import argparse
import gc
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import spacy
import srsly
from spacy.tokens import DocBin
from spacy.util import load_config

from spacy_fofe.features import use_features

from helpers import NESTED, make_examples, small_pipeline

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_workflow_runs_end_to_end(tmp_path):
    # The project reads ../configs, so copy both side by side.
    shutil.copytree(ROOT / "project", tmp_path / "project", ignore=shutil.ignore_patterns(
        "corpus", "training", "metrics", "packages", "vectors", "assets"))
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    subprocess.run([sys.executable, "-m", "spacy", "project", "run", "demo", "."], cwd=tmp_path / "project",
                   check=True)
    metrics = json.loads((tmp_path / "project" / "metrics" / "demo.json").read_text())
    assert metrics["spans_sc_f"] > 0.9  # the demo corpus is easy: a broken pipeline scores far lower
    assert "spans_sc_strict_f" in metrics
    assert (tmp_path / "project" / "training" / "demo" / "model-tuned" / "fofe_ner" / "cfg").exists()
    # `fofe evaluate` also says what became of every gold span; found on either level is span recall
    fates = metrics["spans_sc_gold_fates"]
    gold = sum(len(doc.spans["sc"]) for doc in DocBin().from_disk(
        tmp_path / "project" / "corpus" / "demo" / "test.spacy").get_docs(spacy.blank("en").vocab))
    assert sum(sum(level.values()) for level in fates.values()) == gold
    found = sum(level["found"] + level["other level"] for level in fates.values())
    assert found / gold == pytest.approx(metrics["spans_sc_r"])
    # and, given the training data, how the spans whose text was a training span fare against the rest
    seen = metrics["spans_sc_seen"]
    assert sum(counts["gold"] for counts in seen.values()) == gold
    assert sum(counts["found"] for counts in seen.values()) / gold == pytest.approx(metrics["spans_sc_r"])
    page = (tmp_path / "project" / "metrics" / "demo-errors.html").read_text()
    assert "<h2>What became of the gold spans</h2>" in page
    results = tmp_path / "RESULTS.md"
    subprocess.run([sys.executable, "scripts/errors.py", "metrics/demo.json", "--model", "training/demo/model-tuned",
                    "--data", "corpus/demo/test.spacy", "--section", "Errors on demo", "--results", results],
                   cwd=tmp_path / "project", check=True)
    section = results.read_text().split("## Errors on demo\n", 1)[1]
    outer = fates["outer"]
    assert f"| outer | {sum(outer.values()):,} | {outer['found']:,} (" in section
    assert f"| strict | {100 * metrics['spans_sc_strict_p']:.2f} | " in section
    assert f"| unseen | {seen['unseen']['gold']:,} | " in section


def test_the_readme_main_command_installs_what_the_main_job_needs():
    """The main job runs `all` (CoNLL-2003) where the corpus is present: its configs' lexeme tables
    need the lookups extra, its `vectors` step the vectors extra."""
    command = next(line for line in (ROOT / "README.md").read_text().splitlines() if "project run main" in line)
    extras = set(re.search(r'pip install -e "\.\[([a-z,]+)\]"', command).group(1).split(","))
    project = srsly.read_yaml(ROOT / "project" / "project.yml")
    steps = {step for name in ("all", "demo") for step in project["workflows"][name]}
    configs = {project["vars"]["conll_config"], project["vars"]["demo_config"]}
    if any("LexemeTablesEmbed" in (ROOT / "project" / config).read_text() for config in configs):
        assert "lookups" in extras, command
    if "vectors" in steps:
        assert "vectors" in extras, command


def load_benchmark_script(name="benchmark"):
    """project/scripts is not a package: load a script by path (with its folder importable, as a script has)."""
    scripts = str(ROOT / "project" / "scripts")
    if scripts not in sys.path:
        sys.path.append(scripts)
    spec = importlib.util.spec_from_file_location(name, ROOT / "project" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ablation_variants_change_only_what_they_name(tmp_path):
    ablation = load_benchmark_script("ablation")
    base = ROOT / "configs" / "conll.cfg"
    full = ablation.variant_config(base, "full")
    model = full["components"]["fofe_ner"]["model"]
    v2 = dict(model)
    ablation.as_v2(v2)  # a switch is set on FOFENER.v2, with v3's settings written out
    assert model["@architectures"] == "spacy_fofe.FOFENER.v3" and v2["@architectures"] == "spacy_fofe.FOFENER.v2"
    for group in ablation.GROUPS:
        changed = ablation.variant_config(base, f"-{group}")["components"]["fofe_ner"]["model"]
        assert changed.pop(group) is False and changed == v2
    plain = ablation.variant_config(base, "-lexeme_tables")["components"]["fofe_ner"]["model"]["tok2vec"]
    assert plain == model["tok2vec"]["embed"]
    learned = ablation.variant_config(base, "-learned_alphas")["components"]["fofe_ner"]["model"]
    assert learned == {**v2, "learn_word_alpha": False, "learn_char_alpha": False}
    assert ablation.variant_config(base, "+learned_alphas") is None  # the base itself
    for option in ablation.OPTIONS:
        changed = ablation.variant_config(base, "-" + option)["components"]["fofe_ner"]["model"]
        assert changed == {**v2, option: False}
        assert ablation.variant_config(base, "+" + option) is None  # the base itself
    tables = model["tok2vec"]
    plain = ablation.variant_config(base, "-cluster_prefix_bits")["components"]["fofe_ner"]["model"]["tok2vec"]
    assert tables["cluster_prefix_bits"] and plain == {k: v for k, v in tables.items() if k != "cluster_prefix_bits"}
    for option in ("hyphen_parts", "compound_heads"):
        assert ablation.variant_config(base, f"-{option}") is None  # conll.cfg has neither
    german = load_config(ROOT / "configs" / "germeval.cfg")["components"]["fofe_ner"]["model"]["tok2vec"]
    assert ablation.variant_config(ROOT / "configs" / "germeval.cfg", "-compound_heads") is None  # off there
    for option in ("hyphen_parts",):
        assert german["*"]["tables"][option]
        changed = ablation.variant_config(ROOT / "configs" / "germeval.cfg", f"-{option}")
        changed_tables = changed["components"]["fofe_ner"]["model"]["tok2vec"]["*"]["tables"]
        assert changed_tables == {k: v for k, v in german["*"]["tables"].items() if k != option}
    # germeval.cfg's USE features out: its tables alone are the tok2vec; a config without them is skipped
    changed = ablation.variant_config(ROOT / "configs" / "germeval.cfg", "-use_features")
    assert changed["components"]["fofe_ner"]["model"]["tok2vec"] == german["*"]["tables"]
    assert ablation.variant_config(ROOT / "configs" / "conll.cfg", "-use_features") is None
    # germeval.cfg's sentence vector and R-Drop off, nothing else; conll.cfg has neither, so both are skipped
    full_german = load_config(ROOT / "configs" / "germeval.cfg")
    assert full_german["components"]["fofe_ner"]["consistency"] > 0 and german["*"]["use"]["sentence"] is True
    no_vector = ablation.variant_config(ROOT / "configs" / "germeval.cfg", "-sentence_vector")
    use = no_vector["components"]["fofe_ner"]["model"]["tok2vec"]["*"]["use"]
    assert use == {**german["*"]["use"], "sentence": False}
    use["sentence"] = True
    assert no_vector == full_german
    no_rdrop = ablation.variant_config(ROOT / "configs" / "germeval.cfg", "-consistency")
    assert no_rdrop["components"]["fofe_ner"].pop("consistency") == 0.0
    assert no_rdrop == {**full_german, "components": {"fofe_ner": {
        k: v for k, v in full_german["components"]["fofe_ner"].items() if k != "consistency"}}}
    for name in ("-sentence_vector", "-consistency"):
        assert ablation.variant_config(ROOT / "configs" / "conll.cfg", name) is None
    # the width the section reports: a concatenate's parts summed
    assert ablation.token_width(german) == german["*"]["tables"]["width"] + german["*"]["use"]["width"]
    assert ablation.token_width(changed["components"]["fofe_ner"]["model"]["tok2vec"]) == german["*"]["tables"]["width"]
    assert ablation.token_width({"@layers": "concatenate.v1", "*": {"a": {"width": 8}, "b": {}}}) is None
    three = load_config(ROOT / "configs" / "conll_vectors.cfg")
    parts = dict(three["components"]["fofe_ner"]["model"]["tok2vec"]["*"])
    three["components"]["fofe_ner"]["model"]["tok2vec"]["*"]["use"] = german["*"]["use"]
    three.to_disk(tmp_path / "three.cfg")
    two = ablation.variant_config(tmp_path / "three.cfg", "-use_features")["components"]["fofe_ner"]["model"]
    assert two["tok2vec"]["@layers"] == "concatenate.v1" and two["tok2vec"]["*"] == parts
    # tables inside a concatenation (as in conll_vectors.cfg) are found there
    nested = load_config(ROOT / "configs" / "conll_vectors.cfg")
    nested["components"]["fofe_ner"]["model"]["tok2vec"]["*"]["hash"]["cluster_prefix_bits"] = [4]
    nested.to_disk(tmp_path / "nested.cfg")
    plain = ablation.variant_config(tmp_path / "nested.cfg", "-cluster_prefix_bits")
    assert "cluster_prefix_bits" not in plain["components"]["fofe_ner"]["model"]["tok2vec"]["*"]["hash"]
    parts = nested["components"]["fofe_ner"]["model"]["tok2vec"]["*"]
    hash_only = ablation.variant_config(tmp_path / "nested.cfg", "-lexeme_tables")
    hash_only = hash_only["components"]["fofe_ner"]["model"]["tok2vec"]["*"]
    assert hash_only == {**parts, "hash": parts["hash"]["embed"]}  # the other parts as they were
    assert ablation.variant_config(ROOT / "configs" / "demo.cfg", "-lexeme_tables") is None  # demo has no tables


def test_ablation_commands_of_the_project_name_variants_that_apply_to_their_configs():
    """A wrong variant in project.yml would surface only hours into `spacy project run ablation-*`."""
    ablation = load_benchmark_script("ablation")
    project = srsly.read_yaml(ROOT / "project" / "project.yml")
    runs = [re.sub(r"\$\{vars\.(\w+)\}", lambda m: str(project["vars"][m.group(1)]), line)
            for command in project["commands"] for line in command.get("script", []) if "scripts/ablation.py" in line]
    assert len(runs) >= 2  # ablation-conll and ablation-germeval
    for line in runs:
        words = line.split()
        option = {flag: words[i + 1] for i, flag in enumerate(words[:-1]) if flag.startswith("--")}
        variants = option["--variants"].split(",")
        assert set(variants) <= set(ablation.VARIANTS), line
        config = ROOT / "project" / option["--config"]
        assert all(ablation.variant_config(config, name) is not None for name in variants), line
        assert "--docs-corpus" in option or not set(variants) & set(ablation.NEEDS_DOCS), line
        assert "--raw-text" in option or "+pretraining" not in variants, line


def test_ablation_scores_dev_only(tmp_path, monkeypatch):
    """The ablation decides what a config keeps: it scores and times on dev (and the dev documents),
    never on test, which the benchmark alone scores."""
    ablation = load_benchmark_script("ablation")
    commands = []

    def fake_run(command):
        commands.append([str(part) for part in command])
        output = Path(commands[-1][commands[-1].index("--output") + 1] if "--output" in commands[-1]
                      else commands[-1][5])
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps({"spans_sc_f": 0.5, "spans_sc_strict_f": 0.4, "words_per_second": 9}))

    monkeypatch.setattr(ablation, "run", fake_run)
    args = argparse.Namespace(out=str(tmp_path), corpus="corpus", docs_corpus="docs", strict=True, gpu_id=-1)
    assert ablation.evaluate(args, "full", tmp_path / "model") == {"dev": 50.0, "dev_strict": 40.0,
                                                                   "dev_documents": 50.0}
    assert ablation.words_per_second(args, {"full": tmp_path / "model"}, 1) == {"full": 9}
    assert len(commands) == 3 and all("test.spacy" not in " ".join(command) for command in commands)
    assert [Path(command[4 if "--measure" in command else 6]).as_posix() for command in commands] == [
        "corpus/dev.spacy", "docs/dev.spacy", "corpus/dev.spacy"]


def test_ablation_trains_both_forms_from_one_folder_each(tmp_path):
    ablation = load_benchmark_script("ablation")
    for form in ("sentences", "documents"):
        (tmp_path / form).mkdir()
        for split in ("train", "dev"):
            (tmp_path / form / f"{split}.spacy").write_bytes(b"")
    args = argparse.Namespace(corpus=str(tmp_path / "sentences"), docs_corpus=str(tmp_path / "documents"))
    train, dev = ablation.training_paths(args, "+both_forms", tmp_path / "out")
    assert sorted(p.resolve() for p in train.iterdir()) == sorted(
        (tmp_path / form / "train.spacy").resolve() for form in ("sentences", "documents"))
    assert len(list(dev.iterdir())) == 2
    assert ablation.training_paths(args, "+documents", tmp_path / "out") == (
        tmp_path / "documents" / "train.spacy", tmp_path / "documents" / "dev.spacy")


@pytest.mark.slow
def test_an_interrupted_training_is_trained_again_not_reused(tmp_path, monkeypatch):
    """A killed `spacy train` leaves a model-best of its last evaluation: the ablation and the
    ensemble script reuse only trainings that finished, and drop what was derived
    from the old model; the ensemble script also trains again when its config (name or file), its
    overrides or a teacher changed."""
    ablation = load_benchmark_script("ablation")
    commands = []
    monkeypatch.setattr(ablation, "run", commands.append)
    args = argparse.Namespace(out=str(tmp_path / "abl"), config=str(ROOT / "configs" / "demo.cfg"), corpus="corpus",
                              docs_corpus=None, max_steps=5, seed=0)
    variant = tmp_path / "abl" / "full"
    (variant / "model-best").mkdir(parents=True)
    (variant / "test.json").write_text("{}")
    ablation.train_variant(args, "full")
    assert len(commands) == 1 and not (variant / "test.json").exists()
    ablation.train_variant(args, "full")
    assert len(commands) == 1  # finished: reused

    ensemble = load_benchmark_script("ensemble")
    monkeypatch.setattr(ensemble, "run", commands.append)
    args = argparse.Namespace(out=str(tmp_path / "ens"), config=str(tmp_path / "ens.cfg"), corpus="corpus",
                              overrides=[])
    Path(args.config).write_text("")
    seed = tmp_path / "ens" / "seed1"
    for made in ("seed1/model-best", "seed1/model-tuned", "ensemble0+1/model-best", "ensemble0+2/model-best",
                 "distilled0/model-best"):
        (tmp_path / "ens" / made).mkdir(parents=True)
    (seed / "test.json").write_text("{}")
    ensemble.train_seed(args, 1)
    assert len(commands) == 2 and not (seed / "model-tuned").exists() and not (seed / "test.json").exists()
    assert not (tmp_path / "ens" / "ensemble0+1").exists() and (tmp_path / "ens" / "ensemble0+2").exists()
    assert not (tmp_path / "ens" / "distilled0").exists()  # its teacher held the old seed 1
    ensemble.train_seed(args, 1)
    assert len(commands) == 2  # finished: reused
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    args.overrides = ["--initialize.components.fofe_ner.teacher", str(teacher)]
    ensemble.train_seed(args, 1)
    assert len(commands) == 3  # other overrides: trained again
    ensemble.train_seed(args, 1)
    assert len(commands) == 3
    later = (seed / ablation.FINISHED).stat().st_mtime + 10
    os.utime(teacher, (later, later))
    ensemble.train_seed(args, 1)
    assert len(commands) == 4  # a teacher changed since: trained again
    earlier = (seed / ablation.FINISHED).stat().st_mtime - 10
    os.utime(teacher, (earlier, earlier))  # dated into the future above
    ensemble.train_seed(args, 1)
    assert len(commands) == 4  # config and teacher unchanged since: reused
    (teacher / "model").write_text("")
    later = (seed / ablation.FINISHED).stat().st_mtime + 10
    os.utime(teacher / "model", (later, later))
    os.utime(teacher, (earlier, earlier))  # a file saved again in place leaves its folder's time as it was
    ensemble.train_seed(args, 1)
    assert len(commands) == 5  # a file of the teacher written since: trained again
    earlier = (seed / ablation.FINISHED).stat().st_mtime - 10
    os.utime(teacher / "model", (earlier, earlier))
    os.utime(teacher, (earlier, earlier))
    later = (seed / ablation.FINISHED).stat().st_mtime + 10
    os.utime(args.config, (later, later))
    ensemble.train_seed(args, 1)
    assert len(commands) == 6  # the config edited since: trained again
    args.config = str(tmp_path / "other.cfg")
    ensemble.train_seed(args, 1)
    assert len(commands) == 7  # another config: trained again


def test_every_project_command_names_each_dependency_and_output_as_a_path():
    """Two variables side by side in a deps list interpolate into one string ("a, b"), which weasel
    then reports missing: every entry must be one existing-looking path."""
    from weasel.util import load_project_config

    config = load_project_config(ROOT / "project")
    for command in config["commands"]:
        for path in command.get("deps", []) + command.get("outputs", []):
            assert ", " not in path and "${" not in path, (command["name"], path)


def demo_corpus(corpus: Path) -> Path:
    """The demo corpus's splits as .spacy files in `corpus`."""
    for split in ("train", "dev", "test"):
        subprocess.run([sys.executable, "-m", "spacy", "fofe", "convert", ROOT / "project" / "demo" / f"{split}.jsonl",
                        corpus / f"{split}.spacy", "--format", "jsonl"], check=True, capture_output=True)
    return corpus


def test_ablation_trains_evaluates_and_writes_its_section(tmp_path):
    corpus = demo_corpus(tmp_path / "corpus")
    results = tmp_path / "RESULTS.md"
    subprocess.run([sys.executable, ROOT / "project" / "scripts" / "ablation.py", corpus, tmp_path / "out",
                    "--config", ROOT / "configs" / "demo.cfg", "--variants", "full,-char_fofe,-lexeme_tables",
                    "--max-steps", "40", "--speed-rounds", "1", "--results", results], check=True, capture_output=True)
    rows = json.loads((tmp_path / "out" / "ablation.json").read_text())
    assert [row["variant"] for row in rows] == ["full", "-char_fofe"]  # demo.cfg has no lexeme tables
    assert all(0.0 <= row["dev"] <= 100.0 and "test" not in row for row in rows)
    assert all(row["words_per_second"] > 0 for row in rows)
    config = (tmp_path / "out" / "-char_fofe" / "config.cfg").read_text()
    assert "char_fofe = false" in config
    section = results.read_text()
    assert "## Ablation on corpus" in section and "| -char_fofe |" in section
    ratio = rows[1]["words_per_second"] / rows[0]["words_per_second"]
    assert "| words/s | words/s vs full |" in section and f"| {ratio:.2f}x |" in section


def test_ensemble_script_trains_seeds_merges_them_and_writes_its_section(tmp_path):
    corpus = demo_corpus(tmp_path / "corpus")
    results = tmp_path / "RESULTS.md"
    subprocess.run([sys.executable, ROOT / "project" / "scripts" / "ensemble.py", corpus, tmp_path / "out",
                    "--config", ROOT / "configs" / "demo.cfg", "--seeds", "0,1", "--strict", "--speed-rounds", "1",
                    "--distill", "1", "--results", results, "--section", "Seeds on corpus",
                    "--training.max_steps", "40"],
                   check=True, capture_output=True)
    rows = {row["model"]: row for row in json.loads((tmp_path / "out" / "ensemble.json").read_text())}
    assert list(rows) == ["seed0", "seed1", "ensemble0+1", "distilled1"] and rows["ensemble0+1"]["members"] == 2
    student = load_config(tmp_path / "out" / "distilled1" / "model-best" / "config.cfg")
    teacher = student["initialize"]["components"]["fofe_ner"]["teacher"]
    assert Path(teacher) == tmp_path / "out" / "ensemble0+1" / "model-best"
    assert all(0.0 <= row[split] <= 100.0 for row in rows.values() for split in ("dev", "dev_strict"))
    assert not any("test" in key for row in rows.values() for key in row)  # the benchmark's alone
    assert not list((tmp_path / "out").rglob("test*.json"))
    assert "max_steps = 40" in (tmp_path / "out" / "seed1" / "model-best" / "config.cfg").read_text()
    tuned = load_config(tmp_path / "out" / "ensemble0+1" / "model-tuned" / "config.cfg")
    assert tuned["components"]["fofe_ner"]["model"]["@architectures"] == "spacy_fofe.FOFEEnsemble.v1"
    section = results.read_text()
    ratio = rows["ensemble0+1"]["words_per_second"] / rows["seed0"]["words_per_second"]
    assert "## Seeds on corpus" in section and f"| {ratio:.2f}x |" in section
    assert "--section 'Seeds on corpus'" in section  # the command as it can be run again
    assert "- 2 members, mean of 1:" in section and "- 1 member distilled from ensemble0+1, mean of 1:" in section


def test_ensemble_script_with_no_ensembles_reports_the_seeds_alone(tmp_path):
    corpus = demo_corpus(tmp_path / "corpus")
    results = tmp_path / "RESULTS.md"
    script = [sys.executable, ROOT / "project" / "scripts" / "ensemble.py", corpus, tmp_path / "out",
              "--config", ROOT / "configs" / "demo.cfg", "--no-ensembles", "--results", results]
    refused = subprocess.run(script + ["--seeds", "0,1", "--distill", "1"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--distill needs an ensemble" in refused.stderr
    assert not (tmp_path / "out").exists()  # refused before any training
    subprocess.run(script + ["--seeds", "0", "--speed-rounds", "1", "--section", "One seed",
                             "--training.max_steps", "20", "--sentence-starts"], check=True, capture_output=True)
    rows = json.loads((tmp_path / "out" / "ensemble.json").read_text())
    assert [row["model"] for row in rows] == ["seed0"] and rows[0]["words_per_second"] > 0
    trained = load_config(tmp_path / "out" / "seed0" / "model-best" / "config.cfg")
    assert trained["corpora"]["train"]["sentence_starts"] is trained["corpora"]["dev"]["sentence_starts"] is True
    section = results.read_text()
    assert "## One seed" in section and "| seed0 | 1 |" in section and "- 1 member, mean of 1:" in section
    assert "given their sentence starts (`--sentence-starts`)" in section
    assert "ensemble" not in section.split("- command")[1].split("\n", 1)[1]  # no ensemble rows, none named


def test_ensemble_script_branches_each_seed_and_averages_the_branches(tmp_path):
    corpus = demo_corpus(tmp_path / "corpus")
    results = tmp_path / "RESULTS.md"
    script = [sys.executable, ROOT / "project" / "scripts" / "ensemble.py", corpus, tmp_path / "out",
              "--config", ROOT / "configs" / "demo.cfg", "--seeds", "0", "--no-ensembles", "--results", results]
    refused = subprocess.run(script + ["--branches", "3"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--branches: two or more seeds" in refused.stderr
    branched = script + ["--branches", "3,4", "--branch-steps", "10", "--speed-rounds", "0",
                         "--section", "Branches", "--training.max_steps", "20"]
    subprocess.run(branched, check=True, capture_output=True)
    out = tmp_path / "out"
    rows = json.loads((out / "ensemble.json").read_text())
    assert [row["model"] for row in rows] == ["seed0", "branch0-3", "branch0-4", "average0"]
    branch = load_config(out / "branch0-4" / "model-best" / "config.cfg")
    assert Path(branch["initialize"]["components"]["fofe_ner"]["init_weights"]) == out / "seed0" / "model-best"
    assert branch["training"]["max_steps"] == 10 and branch["system"]["seed"] == 4
    assert Path(branch["paths"]["train"]) == corpus / "train.spacy"
    ners = [spacy.load(out / name / "model-best").get_pipe("fofe_ner")
            for name in ("branch0-3", "branch0-4", "average0")]
    assert ners[0].cfg["start"] == ners[1].cfg["start"] == ners[2].cfg["start"] is not None
    first, second, mean = (ner.model.get_ref("output").get_param("W") for ner in ners)
    assert not (first == second).all() and abs(mean - (first + second) / 2).max() < 1e-6
    section = results.read_text()
    assert "| branch0-3 | 1 |" in section and "- average of 2 branches, mean of 1:" in section
    assert re.search(r"- 1 branch, mean of 2: dev \d+\.\d\d ± \d+\.\d\d$", section, re.M)
    record = json.loads((out / "seed0" / "trained.json").read_text())
    ensemble = load_benchmark_script("ensemble")  # one trained on dev too by an earlier version is not reused
    assert ensemble.reusable(out / "seed0", record["overrides"], record["config"])
    (out / "seed0" / "trained.json").write_text(json.dumps({**record, "with_dev": True}))
    assert not ensemble.reusable(out / "seed0", record["overrides"], record["config"])
    # A retrained trunk makes its branches train again and their average be made again.
    average_made = (out / "average0" / "model-best" / "config.cfg").stat().st_mtime
    (out / "seed0" / "trained.json").unlink()
    subprocess.run(branched, check=True, capture_output=True)
    assert (out / "average0" / "model-best" / "config.cfg").stat().st_mtime > average_made
    branch_record = (out / "branch0-3" / "trained.json").stat().st_mtime
    assert branch_record > (out / "seed0" / "trained.json").stat().st_mtime


def test_ensemble_script_times_the_components_before_fofe_ner_alone(tmp_path):
    ensemble = load_benchmark_script("ensemble")
    args = argparse.Namespace(out=str(tmp_path / "out"))
    nlp = small_pipeline()
    nlp.add_pipe("sentencizer", first=True)
    examples = make_examples(nlp, NESTED)
    nlp.initialize(lambda: examples)
    nlp.to_disk(tmp_path / "model")
    upstream = ensemble.upstream_alone(args, tmp_path / "model")
    assert spacy.load(upstream).pipe_names == ["sentencizer"]
    nlp.remove_pipe("sentencizer")
    nlp.to_disk(tmp_path / "alone")
    assert ensemble.upstream_alone(args, tmp_path / "alone") is None
    rows = [{"model": "seed0", "members": 1, "dev": 90.0, "words_per_second": 1000},
            {"model": "upstream", "members": 0, "components": ["sentencizer"], "words_per_second": 4000}]
    text = ensemble.report(argparse.Namespace(strict=False, speed_rounds=1, distill="", teacher="ensemble0+1",
                                              strict_objective=False, sentence_starts=False, config="c.cfg",
                                              overrides=[], branch_seeds=[]), rows, [0])
    assert "| upstream |" not in text
    assert "- the components before fofe_ner alone (sentencizer): 4,000 words/s; seed0 runs at 0.25x of them" in text


def bench_args(config="germeval.cfg", **settings):
    """benchmark.py's arguments for a run with the project's configs (the first names the peers' tables)."""
    configs = ",".join(str(ROOT / "configs" / name) for name in config.split(","))
    values = {"configs": configs, "corpus": "corpus", "out": "out", "peers": "ner-stock,spancat-stock",
              "seeds": [0, 1, 2], "small": False, "lang": "de", "max_length": 7, "max_steps": 0, "peer_steps": 0,
              "gpu_id": -1, "paths": {}, "speed_rounds": 3, "jobs": 2, "blis": False, "only": "",
              "speed_only": False, "nested": False, "openblas_kernel": "", "section": ""}
    return argparse.Namespace(**{**values, **settings})


def test_benchmark_peers_get_the_fofe_configs_hash_tables():
    """A fair benchmark: spancat embeds tokens with the same tables as the fofe_ner config it is compared to."""
    benchmark = load_benchmark_script()
    args = bench_args()
    # the word embeddings, inside the lexeme-table wrappers where the configs have them
    _, fofe_embed = benchmark.fofe_embedding(load_config(ROOT / "configs" / "germeval.cfg"))
    peer = benchmark.spacy_config(args, "spancat")["components"]["tok2vec"]["model"]["embed"]
    multi_hash = "spacy.MultiHashEmbed.v2"
    peer_embed = next(block for block in benchmark.blocks(peer) if block.get("@architectures") == multi_hash)
    assert peer_embed["rows"] == fofe_embed["rows"] != benchmark.EMBED["rows"]
    assert (peer_embed["attrs"], peer_embed["width"]) == (fofe_embed["attrs"], fofe_embed["width"])


def test_benchmark_peers_get_the_fofe_configs_use_features():
    """germeval.cfg reads USE's word features next to its tables; the peers read them too, next to the
    same tables, and their encoder takes the wider vectors; a config without them changes nothing."""
    benchmark = load_benchmark_script()
    fofe_use = benchmark.use_features(load_config(ROOT / "configs" / "germeval.cfg")["components"]["fofe_ner"]["model"])
    assert len(fofe_use) == 1 and fofe_use[0]["contextual"] == "word"
    tok2vec = benchmark.spacy_config(bench_args(), "spancat")["components"]["tok2vec"]["model"]
    assert tok2vec["embed"]["@layers"] == "concatenate.v1"
    assert tok2vec["embed"]["*"]["use0"] == fofe_use[0]
    assert tok2vec["embed"]["*"]["hash"]["@architectures"] == benchmark.LEXEME_EMBED
    assert tok2vec["encode"]["width"] == tok2vec["embed"]["*"]["hash"]["width"] + fofe_use[0]["width"]
    tok2vec = benchmark.spacy_config(bench_args("conll.cfg"), "spancat")["components"]["tok2vec"]["model"]
    assert tok2vec["embed"]["@architectures"] == benchmark.LEXEME_EMBED
    assert tok2vec["encode"]["width"] == tok2vec["embed"]["width"]


def test_benchmark_peers_get_the_fofe_configs_optimizer():
    """spaCy's init config has weight decay 0.01 and no parameter averaging; the `ner` and `spancat` peers
    train with ours."""
    benchmark = load_benchmark_script()
    ours = load_config(ROOT / "configs" / "germeval.cfg")["training"]["optimizer"]
    assert (ours["L2"], ours["use_averages"]) != (0.01, False)  # spaCy's, so the check below can fail
    for pipe in ("spancat", "ner"):
        assert benchmark.spacy_config(bench_args(), pipe)["training"]["optimizer"] == ours


def test_benchmark_peers_get_the_fofe_configs_lexeme_tables(tmp_path):
    """With fofe_ner's embedding wrapped in LexemeTablesEmbed, as its tok2vec (conll.cfg), as a Tok2Vec's
    embed or next to vectors in a concatenate (conll_vectors.cfg), the peers' MultiHashEmbed is wrapped the
    same way."""
    benchmark = load_benchmark_script()
    fofe = load_config(ROOT / "configs" / "germeval.cfg")
    model = fofe["components"]["fofe_ner"]["model"]
    _, words = benchmark.fofe_embedding(fofe)
    tables = {"@architectures": "spacy_fofe.LexemeTablesEmbed.v1", "width": words["width"],
              "tables": ["lexeme_cluster"], "attrs": ["ORTH"], "rows": [300], "cluster_prefix_bits": [4]}
    encode = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": words["width"], "depth": 1,
              "window_size": 1, "maxout_pieces": 3}
    peers = {}
    for name, tok2vec in (("plain", words), ("tables", {**tables, "embed": words}),
                          ("tok2vec", {"@architectures": "spacy.Tok2Vec.v2", "embed": {**tables, "embed": words},
                                       "encode": encode}),
                          ("concatenate", {"@layers": "concatenate.v1", "*": {
                              "hash": {**tables, "embed": words},
                              "vectors": {"@layers": "spacy_fofe.TunedVectors.v1", "attr": "LOWER"}}})):
        model["tok2vec"] = tok2vec
        fofe.to_disk(tmp_path / f"{name}.cfg")
        args = bench_args(configs=str(tmp_path / f"{name}.cfg"))
        peers[name] = benchmark.spacy_config(args, "spancat")["components"]["tok2vec"]["model"]["embed"]
    assert peers["tok2vec"] == peers["tables"] == peers["concatenate"]
    assert {key: peers["tables"][key] for key in tables} == tables
    assert peers["tables"]["embed"] == peers["plain"]
    assert peers["plain"]["@architectures"] == "spacy.MultiHashEmbed.v2"
    assert (peers["plain"]["rows"], peers["plain"]["attrs"]) == (words["rows"], words["attrs"])


def test_benchmark_stock_peers_are_spacys_configs_as_they_are():
    """spancat-stock: spaCy's efficiency config, none of fofe_ner's tables or optimizer; only n-grams up to
    n, the seed, the steps (the first config's) and the reader set."""
    benchmark = load_benchmark_script()
    args = bench_args()
    stock, ours = (benchmark.spacy_config(args, name, seed=2) for name in ("spancat-stock", "spancat"))
    assert stock["components"]["tok2vec"]["model"]["embed"]["rows"] == [5000, 1000, 2500, 2500]  # spaCy's
    assert stock["components"]["tok2vec"]["model"]["embed"] != ours["components"]["tok2vec"]["model"]["embed"]
    assert (stock["training"]["optimizer"]["L2"], stock["training"]["optimizer"]["use_averages"]) == (0.01, False)
    assert stock["components"]["spancat"]["suggester"] == ours["components"]["spancat"]["suggester"] == {
        "@misc": "spacy.ngram_range_suggester.v1", "min_size": 1, "max_size": 7}
    assert stock["system"]["seed"] == 2 and stock["corpora"]["train"]["@readers"] == "spacy_fofe.CachedCorpus.v1"
    assert stock["training"]["max_steps"] == load_config(ROOT / "configs" / "germeval.cfg")["training"]["max_steps"]
    assert benchmark.spacy_config(bench_args(peer_steps=500), "ner-stock")["training"]["max_steps"] == 500
    assert benchmark.spacy_config(args, "ner-stock")["nlp"]["pipeline"] == ["tok2vec", "ner"]


def test_benchmark_trains_the_shipped_configs_as_they_are_but_seed_reader_and_paths_they_take():
    """Each config keeps its own steps (--max-steps caps them, a schedule's total_steps with them); a
    --paths.NAME goes to the configs that take it: vectors to those that read vectors, a transformer to
    those that name one."""
    benchmark = load_benchmark_script()
    args = bench_args("conll.cfg,conll_vectors.cfg,conll_documents.cfg,conll_transformer.cfg",
                      paths={"vectors": "vec", "transformer": "tr", "nope": "x"})
    configs = {run.system: benchmark.fofe_config(args, run) for run in benchmark.plan(args)
               if run.seed == 0 and run.is_fofe}
    for name, config in configs.items():
        assert config["training"]["max_steps"] == load_config(ROOT / "configs" / f"{name}.cfg")["training"]["max_steps"]
        assert config["corpora"]["dev"]["@readers"] == "spacy_fofe.CachedCorpus.v1"
    assert configs["conll_documents"]["training"]["max_steps"] != configs["conll"]["training"]["max_steps"]
    assert configs["conll"]["paths"]["vectors"] is None  # reads no vectors: none loaded and shipped
    assert configs["conll_vectors"]["paths"]["vectors"] == configs["conll_transformer"]["paths"]["vectors"] == "vec"
    assert configs["conll_transformer"]["paths"]["transformer"] == "tr"
    assert "transformer" not in configs["conll"]["paths"]
    run = benchmark.plan(bench_args("conll_transformer.cfg", seeds=[1]))[0]
    capped = benchmark.fofe_config(bench_args("conll_transformer.cfg", max_steps=100), run)
    assert capped["training"]["max_steps"] == capped["training"]["optimizer"]["learn_rate"]["total_steps"] == 100
    assert capped["system"]["seed"] == 1


def test_benchmark_plans_seeds_per_system_and_a_corpus_per_config():
    """Every config and peer with each seed; a transformer config with the first seed alone on a CPU, all on a
    GPU; CONFIG=FOLDER trains and scores that config on that folder."""
    benchmark = load_benchmark_script()
    docs = f"{ROOT / 'configs' / 'conll_documents.cfg'}=corpus/docs"
    args = bench_args("conll.cfg,germeval_transformer.cfg", peers="ner-stock", out="out")
    args.configs += "," + docs
    runs = [(run.system, run.seed, str(run.corpus), run.out.as_posix()) for run in benchmark.plan(args)]
    assert runs == [("conll", 0, "corpus", "out/conll/seed0"), ("conll", 1, "corpus", "out/conll/seed1"),
                    ("conll", 2, "corpus", "out/conll/seed2"), ("germeval_transformer", 0, "corpus",
                                                                 "out/germeval_transformer/seed0"),
                    ("conll_documents", 0, "corpus/docs", "out/conll_documents/seed0"),
                    ("conll_documents", 1, "corpus/docs", "out/conll_documents/seed1"),
                    ("conll_documents", 2, "corpus/docs", "out/conll_documents/seed2"),
                    *(("ner-stock", seed, "corpus", f"out/ner-stock/seed{seed}") for seed in (0, 1, 2))]
    args.gpu_id = 0
    assert len([run for run in benchmark.plan(args) if run.system == "germeval_transformer"]) == 3
    args.only = "conll,ner-stock"  # what one GPU lease carries in
    assert {run.system for run in benchmark.plan(args)} == {"conll", "ner-stock"}
    # A run of some systems says so in its section: which ran, and which shipped configs did not.
    assert "Systems run: conll, ner-stock (--only); not run: conll_documents, germeval_transformer. " in (
        benchmark.protocol(args, benchmark.plan(args)))
    # ... and writes its own section, never the one of a run of all of them.
    assert benchmark.section_title(args, benchmark.plan(args), "cpu") == "Benchmark on corpus: conll, ner-stock"
    args.speed_only, args.openblas_kernel = True, "Haswell"
    assert benchmark.section_title(args, benchmark.plan(args), "cpu") == (
        "Speed on corpus, cpu, one core, OpenBLAS Haswell kernel: conll, ner-stock")
    args.only, args.speed_only, args.openblas_kernel = "", False, ""
    assert "--only" not in benchmark.protocol(args, benchmark.plan(args))
    assert benchmark.section_title(args, benchmark.plan(args), "cpu") == "Benchmark on corpus"
    assert benchmark.settings_error(bench_args("conll.cfg", only="conll,spancat")) == (
        "--only: spancat not among the configs and peers of this run")


def test_benchmark_times_the_stock_peers_on_the_texts_of_a_config_with_its_own_corpus():
    """A config trained and scored on whole documents is compared with the stock peers (first seed, as
    trained) timed on the same document texts, in rows of their own that the accuracy table leaves out."""
    benchmark = load_benchmark_script()
    args = bench_args("conll.cfg", peers="ner-stock,spancat-stock,ner", out="out")
    args.configs += f",{ROOT / 'configs' / 'conll_documents.cfg'}=corpus/docs"
    runs = benchmark.plan(args)
    timed = [(run.system, run.seed, str(run.corpus), run.out.as_posix()) for run in benchmark.same_text_runs(runs)]
    assert timed == [("ner-stock on docs", 0, "corpus/docs", "out/ner-stock/seed0"),
                     ("spancat-stock on docs", 0, "corpus/docs", "out/spancat-stock/seed0")]
    assert '"PEER on CORPUS"' in benchmark.protocol(args, runs)
    args.only = "conll,ner-stock"
    assert benchmark.same_text_runs(benchmark.plan(args)) == []
    assert "PEER on CORPUS" not in benchmark.protocol(args, benchmark.plan(args))
    speed = {"spans_sc_p": 0.8, "spans_sc_r": 0.8, "spans_sc_f": 0.8, "train_seconds": 1, "train_peak_mb": 1,
             "startup_seconds": 1.0, "device": "cpu"}
    rows = [{**speed, "system": "conll", "seed": 0, "corpus": "corpus", "words_per_second": 4000,
             "first_pass_words_per_second": 3000, "inference_peak_mb": 700},
            {**speed, "system": "conll_documents", "seed": 0, "corpus": "corpus/docs", "words_per_second": 3000,
             "first_pass_words_per_second": 2000, "inference_peak_mb": 900},
            {**speed, "system": "ner-stock", "seed": 0, "corpus": "corpus", "words_per_second": 1000,
             "first_pass_words_per_second": 1000, "inference_peak_mb": 600},
            {**speed, "system": "ner-stock on docs", "seed": 0, "corpus": "corpus/docs", "timing_of": "ner-stock",
             "words_per_second": 1500, "first_pass_words_per_second": 500, "inference_peak_mb": 1000}]
    table = benchmark.summary(rows, nested=False)
    assert "| conll | 3000 | 4000 |  | 1.0 | 700 | 3.00x / 4.00x | cpu |" in table
    # against the peer timed on the same document texts
    assert "| conll_documents | 2000 | 3000 |  | 1.0 | 900 | 4.00x / 2.00x | cpu |" in table
    assert "| ner-stock on docs | 500 | 1500 |  | 1.0 | 1000 | 1.00x / 1.00x | cpu |" in table
    assert "| ner-stock on docs | 0 |" not in table and "| ner-stock | 0 |" in table  # timing rows: no accuracy


def test_benchmark_refuses_wrong_settings_before_training_any():
    benchmark = load_benchmark_script()
    assert benchmark.settings_error(bench_args(peers="ner-stock,spancat")) is None
    assert benchmark.settings_error(bench_args(peers="ner-stok")) == (
        "--peers: unknown ner-stok; the peers are ner-stock, spancat-stock, ner, spancat")
    assert "nope.cfg not found" in benchmark.settings_error(bench_args("nope.cfg"))
    assert "same name" in benchmark.settings_error(bench_args("conll.cfg,conll.cfg"))
    script = str(ROOT / "project" / "scripts" / "benchmark.py")
    for extra in (["--peers", "ner-stok"], ["--vectors", "v"]):
        done = subprocess.run([sys.executable, script, "corpus", "out", "--configs", str(ROOT / "configs" / "demo.cfg"),
                               *extra], capture_output=True, text=True)
        assert done.returncode == 2 and ("unknown ner-stok" in done.stderr or "unrecognized argument --vectors" in
                                         done.stderr)


def fake_trainer(commands):
    """run_measured for train_and_tune: records the command and makes the folder it would write."""
    def run(command, log=None):
        command = [str(part) for part in command]
        commands.append(command)
        if "--output" in command:  # spacy train OUT: OUT/model-best
            made = Path(command[command.index("--output") + 1]) / "model-best"
        else:  # spacy fofe tune MODEL DEV OUT
            made = Path(command[-1])
        made.mkdir(parents=True, exist_ok=True)
        return 1.0, 10.0
    return run


def test_a_training_is_reused_only_when_config_data_and_code_match(tmp_path, monkeypatch):
    """A killed `spacy train` leaves a model-best of its last evaluation, and a changed config, data file or
    source file makes another model: each is trained (and tuned) again; a finished one of the same
    fingerprint is reused."""
    benchmark = load_benchmark_script()
    commands = []
    monkeypatch.setattr(benchmark, "run_measured", fake_trainer(commands))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "dev"):
        (corpus / f"{split}.spacy").write_bytes(b"docs")
    args = bench_args("demo.cfg", corpus=str(corpus), out=str(tmp_path / "out"), seeds=[0])
    run = benchmark.plan(args)[0]
    (run.out / "model-best").mkdir(parents=True)  # unfinished: no TRAINED record
    (run.out / "model-tuned").mkdir()

    def trainings():
        benchmark.train_and_tune(args, run)
        return [c for c in commands if "train" in c and "fofe" not in c], [c for c in commands if "tune" in c]

    assert [len(found) for found in trainings()] == [1, 1]  # trained and tuned again
    assert [len(found) for found in trainings()] == [1, 1]  # reused
    (corpus / "dev.spacy").write_bytes(b"other docs")
    assert [len(found) for found in trainings()] == [2, 2]
    args.max_steps = 7
    assert [len(found) for found in trainings()] == [3, 3]
    assert [len(found) for found in trainings()] == [3, 3]
    source = tmp_path / "root" / "spacy_fofe" / "module.py"
    source.parent.mkdir(parents=True)
    source.write_text("x = 1\n")
    monkeypatch.setattr(benchmark, "ROOT", tmp_path / "root")
    assert [len(found) for found in trainings()] == [4, 4]
    source.write_text("x = 2\n")
    assert [len(found) for found in trainings()] == [5, 5]
    # A source edited while a model trains: its record is of the code it trained with, so it trains again.
    trainer = fake_trainer(commands)

    def trainer_meanwhile_edited(command, log=None):
        source.write_text("x = 4\n")
        return trainer(command, log)

    monkeypatch.setattr(benchmark, "run_measured", trainer_meanwhile_edited)
    source.write_text("x = 3\n")
    assert [len(found) for found in trainings()] == [6, 6]
    assert [len(found) for found in trainings()] == [7, 7]


def test_a_peers_training_depends_on_the_spacy_fofe_modules_its_config_runs_alone(tmp_path, monkeypatch):
    """A stock peer runs spacy_fofe's corpus reader and nothing else of it: a change elsewhere in spacy_fofe
    does not retrain it, one to the reader's module or to a module it imports does; a fofe_ner config
    depends on every source. A record of every source (older peers') is reused while none changed."""
    benchmark = load_benchmark_script()
    root = tmp_path / "root"
    files = {"__init__.py": "from .training import corpus\n", "training/__init__.py": "",
             "training/corpus.py": "import numpy\n\ndef read():\n    from ..ml.util import helper\n",
             "ml/__init__.py": "", "ml/util.py": "helper = 1\n", "ml/model.py": "from .util import helper\n"}
    for name, text in files.items():
        (root / "spacy_fofe" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "spacy_fofe" / name).write_text(text)
    monkeypatch.setattr(benchmark, "ROOT", root)
    peer = '[corpora.train]\n@readers = "spacy_fofe.CachedCorpus.v1"\npath = "train.spacy"\n'
    ours = '[components.fofe_ner]\nfactory = "fofe_ner"\n\n' + peer
    relative = [path.relative_to(root / "spacy_fofe").as_posix() for path in benchmark.code_sources(peer)]
    assert relative == ["ml/util.py", "training/corpus.py"]
    assert len(benchmark.code_sources(ours)) == len(files)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "dev"):
        (corpus / f"{split}.spacy").write_bytes(b"docs")
    before = {text: benchmark.fingerprint(text, corpus) for text in (peer, ours)}
    run = SimpleNamespace(out=tmp_path / "peer", corpus=corpus)
    (run.out / "model-best").mkdir(parents=True)
    record = {"fingerprint": benchmark.fingerprint(peer, corpus, every_source=True)}
    (run.out / benchmark.TRAINED).write_text(json.dumps(record))
    assert benchmark.trained(run, peer) == record
    (root / "spacy_fofe" / "ml" / "model.py").write_text("from .util import helper as other\n")
    assert benchmark.fingerprint(peer, corpus) == before[peer]
    assert benchmark.fingerprint(ours, corpus) != before[ours]
    assert benchmark.trained(run, peer) is None  # written when model.py was another
    (root / "spacy_fofe" / "ml" / "util.py").write_text("helper = 2\n")
    assert benchmark.fingerprint(peer, corpus) != before[peer]


def test_benchmark_scores_first_pass_and_reports_seeds_spread_and_ratios(tmp_path, trained, monkeypatch):
    benchmark = load_benchmark_script()
    trained.to_disk(tmp_path / "model")
    examples = make_examples(trained, NESTED)
    DocBin(docs=[eg.reference for eg in examples]).to_disk(tmp_path / "test.spacy")
    timed_pass, frozen = benchmark._timed_pass, []

    def recording_pass(nlp, texts):  # how many objects the garbage collector leaves alone in each timed pass
        frozen.append(gc.get_freeze_count())
        return timed_pass(nlp, texts)

    benchmark._timed_pass = recording_pass
    # the first pass's time making new words' USE rows (none in this pipeline: a stand-in) is taken off apart
    spent = iter([1.0, 1.000001])
    monkeypatch.setattr(use_features, "new_word_seconds", lambda: next(spent))
    benchmark.measure(str(tmp_path / "model"), str(tmp_path / "test.spacy"), str(tmp_path / "measure.json"), -1)
    benchmark._timed_pass = timed_pass
    # the start-up's objects are frozen out of the collector for the timed passes, and given back after
    assert len(frozen) == 4 and min(frozen) > 1000 and gc.get_freeze_count() == 0
    measured = json.loads((tmp_path / "measure.json").read_text())
    assert measured["spans_sc_f"] == 1.0 and measured["words_per_second"] > 0
    assert measured["first_pass_words_per_second"] > 0 and measured["startup_seconds"] > 0
    # the components alone run at least as fast as the whole pass, which also tokenizes
    assert measured["components_words_per_second"] >= measured["words_per_second"]
    assert measured["components_first_pass_words_per_second"] >= measured["first_pass_words_per_second"]
    assert measured["first_pass_new_word_seconds"] == 0.0  # rounded to the millisecond
    assert measured[benchmark.NEW_WORDS_APART] >= measured["components_first_pass_words_per_second"]
    row = {"spans_sc_p": 0.8, "spans_sc_r": 0.8, "spans_sc_strict_f": 0.7, "spans_sc_outer_f": 0.75,
           "spans_sc_inner_f": None, "train_seconds": 10, "train_peak_mb": 1, "inference_peak_mb": 5, "device": "cpu"}
    rows = [{**row, "system": "conll", "seed": 0, "spans_sc_f": 0.80, "words_per_second": 3000,
             "first_pass_words_per_second": 1500, "startup_seconds": 2.0, "blis_words_per_second": 2000,
             "blis_first_pass_words_per_second": 1000, "components_words_per_second": 4000,
             "components_first_pass_words_per_second": 3600},
            {**row, "system": "conll", "seed": 1, "spans_sc_f": 0.82, "words_per_second": 1, "train_seconds": 20,
             "first_pass_words_per_second": 1},
            {**row, "system": "ner-stock", "seed": 0, "spans_sc_f": 0.7, "words_per_second": 1000,
             "first_pass_words_per_second": 1000, "startup_seconds": 1.0}]
    table = benchmark.summary(rows, nested=True)
    assert "| system | seeds | P | R | F1 | strict F1 | outer F1 | inner F1 | train s | train peak MB |" in table
    assert "| conll | 0,1 | 80.00 ± 0.00 | 80.00 ± 0.00 | 81.00 ± 1.41 | 70.00 ± 0.00 | 75.00 ± 0.00 |  | 15 | 1 |" \
        in table
    assert "| ner-stock | 0 | 80.00 | 80.00 | 70.00 |" in table
    # speed: the first seed's model, with its ratios to the stock peer measured in the same run
    assert "| conll | 1500 | 3000 | 0.90 | 2.0 | 5 | 1.50x / 3.00x | cpu |" in table
    assert "| conll (blis) | 1000 | 2000 |  |  |  | 1.00x / 2.00x | cpu |" in table
    assert "| ner-stock | 1000 | 1000 |  | 1.0 | 5 | 1.00x / 1.00x | cpu |" in table  # no components' figures
    # A first pass that made new words' USE rows: the same ratio without that time, in a column of its own.
    rows[0][benchmark.NEW_WORDS_APART] = 3800
    table = benchmark.summary(rows, nested=True)
    assert "| first pass / warm, components alone | the same without new words' USE rows | start-up s |" in table
    assert "| conll | 1500 | 3000 | 0.90 | 0.95 | 2.0 | 5 | 1.50x / 3.00x | cpu |" in table
    assert "| ner-stock | 1000 | 1000 |  |  | 1.0 | 5 | 1.00x / 1.00x | cpu |" in table
    assert "F1" not in benchmark.summary(rows, nested=True, accuracy=False)


def test_benchmark_times_the_first_seeds_in_turn_and_keeps_each_ones_best_speed(tmp_path, monkeypatch):
    benchmark = load_benchmark_script()
    speeds = iter([(900, 500), (1200, 400), (800, 700), (1000, 300)])  # rounds 2 and 3, a then b in each
    calls = []

    def fake_run(command, log=None, kernel="", timed=False):
        assert timed  # a timed process's memory stays as a long-running process's (STEADY_MEMORY)
        calls.append(Path(command[3]).parent.parent.name)
        words, first = next(speeds)
        Path(command[5]).write_text(json.dumps({"words_per_second": words, "first_pass_words_per_second": first,
                                                "components_words_per_second": 2 * words,
                                                "components_first_pass_words_per_second": 2 * first,
                                                "startup_seconds": 1.0}))
        return 1.0, 10.0

    monkeypatch.setattr(benchmark, "run_measured", fake_run)
    args = bench_args("demo.cfg", peers="ner-stock", seeds=[0, 1], out=str(tmp_path))
    runs = benchmark.plan(args)
    for run in runs:
        run.out.mkdir(parents=True)
    rows = [{"words_per_second": 1000, "first_pass_words_per_second": 450, "startup_seconds": 2.0},
            {"words_per_second": 5, "first_pass_words_per_second": 5},
            {"words_per_second": 1100, "first_pass_words_per_second": 350, "startup_seconds": 2.0},
            {"words_per_second": 5, "first_pass_words_per_second": 5}]
    benchmark.speed_rounds(args, rows, runs)
    assert calls == ["demo", "ner-stock", "demo", "ner-stock"]  # the first seeds only, in turn
    assert [(r["words_per_second"], r["first_pass_words_per_second"], r.get("startup_seconds")) for r in rows] == [
        (1000, 700, 1.0), (5, 5, None), (1200, 400, 1.0), (5, 5, None)]
    assert [r.get("components_words_per_second") for r in rows] == [1800, None, 2400, None]
    monkeypatch.setattr(sys, "argv", ["benchmark.py", str(tmp_path), str(tmp_path), "--configs",
                                      str(ROOT / "configs" / "demo.cfg"), "--speed-rounds", "0"])
    with pytest.raises(SystemExit):
        benchmark.main()
    assert len(calls) == 4  # refused before measuring anything


def test_benchmark_speed_only_refuses_models_it_did_not_train(tmp_path, monkeypatch):
    """The GPU form times the models a benchmark trained; without a finished training of the same config,
    data and code it stops before measuring anything."""
    benchmark = load_benchmark_script()
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.spacy").write_bytes(b"docs")
    measured = []
    monkeypatch.setattr(benchmark, "measure_in_process", lambda *args, **kwargs: measured.append(args))
    monkeypatch.setattr(sys, "argv", ["benchmark.py", str(tmp_path), str(tmp_path / "out"), "--configs",
                                      str(ROOT / "configs" / "demo.cfg"), "--peers", "", "--speed-only"])
    with pytest.raises(SystemExit, match="no finished training of this config, data and code"):
        benchmark.main()
    assert measured == []


def test_benchmark_kernel_run_times_on_one_core_with_the_kernel_forced(tmp_path):
    """--openblas-kernel: each measuring process runs pinned to one core with OPENBLAS_CORETYPE set, and
    reports the kernel numpy's OpenBLAS took; the setting is for trained models, with --speed-only."""
    benchmark = load_benchmark_script()
    seen = tmp_path / "seen.json"
    probe = ("import json, os, sys; from benchmark import openblas_kernel; json.dump([os.environ.get("
             "'OPENBLAS_CORETYPE'), len(os.sched_getaffinity(0)), openblas_kernel()], open(sys.argv[1], 'w'))")
    child = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'project' / 'scripts')!r}); {probe}"]
    benchmark.run_measured(child + [seen])
    coretype, cores, default_kernel = json.loads(seen.read_text())
    assert coretype is None and cores == len(os.sched_getaffinity(0))
    benchmark.run_measured(child + [seen], kernel="Haswell")
    coretype, cores, kernel = json.loads(seen.read_text())
    assert coretype == "Haswell" and cores == 1
    if default_kernel:  # numpy on OpenBLAS (its wheels' build picks the kernel at run time)
        assert kernel == "Haswell"
    assert "give it with --speed-only" in benchmark.settings_error(bench_args(openblas_kernel="Haswell"))
    assert benchmark.settings_error(bench_args(openblas_kernel="Haswell", speed_only=True)) is None
    assert "not an OpenBLAS core type" in benchmark.settings_error(bench_args(openblas_kernel="a b", speed_only=True))


def test_benchmark_kernel_run_writes_files_and_a_section_of_its_own(tmp_path, monkeypatch):
    benchmark = load_benchmark_script()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        (corpus / f"{split}.spacy").write_bytes(b"docs")
    kernels = []

    def fake_measure(args, run, result, cpu_ops="numpy_blas"):
        kernels.append(args.openblas_kernel)
        return {"words_per_second": 2000 if run.is_fofe else 1000, "first_pass_words_per_second": 1000,
                "startup_seconds": 1.0, "device": "cpu", "openblas_kernel": "Haswell", "inference_peak_mb": 5,
                "spans_sc_f": 0.5}

    monkeypatch.setattr(benchmark, "measure_in_process", fake_measure)
    monkeypatch.setattr(benchmark, "trained", lambda run, text: {"train_seconds": 1, "train_peak_mb": 1})
    for system, model in (("demo", "model-tuned"), ("ner-stock", "model-best")):
        (tmp_path / "out" / system / "seed0" / model).mkdir(parents=True)
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["benchmark.py", str(corpus), str(tmp_path / "out"), "--configs",
                                      str(ROOT / "configs" / "demo.cfg"), "--peers", "ner-stock", "--speed-only",
                                      "--speed-rounds", "1", "--openblas-kernel", "Haswell", "--results", str(results)])
    benchmark.main()
    assert kernels == ["Haswell", "Haswell"]
    assert (tmp_path / "out" / "speed-cpu-openblas-haswell.json").exists()
    assert not (tmp_path / "out" / "speed-cpu.json").exists()  # the default CPU form's files stay its own
    text = results.read_text()
    assert "## Speed on corpus, cpu, one core, OpenBLAS Haswell kernel" in text
    assert "OPENBLAS_CORETYPE=Haswell (OpenBLAS reported: Haswell)" in text
    assert "| demo | 1000 | 2000 |" in text and "2.00x" in text


@pytest.mark.slow
def test_long_docs_benchmark_writes_both_sweeps(tmp_path):
    import spacy
    from spacy.tokens import DocBin, Span
    from spacy.training import Example

    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("fofe_ner", config={"model": {"hidden_width": 32, "tok2vec": {"width": 32}}})
    texts = [("Ann Lee lives in Paris .", [(0, 2, "PER"), (4, 5, "LOC")]), ("Bob saw Rome .", [(0, 1, "PER")])]
    examples, corpus = [], DocBin()
    for text, spans in texts:
        reference = nlp.make_doc(text)
        reference.spans["sc"] = [Span(reference, s, e, label) for s, e, label in spans]
        examples.append(Example(nlp.make_doc(text), reference))
        corpus.add(reference)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(150):
        nlp.update(examples, sgd=optimizer)
    nlp.to_disk(tmp_path / "model")
    corpus.to_disk(tmp_path / "text.spacy")
    subprocess.run([sys.executable, str(ROOT / "project" / "scripts" / "long_docs.py"), str(tmp_path / "model"),
                    str(tmp_path / "text.spacy"), str(tmp_path / "out"), "--lengths", "10,100", "--ns", "1,3",
                    "--n-tokens", "50", "--results", str(tmp_path / "RESULTS.md")], check=True)
    rows = json.loads((tmp_path / "out" / "long_docs.json").read_text())["rows"]
    lengths = {(r["mode"], r["tokens"]): r for r in rows if r["sweep"] == "length"}
    assert set(lengths) == {(m, t) for m in ("one doc", "sentences") for t in (10, 100)}
    # 100 tokens of this text hold 30 names, which the model finds in its training sentences; in one
    # doc the context runs across sentences, which it was not trained on, so it finds some of them.
    assert lengths[("sentences", 100)]["spans"] == 30 and lengths[("one doc", 100)]["spans"] > 0
    assert sorted(r["max_length"] for r in rows if r["sweep"] == "n") == [1, 3]
    assert all(r["words_per_sec"] > 0 and r["peak_rss_mb"] > 0 for r in rows)
    assert "| 100 |" in (tmp_path / "out" / "long_docs.md").read_text()
    results = (tmp_path / "RESULTS.md").read_text()
    assert results.startswith("# Results") and results.count("## Long documents") == 1 and "| 100 |" in results
    assert "- commit: " in results and "- command (in `project/`): `python scripts/long_docs.py " in results


def test_results_file_keeps_one_current_section_per_benchmark(tmp_path):
    results = load_benchmark_script("results")
    path = tmp_path / "RESULTS.md"
    results.write_section("CoNLL-2003", "| a | 1 |", configs=["configs/x.cfg"], command="run conll", path=path)
    results.write_section("GermEval 2014", "| b | 2 |", command="run germeval", path=path)
    results.write_section("CoNLL-2003", "| a | 3 |", command="run conll again", path=path)
    text = path.read_text()
    assert text.count("## CoNLL-2003") == 1 and "| a | 3 |" in text and "| a | 1 |" not in text
    assert "| b | 2 |" in text and "`run germeval`" in text and "`run conll again`" in text
    assert text.index("## CoNLL-2003") < text.index("## GermEval 2014")  # rewritten in place
    assert "configs/x.cfg" not in text  # the new run named no configs


def test_errors_section_of_flat_data_has_one_level():
    errors = load_benchmark_script("errors")
    fates = {"outer": {"found": 3, "no entity": 1}, "inner": {"found": 0, "no entity": 0}}
    scores = {"spans_sc_outer_p": 0.75, "spans_sc_outer_r": 0.75, "spans_sc_outer_f": 0.75, "spans_sc_inner_p": 0.0,
              "spans_sc_strict_p": 0.75, "spans_sc_gold_fates": fates, "spans_sc_per_type": {}}
    text = errors.report(scores, "m", "d", "sc", "")
    assert "| outer | 75.00 | 75.00 | 75.00 |" in text and "| outer | 4 | 3 (75.0%) | 1 (25.0%) |" in text
    assert "| inner" not in text and "| strict" not in text
    fates["inner"]["found"] = 1
    assert "| inner | 1 | 1 (100.0%) | 0 (0.0%) |" in errors.report(scores, "m", "d", "sc", "")
    # no inner gold, but inner spans predicted (all wrong: inner P 0): `fofe evaluate` shows the levels, so does this
    fates["inner"]["found"] = 0
    text = errors.report({**scores, "spans_sc_nested": True}, "m", "d", "sc", "")
    assert "| inner | 0.00 | 0.00 | 0.00 |" in text and "| strict |" in text
    assert "| inner" not in errors.report({**scores, "spans_sc_nested": False}, "m", "d", "sc", "")
    seen = {"seen": {"gold": 3, "found": 3, "predicted": 4, "correct": 3},
            "unseen": {"gold": 1, "found": 0, "predicted": 0, "correct": 0}}
    text = errors.report({**scores, "spans_sc_seen": seen}, "m", "d", "sc", "")
    assert "| seen | 3 | 100.00 | 4 | 75.00 |" in text and "| unseen | 1 | 0.00 | 0 | - |" in text
    assert "| text in training" not in errors.report(scores, "m", "d", "sc", "")
    per_type = {"LOC": {"p": 1.0, "r": 0.75, "f": 0.8571}}
    seen_per_type = {"LOC": {"seen": {"gold": 3, "found": 3, "predicted": 4, "correct": 3},
                             "unseen": {"gold": 0, "found": 0, "predicted": 0, "correct": 0}}}
    text = errors.report({**scores, "spans_sc_per_type": per_type, "spans_sc_seen_per_type": seen_per_type},
                         "m", "d", "sc", "")
    assert "| label | P | R | F | R seen | R unseen |" in text
    assert "| LOC | 100.00 | 75.00 | 85.71 | 100.00 | - |" in text


def test_results_machine_names_the_cpu_by_name_family_and_model(tmp_path):
    results = load_benchmark_script("results")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                       "model name\t: Intel(R) Xeon(R) Platinum 8480C\nstepping\t: 8\n\nprocessor\t: 1\n"
                       "cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n")
    assert results.cpu_name(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480C (family 6, model 143)"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # no name there (some ARM kernels)
    assert results.cpu_name(cpuinfo) == results.cpu_name(tmp_path / "missing")
    assert f", {results.cpu_name()}, " in results.machine() or not results.cpu_name()


def test_results_commit_is_marked_changed_by_code_edits_not_by_what_the_benchmarks_write(tmp_path, monkeypatch):
    results = load_benchmark_script("results")
    repo = tmp_path / "repo"
    (repo / "project" / "metrics").mkdir(parents=True)
    (repo / "code.py").write_text("a = 1\n")
    (repo / "project" / "RESULTS.md").write_text("# Results\n")
    (repo / "project" / results.raw_name("A")).write_text("{}\n")
    (tmp_path / "a.json").write_text('{"a": 1}\n')
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "start"], check=True)
    monkeypatch.setattr(results, "RESULTS", repo / "project" / "RESULTS.md")
    # the file's own edit and its committed raw figures rewritten
    results.write_section("A", "| a |", command="run a", path=results.RESULTS, raw=tmp_path / "a.json")
    status = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True).stdout
    assert "project/metrics/a.json" in status and "project/RESULTS.md" in status
    assert "uncommitted" not in results.commit()
    (repo / "README.md").write_text("prose\n")  # committed, then edited: prose, not code
    subprocess.run(git + ["add", "README.md"], check=True)
    subprocess.run(git + ["commit", "-qm", "readme"], check=True)
    (repo / "README.md").write_text("other prose\n")
    assert "uncommitted" not in results.commit()
    # A run that began at this commit and whose code changed before it wrote its section names both.
    monkeypatch.setattr(results, "_started", None)  # restored after the test
    results.mark_start()
    assert results.run_commit() == results.commit()
    (repo / "code.py").write_text("a = 2\n")
    assert results.commit().endswith(" (with uncommitted changes)")
    assert results.run_commit() == f"{results.commit().split()[0]} at start, {results.commit()} when written"
    results.write_section("A", "| b |", command="run a", path=results.RESULTS)
    assert " at start, " in results.RESULTS.read_text()


def test_the_ensemble_script_tunes_scores_and_times_on_the_gpu_it_trains_on(tmp_path, monkeypatch):
    """With spacy train's --gpu-id among its overrides, tuning, scoring and timing run there too."""
    ensemble = load_benchmark_script("ensemble")
    ablation = sys.modules["ablation"]  # the module ensemble.py imported its helpers from
    assert ensemble.gpu_of(["--paths.vectors", "v", "--gpu-id", "0"]) == 0
    assert ensemble.gpu_of(["--gpu-id=1"]) == 1 and ensemble.gpu_of(["-g", "2"]) == 2
    assert ensemble.gpu_of(["--training.max_steps", "5"]) == -1
    commands = []

    def fake_run(command):
        commands.append([str(part) for part in command])
        for flag, offset in (("--output", 1), ("--measure", 3)):  # the scores' file, the timing's result
            if flag in command:
                result = Path(command[command.index(flag) + offset])
                result.parent.mkdir(parents=True, exist_ok=True)
                result.write_text(json.dumps({"spans_sc_f": 0.5, "words_per_second": 10}))

    monkeypatch.setattr(ensemble, "run", fake_run)
    monkeypatch.setattr(ablation, "run", fake_run)
    for gpu, expected in ((0, ["--gpu-id", "0"]), (-1, [])):
        commands.clear()
        args = argparse.Namespace(out=str(tmp_path / str(gpu)), corpus="corpus", strict_objective=False,
                                  sentence_starts=False, strict=False, docs_corpus=None, gpu_id=gpu)
        ensemble.tuned(args, "seed0", Path("model-best"))
        ensemble.evaluate(args, "seed0", Path("model-tuned"))
        ablation.words_per_second(args, {"seed0": "model-tuned"}, 1)
        assert [c[0] for c in commands] == [sys.executable] * 3  # tune, dev, timing
        assert all(command[-2:] == expected or not expected and "--gpu-id" not in command for command in commands)


def test_a_section_written_with_raw_figures_names_them_and_they_are_saved_with_its_provenance(tmp_path):
    results = load_benchmark_script("results")
    raw = tmp_path / "run.json"
    raw.write_text(json.dumps([{"system": "fofe_ner", "spans_sc_f": 0.9}]))
    path = tmp_path / "RESULTS.md"
    results.write_section("Benchmark on conll", "| fofe_ner | 90.00 |", command="run it", path=path, raw=raw)
    assert "- raw figures: `metrics/benchmark-on-conll.json`" in path.read_text()
    saved = json.loads((tmp_path / "metrics" / "benchmark-on-conll.json").read_text())
    assert saved["figures"] == [{"system": "fofe_ner", "spans_sc_f": 0.9}] and saved["command (in `project/`)"] == \
        "`run it`" and saved["section"] == "Benchmark on conll" and "commit" in saved and "date" in saved


def test_the_readme_results_tables_are_copied_from_results_and_name_their_command():
    """The README publishes no figure of its own: each row of its results tables is a row of RESULTS.md,
    under a paragraph that names the section and the project command that wrote it (`sections "TITLE: SYSTEMS"`
    names those of some systems alone, each `--vars.benchmark_only SYSTEMS`)."""
    readme = (ROOT / "README.md").read_text()
    part = readme.split("## Results and the spaCy project", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("| ") and not line.startswith("| system |")]
    results = (ROOT / "project" / "RESULTS.md").read_text().splitlines()
    for row in rows:
        assert row in results, f"README results row not in project/RESULTS.md: {row}"
    titles = re.findall(r'sections? "([^"]+)"', part)
    for title in titles:
        pattern = re.escape(f"## {title}").replace("SYSTEMS", r"[\w-]+(, [\w-]+)*")
        assert any(re.fullmatch(pattern, line) for line in results), \
            f"README names a RESULTS section that does not exist: {title}"
    if rows:
        assert "spacy project run benchmark" in " ".join(part.split()) and titles


def test_every_results_table_row_is_in_its_sections_committed_raw_figures():
    text = (ROOT / "project" / "RESULTS.md").read_text()
    sections = re.findall(r"(?ms)^## (.+?)\n(.*?)(?=^## |\Z)", text)
    assert sections
    for title, body in sections:
        named = re.search(r"^- raw figures: `(metrics/[^`]+)`$", body, re.M)
        assert named, f"RESULTS section {title!r} names no raw figures file"
        raw = (ROOT / "project" / named.group(1)).read_text()
        rows = [line.split("|")[1].strip() for line in body.splitlines() if line.startswith("| ")]
        for row in rows[1:]:  # the header aside; numbers as JSON writes them (1,000 is 1000)
            if row.endswith(" (blis)"):  # a system's figures on thinc's blis ops, kept in its row as blis_*
                row = row.removesuffix(" (blis)")
                assert "blis_words_per_second" in raw, f"{title}: no blis figures in {named.group(1)}"
            assert json.dumps(row.replace(",", ""))[1:-1] in raw, f"{title}: row {row!r} is not in {named.group(1)}"
