"""Everything setup.cfg registers resolves through spaCy's registries in a process that never
imports spacy_fofe itself (catalogue loads it from the entry points)."""

import configparser
import json
import subprocess
import sys
from pathlib import Path

SETUP_CFG = Path(__file__).parent.parent / "setup.cfg"


def entry_point_names():
    """{registry kind: [names]} of setup.cfg's entry points."""
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    names = {}
    for group, lines in parser["options.entry_points"].items():
        if not group.startswith("spacy_"):
            continue  # thinc_ops: thinc's registry, checked by tests/test_ops.py
        kind = group.removeprefix("spacy_")
        names[kind] = [line.split("=")[0].strip() for line in lines.strip().splitlines()]
    return names


def test_every_function_the_package_registers_has_an_entry_point():
    import spacy

    import spacy_fofe  # noqa: F401  (registers everything)

    names = entry_point_names()
    for kind in ("architectures", "layers", "readers", "misc", "scorers"):
        registered = {name for name in getattr(spacy.registry, kind).get_all() if name.startswith("spacy_fofe.")}
        missing = registered - set(names.get(kind, ()))
        assert not missing, f"registered but not in setup.cfg's spacy_{kind} entry points: {sorted(missing)}"
    assert "fofe_ner" in spacy.registry.factories.get_all() and names["factories"] == ["fofe_ner"]


def test_every_entry_point_resolves_without_an_import():
    names = entry_point_names()
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
