"""Build installable wheels of spacy-fofe and of a trained pipeline into one folder.

    python scripts/package.py MODEL OUTPUT --name fofe_ner_conll [--version 0.1.0]

OUTPUT/dist then holds spacy_fofe-*.whl and the pipeline's wheel (from `spacy package`, which
declares spacy-fofe and spaCy of this minor version as requirements), so on another machine
`pip install --find-links OUTPUT/dist <lang>_<name>` installs both, and spaCy and its dependencies
from the package index (add `--no-index` only where they are installed already). A pipeline
whose config needs an extra of spacy-fofe where it runs (the USE features: `use`) requires
spacy-fofe with that extra, so pip installs its packages too. Builds run without build
isolation, so they need no network: setuptools and wheel must be installed (the `package` extra).
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import spacy
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import spacy_fofe

ROOT = Path(__file__).resolve().parents[2]
# The extra of spacy-fofe that a registered function in a pipeline's config needs where it runs.
EXTRAS = {"spacy_fofe.USEFeatures.v1": "use"}


def fofe_requirement(config_text: str) -> str:
    """The requirement on spacy-fofe for a pipeline with this config: this minor version, with the
    extras its config needs."""
    extras = sorted({extra for function, extra in EXTRAS.items() if f'"{function}"' in config_text})
    named = f"spacy-fofe[{','.join(extras)}]" if extras else "spacy-fofe"
    return named + spacy.util.get_minor_version_range(spacy_fofe.__version__)


def build_wheel(source: Path, dist: Path) -> None:
    """pip builds in the source tree; its build/ folder goes before (stale files would end up in
    the wheel) and after."""
    shutil.rmtree(source / "build", ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--wheel-dir", str(dist), str(source)], check=True)
    finally:
        shutil.rmtree(source / "build", ignore_errors=True)


def package(model: Path, output: Path, name: str, version: str) -> Path:
    """Build both wheels into output/dist and return that folder."""
    dist = output / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    print(f"Building the spacy-fofe wheel from {ROOT}", flush=True)
    build_wheel(ROOT, dist)
    print(f"Packaging the pipeline {model} as {name} {version}", flush=True)
    # spacy package would add a plain spacy-fofe requirement; one already in the meta (with extras) is kept.
    meta = spacy.util.load_meta(model / "meta.json")
    others = [r for r in meta.get("requirements", []) if canonicalize_name(Requirement(r).name) != "spacy-fofe"]
    meta["requirements"] = [*others, fofe_requirement((model / "config.cfg").read_text())]
    # spacy package would require the builder's spaCy patch release or later; any of its minor version loads it.
    release = Version(spacy.__version__).release
    meta["spacy_version"] = f">={release[0]}.{release[1]}.0,<{release[0]}.{release[1] + 1}.0"
    (output / "meta.json").write_text(json.dumps(meta, indent=2))
    subprocess.run([sys.executable, "-m", "spacy", "package", str(model), str(output), "--name", name,
                    "--version", version, "--build", "none", "--force", "--meta-path", str(output / "meta.json")],
                   check=True)
    build_wheel(output / f"{meta['lang']}_{name}-{version}", dist)
    print(f"Wheels in {dist}: {', '.join(sorted(p.name for p in dist.glob('*.whl')))}")
    print(f"Install elsewhere: pip install --find-links {dist} {meta['lang']}_{name}")
    return dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="trained pipeline directory")
    parser.add_argument("output", type=Path, help="folder for the package sources and dist/ with the wheels")
    parser.add_argument("--name", required=True, help="pipeline package name, without the language prefix")
    parser.add_argument("--version", default="0.1.0")
    args = parser.parse_args()
    if not (args.model / "meta.json").is_file():
        sys.exit(f"{args.model} is not a saved pipeline (no meta.json)")
    package(args.model, args.output, args.name, args.version)


if __name__ == "__main__":
    main()
