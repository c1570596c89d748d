"""The package reads no private name of another library (spaCy, thinc, srsly, the encoder...).

A private name (`_x`) of another package can change or vanish in its next minor release. This
test reads the package's source: an attribute `._x`, a `getattr(..., "_x")`, or an import of a
module or name that starts with an underscore is an error unless the package defines `_x` itself.
"""

import ast
from pathlib import Path

import spacy_fofe

PACKAGE = Path(spacy_fofe.__file__).parent


def sources():
    return sorted(PACKAGE.rglob("*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(trees) -> set:
    """Every name the package binds: functions, classes, arguments, assigned names and attributes."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return names


def private_uses(path: Path, tree: ast.AST, ours: set):
    for node in ast.walk(tree):
        where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in ours:
            yield where, f".{node.attr}"
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr"):
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                if private(node.args[1].value) and node.args[1].value not in ours:
                    yield where, f"getattr(..., {node.args[1].value!r})"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not node.module.startswith("spacy_fofe"):
            if any(private(part) for part in node.module.split(".")):
                yield where, f"from {node.module} import"
            for alias in node.names:
                if private(alias.name):
                    yield where, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(private(part) for part in alias.name.split(".")):
                    yield where, f"import {alias.name}"


def test_the_package_reads_no_private_name_of_another_library():
    trees = {path: ast.parse(path.read_text(encoding="utf8")) for path in sources()}
    ours = defined_names(trees.values())
    found = [use for path, tree in trees.items() for use in private_uses(path, tree, ours)]
    assert not found, found


def test_the_check_finds_a_private_read():
    tree = ast.parse("from thinc.layers import maxout\nfrom spacy.cli._util import app\n"
                     "x = maxout._helper\ny = getattr(node, '_func')\n")
    found = [what for _, what in private_uses(PACKAGE / "example.py", tree, {"_mine"})]
    assert found == ["from spacy.cli._util import", "._helper", "getattr(..., '_func')"]
