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


# ---- the allow-list: each layer names every gpucomm module it may import; anything else fails
# (a new runtime -> emulate or simulate -> report import included), and so does a private name
# (`_x`, or a module `_x`) imported from another layer. `python tests/test_layering.py` prints
# this table as docs/architecture.md should state it.
ALLOWED = {
    "errors": set(),
    "memo": set(),
    "dtypes": {"errors"},
    "inputs": {"errors"},
    "outputs": {"errors"},
    "limits": {"errors"},
    "grid": {"errors", "inputs"},
    "hardware": {"errors"},
    "collectives": {"dtypes", "errors"},
    "schedule": {"collectives", "errors", "memo"},
    "execute": {"dtypes", "errors", "schedule"},
    "verify": {"collectives", "errors", "schedule"},
    "algorithms": {"collectives", "errors", "schedule"},
    "topology": {"errors", "hardware", "inputs", "limits", "memo", "outputs"},
    "simulate": {"algorithms", "collectives", "dtypes", "errors", "hardware", "memo", "schedule",
                 "topology"},
    "runtime": {"algorithms", "collectives", "dtypes", "errors", "schedule"},
    "torch": {"errors", "runtime"},
    "emulate": {"algorithms", "collectives", "dtypes", "errors", "execute", "outputs", "runtime",
                "topology"},
    "bench": {"algorithms", "collectives", "dtypes", "errors", "limits", "outputs", "runtime",
              "schedule", "simulate", "topology"},
    "interop": {"collectives", "dtypes", "errors", "hardware", "inputs", "limits", "schedule",
                "simulate", "topology"},
    "workloads": {"collectives", "errors", "hardware", "inputs", "limits", "schedule",
                  "simulate", "topology"},
    "report": {"collectives", "dtypes", "errors", "outputs", "simulate", "topology",
               "__version__"},
    "cli": {"algorithms", "bench", "collectives", "dtypes", "errors", "execute", "grid",
            "hardware", "inputs", "interop", "limits", "outputs", "report", "runtime",
            "simulate", "topology", "verify", "workloads", "__version__"},
    "__init__": {"collectives", "dtypes", "errors", "runtime", "schedule", "verify"},
    "__main__": {"cli"},
}


def gpucomm_imports(path: pathlib.Path) -> list[tuple[str, str]]:
    """(the gpucomm module a statement imports from, the name it takes) for every gpucomm
    import in `path`, relative imports resolved; `import gpucomm.x.y` gives ("gpucomm.x.y", "")."""
    pkg = ("gpucomm",) + path.relative_to(SRC).parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = ".".join(pkg[:len(pkg) - node.level + 1] + ((node.module,) if node.module
                                                                else ())) \
                if node.level else node.module or ""
            if mod == "gpucomm" or mod.startswith("gpucomm."):
                out += [(f"{mod}.{a.name}" if mod == "gpucomm" else mod, a.name)
                        for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("gpucomm.")]
    return out


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _all_modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).parts[0].removesuffix(".py"), path


@pytest.mark.parametrize("layer, path", list(_all_modules()), ids=lambda x: str(x)[-40:])
def test_imports_are_on_the_allow_list(layer, path):
    assert layer in ALLOWED, f"{layer} is a new layer: give it a row of ALLOWED"
    used = {_layer_of(m) for m, _ in gpucomm_imports(path)} - {layer}
    bad = used - ALLOWED[layer]
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports {sorted(bad)}, not allowed"


def test_no_private_name_is_imported_across_layers():
    found = []
    for layer, path in _all_modules():
        for module, name in gpucomm_imports(path):
            parts = module.split(".")[1:] + ([name] if name else [])
            private = [p for p in parts if p.startswith("_") and not p.startswith("__")]
            if private and _layer_of(module) != layer:
                found.append(f"{path.relative_to(SRC)}: {module} {name}")
    assert not found, "private names imported from another layer:\n" + "\n".join(found)


def test_the_allow_list_and_the_deny_list_agree():
    for layer, forbidden in FORBIDDEN.items():
        assert not ALLOWED[layer] & forbidden, layer


def allow_table() -> str:
    """The allow-list as the Markdown table docs/architecture.md should hold."""
    rows = ["| layer | may import |", "|---|---|"]
    rows += [f"| `{layer}` | {', '.join(sorted(ALLOWED[layer])) or '(nothing)'} |"
             for layer in ALLOWED]
    return "\n".join(rows)


if __name__ == "__main__":
    print(allow_table())
