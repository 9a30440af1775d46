"""Rewrite the output blocks of the docs with what their commands print now.

    python3 tools/regen_docs.py [FILE.md ...]    (default: README.md, CONTRIBUTING.md, docs/*.md)

For a change of the model or of a command's output made on purpose: run it, read the diff
(`git diff README.md docs/`), commit it with the change. Blocks marked `doc: skip` are left as
they are; their recorded outputs come from the command named beside them (see CONTRIBUTING.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docblocks import ROOT, doc_files, regenerate  # noqa: E402


def main(argv: list[str]) -> int:
    files = [Path(a).resolve() for a in argv] or doc_files()
    for path in files:
        if not path.is_file():
            print(f"regen_docs: no file {path}", file=sys.stderr)
            return 2
        try:
            n = regenerate(path)
        except RuntimeError as e:
            print(f"regen_docs: {e}", file=sys.stderr)
            return 1
        print(f"{path.relative_to(ROOT)}: {n} output block{'s' if n != 1 else ''} rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
