"""Run the `all` workflow when CoNLL-2003 is present at the given folder, else `demo`."""

import subprocess
import sys
from pathlib import Path


def main(conll_dir: str) -> None:
    have_conll = all((Path(conll_dir) / f"{split}.conll").exists() for split in ("train", "dev", "test"))
    workflow = "all" if have_conll else "demo"
    print(f"CoNLL-2003 {'found' if have_conll else 'not found'} at {conll_dir}: running the '{workflow}' workflow")
    subprocess.run([sys.executable, "-m", "spacy", "project", "run", workflow, "."], check=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
