"""Lower layers never import upper ones: each package may import only the packages listed
for it (checked on the source's import statements, runtime and type-only alike)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "common": set(),
    "grouping": {"common"},
    "checkpoint": {"common", "grouping"},
    "coordinator": {"common", "grouping", "checkpoint"},
    "worker": {"common", "grouping", "checkpoint"},
    "service": {"common", "grouping", "checkpoint", "coordinator", "worker", "migrations"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(ALLOWED) | ({"migrations"} & names)


def test_no_package_imports_a_layer_above_it() -> None:
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in sorted(imported_packages(path) - allowed - {package}):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)
