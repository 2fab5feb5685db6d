"""The house's size rules, read from the source: no module over 400 lines and no function
over 60, data tables excepted (a literal table or a text block — a script, a template —
counts as one line: it is read as data, not followed as logic)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "lanes", "jobs", "routing", "gateway", "guardian", "metrics", "benchmarks", "portal", "sparksim", "perf",
            "scripts", "tests")
MODULE_MAX = 400
FUNCTION_MAX = 60


def source_files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if "migrations" not in path.parts]


def is_data(node: ast.AST) -> bool:
    """A literal: constants, and dicts, lists, tuples and sets of literals (an f-string too)."""
    if isinstance(node, ast.Constant | ast.JoinedStr):
        return True
    if isinstance(node, ast.Dict):
        return all(key is None or is_data(key) for key in node.keys) and all(is_data(v) for v in node.values)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(is_data(element) for element in node.elts)
    if isinstance(node, ast.FormattedValue):
        return True
    if isinstance(node, ast.BinOp):  # "..." + "...", a table * n
        return is_data(node.left) and is_data(node.right)
    return False


def data_lines(tree: ast.AST) -> set[int]:
    """Lines inside multi-line literals, but for the first line of each."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and is_data(node) and node.end_lineno and node.end_lineno > node.lineno:
            lines.update(range(node.lineno + 1, node.end_lineno + 1))
    return lines


def counted(first: int, last: int, skip: set[int]) -> int:
    return sum(1 for line in range(first, last + 1) if line not in skip)


def measure(path: Path) -> tuple[int, list[tuple[str, int]]]:
    text = path.read_text()
    tree = ast.parse(text, str(path))
    skip = data_lines(tree)
    module = counted(1, len(text.splitlines()), skip)
    functions = [(f"{node.name}:{node.lineno}", counted(node.lineno, node.end_lineno or node.lineno, skip))
                 for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    return module, functions


def test_the_measure_counts_logic_and_not_data(tmp_path: Path) -> None:
    path = tmp_path / "sample.py"
    path.write_text('TABLE = {\n    "a": 1,\n    "b": [2, 3],\n}\n\n\ndef f(x):\n    script = """\nline\nline\n"""\n'
                    '    if x:\n        return {\n            "k": x,\n        }\n    return script\n')
    module, functions = measure(path)
    assert module == 10  # the table counts one line, the text block one, the dict built from x three
    assert functions == [("f:7", 7)]


def test_modules_and_functions_stay_small() -> None:
    wrong = []
    for path in source_files():
        module, functions = measure(path)
        where = path.relative_to(ROOT)
        if module > MODULE_MAX:
            wrong.append(f"{where}: {module} lines (split it by subject)")
        wrong += [f"{where}:{name}: {size} lines" for name, size in functions if size > FUNCTION_MAX]
    assert wrong == []
