"""The spaCy project's demo workflow, end to end (convert, train, tune, evaluate) on the demo corpus."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
