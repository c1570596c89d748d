"""Everything setup.cfg registers resolves through spaCy's registries in a process that never
imports spacy_fofe itself (catalogue loads it from the entry points)."""

import configparser
import json
import subprocess
import sys
from pathlib import Path

SETUP_CFG = Path(__file__).parent.parent / "setup.cfg"


def test_every_entry_point_resolves_without_an_import():
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    names = {}
    for group, lines in parser["options.entry_points"].items():
        kind = group.removeprefix("spacy_")
        names[kind] = [line.split("=")[0].strip() for line in lines.strip().splitlines()]
    assert names["architectures"] and names["layers"], names
    script = (
        "import json, sys, spacy\n"
        "names = json.loads(sys.argv[1])\n"
        "for name in names.pop('factories'):\n"
        "    spacy.blank('en').add_pipe(name)\n"
        "missing = [(kind, name) for kind, group in names.items() for name in group\n"
        "           if not callable(getattr(spacy.registry, kind).get(name))]\n"
        "print(json.dumps(missing))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, json.dumps(names)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
