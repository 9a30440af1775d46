"""The one-way layering of docs/architecture.md ("Layers"): lower layers never import higher
ones. The table there lists, per layer, what FORBIDDEN below forbids it to import."""
import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "gpucomm"
# module -> packages it must never import
FORBIDDEN = {
    "hardware": {"topology", "simulate", "runtime", "bench", "workloads", "report", "cli",
                 "algorithms", "schedule"},
    "topology": {"simulate", "runtime", "bench", "workloads", "report", "cli", "algorithms"},
    "collectives": {"schedule", "algorithms", "simulate", "runtime", "bench", "workloads", "cli",
                    "topology", "hardware"},
    "schedule": {"algorithms", "simulate", "runtime", "bench", "workloads", "cli", "topology"},
    "verify": {"algorithms", "simulate", "runtime", "bench", "workloads", "cli"},
    "algorithms": {"simulate", "runtime", "bench", "workloads", "cli", "topology", "hardware"},
    "simulate": {"runtime", "bench", "workloads", "cli"},
    "runtime": {"simulate", "bench", "workloads", "cli", "report"},
    "report": {"runtime", "bench", "workloads", "cli"},
    "workloads": {"runtime", "bench", "cli"},
    "emulate": {"simulate", "bench", "workloads", "cli"},
    "torch": {"simulate", "bench", "workloads", "cli", "report"},
    "bench": {"workloads", "cli"},
    "interop": {"runtime", "bench", "workloads", "cli", "emulate", "torch", "report"},
}
for _layer in FORBIDDEN:  # interop (nccl-tests logs, MSCCL, NCCL tuner) reads the layers below
    if _layer != "interop":
        FORBIDDEN[_layer].add("interop")


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    pkg_parts = path.relative_to(SRC).parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[:len(pkg_parts) - node.level + 1])
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}".lstrip(".")
                                                   for a in node.names]
            else:
                names = [node.module or ""]
            for n in names:
                if n.startswith("gpucomm."):
                    n = n[len("gpucomm."):]
                found.add(n.split(".")[0] if n else "")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gpucomm."):
                    found.add(a.name.split(".")[1])
    return found


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        top = path.relative_to(SRC).parts[0].removesuffix(".py")
        if top in FORBIDDEN:
            yield top, path


@pytest.mark.parametrize("layer, path", list(_modules()), ids=lambda x: str(x)[-40:])
def test_no_upward_imports(layer, path):
    bad = _imports(path) & FORBIDDEN[layer]
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports {sorted(bad)}"


def test_the_architecture_document_states_these_rules():
    """docs/architecture.md's layer table says what each layer never imports: the same sets."""
    doc = SRC.parents[1] / "docs" / "architecture.md"
    stated = {}
    for line in doc.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            layer = cells[1].strip("`")
            if layer in FORBIDDEN:
                stated[layer] = {x.strip() for x in cells[3].split(",")}
    assert stated == FORBIDDEN
