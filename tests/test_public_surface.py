"""Each module uses only the public names of the others (as httpx checks its exports).

A leading underscore says "this module's own": no module imports such a name from another of
the project's modules, nor reaches one through an imported module (``flatten._table``). A name
another module needs gets a public name and a docstring in its home module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "flows", "freetime_cli", "sandbox")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_uses(module: str, source: str, is_package: bool = False) -> list[str]:
    """``module: name`` for each private name of another project module that ``module``
    (whose code is ``source``) uses."""
    tree = ast.parse(source)
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> project module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            home = _absolute(module, node, is_package)
            if home.split(".")[0] not in PACKAGES or home == module:
                continue
            for a in node.names:
                if _private(a.name):
                    found.append(f"{module}: from {home} import {a.name}")
                else:
                    aliases[a.asname or a.name] = f"{home}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and aliases[node.value.id] != module
        ):
            found.append(f"{module}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    files = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]
    assert len(files) > 40
    uses = [
        use
        for path in files
        for use in private_uses(_module_name(path), path.read_text(), path.name == "__init__.py")
    ]
    assert uses == []


def test_the_check_sees_both_ways_of_reaching_a_private_name() -> None:
    source = (
        "from pipelines.terminal49 import flatten\n"
        "from .flatten import _attribute_columns\n"
        "from .scan import ListScan\n"
        "flatten._instants, ListScan._page\n"
    )
    assert private_uses("pipelines.terminal49.probe", source) == [
        "pipelines.terminal49.probe: from pipelines.terminal49.flatten import _attribute_columns",
        "pipelines.terminal49.probe: pipelines.terminal49.flatten._instants",
        "pipelines.terminal49.probe: pipelines.terminal49.scan.ListScan._page",
    ]
    # a module's own private names, and dunders, are its own business
    own = "from pipelines.terminal49 import flatten\nflatten._instants, flatten.__doc__\n"
    assert private_uses("pipelines.terminal49.flatten", own) == []
