"""The packaged pipeline installs with spacy-fofe into a fresh virtual environment, offline."""

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import spacy
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import spacy_fofe

ROOT = Path(__file__).resolve().parents[1]


def fresh_venv_with_dependencies(path: Path) -> Path:
    """A new venv that sees this environment's packages (spaCy and its dependencies) but not
    spacy-fofe: each entry of site-packages is linked into a folder named in a .pth file."""
    venv.EnvBuilder(with_pip=True).create(path)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shared = path / "shared-site"
    shared.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        if not (name.startswith(("spacy_fofe", "__editable__", "en_fofe", "_virtualenv")) or name.endswith(".pth")):
            (shared / entry.name).symlink_to(entry)
    (site / "dependencies.pth").write_text(str(shared) + "\n")
    return python


def test_a_pipeline_requires_spacy_fofe_with_the_extras_its_config_needs():
    from test_project import load_benchmark_script

    package = load_benchmark_script("package")
    version = spacy.util.get_minor_version_range(spacy_fofe.__version__)
    for config, extras in [("germeval.cfg", {"use"}), ("conll.cfg", set()),
                           ("demo.cfg", set())]:
        requirement = Requirement(package.fofe_requirement((ROOT / "configs" / config).read_text()))
        assert requirement.name == "spacy-fofe" and requirement.extras == extras, config
        assert requirement.specifier == SpecifierSet(version)


@pytest.mark.slow
def test_the_pipeline_package_and_spacy_fofe_install_offline_and_load(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    subprocess.run([sys.executable, str(ROOT / "project" / "scripts" / "package.py"), str(tmp_path / "model"),
                    str(tmp_path / "packages"), "--name", "fofe_test"], check=True, cwd=tmp_path)
    dist = tmp_path / "packages" / "dist"
    assert sorted(p.name.split("-")[0] for p in dist.glob("*.whl")) == ["en_fofe_test", "spacy_fofe"]
    with zipfile.ZipFile(next(dist.glob("en_fofe_test-*.whl"))) as wheel:
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: spacy-fofe")]
    assert len(requires) == 1 and "[" not in requires[0]  # its config needs no extra
    major, minor = spacy.__version__.split(".")[:2]  # any patch release of the builder's spaCy minor version
    assert f"Requires-Dist: spacy<{major}.{int(minor) + 1}.0,>={major}.{minor}.0" in metadata.splitlines(), metadata
    python = fresh_venv_with_dependencies(tmp_path / "fresh")
    missing = subprocess.run([str(python), "-c", "import spacy_fofe"], capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode != 0  # the fresh venv does not see this checkout's spacy-fofe
    # Only the pipeline is named: spacy-fofe comes in as its declared requirement.
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(dist), "en_fofe_test"],
                   check=True, cwd=tmp_path)
    script = ("import spacy, spacy_fofe; nlp = spacy.load('en_fofe_test'); doc = nlp('Ann Lee lives in Toronto .');"
              "print(spacy_fofe.__file__); print(sorted((s.text, s.label_) for s in doc.spans['sc']))")
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    location, spans = done.stdout.strip().splitlines()
    assert str(tmp_path / "fresh") in location
    doc = trained("Ann Lee lives in Toronto .")
    assert spans == str(sorted((s.text, s.label_) for s in doc.spans["sc"])) and "('Ann Lee', 'PER')" in spans
