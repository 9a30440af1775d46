"""The runtime stays in a shape the next engineer can change safely: no function over
MAX_FUNCTION_LINES lines and no module over MAX_MODULE_LINES lines in src/gpucomm/runtime/."""
import ast
import pathlib


RUNTIME = pathlib.Path(__file__).resolve().parents[1] / "src" / "gpucomm" / "runtime"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def too_long(root: pathlib.Path) -> list[str]:
    """Every module and function under `root` over its budget, as 'path:line name (N lines)'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(root.parent)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel} ({lines} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_the_check_finds_a_long_function_and_a_long_module(tmp_path):
    pkg = tmp_path / "runtime"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def f():\n{body}\n")
    (pkg / "short.py").write_text("def g():\n    return 1\n" + "\n" * MAX_MODULE_LINES)
    found = too_long(pkg)
    assert found == ["runtime/long.py:1 f (61 lines)", "runtime/short.py (402 lines)"]


def test_runtime_functions_and_modules_stay_small():
    assert too_long(RUNTIME) == []
