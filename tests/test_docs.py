"""Docs that cannot rot: every ```sh and ```python block of README.md, CONTRIBUTING.md and
docs/*.md runs, in
order, in a scratch directory, and prints the ```text block shown after it (tools/docblocks.py;
conventions in CONTRIBUTING.md; `python3 tools/regen_docs.py` rewrites the outputs)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import docblocks  # noqa: E402

pytestmark = pytest.mark.slow  # the CLI as subprocesses


@pytest.mark.parametrize("path", docblocks.doc_files(), ids=lambda p: p.name)
def test_every_command_block_runs_and_prints_what_is_shown(path):
    problems = docblocks.check_file(path)
    assert not problems, "\n\n".join(problems)


def test_the_readme_is_short():
    assert len((docblocks.ROOT / "README.md").read_text().splitlines()) <= 250


def test_every_skipped_block_says_why_and_every_shown_output_has_a_command():
    for path in docblocks.doc_files():
        text = path.read_text()
        shown = {ex.output.line for ex in docblocks.examples(text) if ex.output}
        for b in docblocks.blocks(text):
            if b.lang == "text":
                assert b.line in shown, f"{path.name}:{b.line}: a ```text block with no ```sh " \
                    "or ```python block right before it (show the command that prints it)"


SAMPLE = """Intro.

<!-- doc: file: n.txt -->
```yaml
a: 1
```

```sh
cat n.txt
```

```text
a: 1
```

<!-- doc: skip: needs two hosts -->
```sh
torchrun --nnodes 2 train.py
```

```sh
echo one
echo 2.5 ms
```

<!-- doc: timing -->
```text
one
10.0 ms
```

```python
for k in range(1, 6): print(k)
```

```text
1
...
5
```
"""


def test_the_block_conventions(tmp_path):
    exs = docblocks.examples(SAMPLE)
    assert [ex.command.markers.get("file") for ex in exs[:2]] == ["n.txt", None]
    exs = exs[2:]  # (regenerate below runs the file block and its `cat`)
    assert [ex.skipped for ex in exs] == [True, False, False]
    assert exs[0].output is None and exs[0].command.markers["skip"] == "needs two hosts"
    assert "timing" in exs[1].output.markers
    assert docblocks.matches(exs[1].output.text, "one\n2.5 ms\n", timing=True)
    assert docblocks.matches(exs[1].output.text, "one\n0.0 ms\n", timing=True)
    assert not docblocks.matches(exs[1].output.text, "one\n0.25 ms\n", timing=True)  # places
    assert not docblocks.matches(exs[1].output.text, "one\n1001.0 ms\n", timing=True)
    assert docblocks.matches("-1  10.0 ms\n", "-1 100.0 ms\n", timing=True)  # a wider column
    assert not docblocks.matches(exs[1].output.text, "two\n10.0 ms\n", timing=True)
    assert not docblocks.matches(exs[1].output.text, "one\n2.5 ms\n")
    assert docblocks.matches(exs[2].output.text, "1\n2\n3\n4\n5\n")
    assert not docblocks.matches(exs[2].output.text, "1\n2\n3\n4\n6\n")
    assert docblocks.rewritten(exs[2].output.text, "0\n1\n2\n3\n") == "0\n...\n3\n"
    doc = tmp_path / "x.md"
    doc.write_text(SAMPLE.replace("range(1, 6)", "range(6)"))
    assert docblocks.regenerate(doc) == 1
    assert "0\n...\n5\n" in doc.read_text()
    with pytest.raises(ValueError, match="needs a reason"):
        docblocks.examples("<!-- doc: skip -->\n```sh\nls\n```\n")


def test_the_readme_accuracy_line_is_what_the_accuracy_benchmark_prints():
    """The README's one accuracy sentence quotes docs/accuracy.md's checked output block."""
    readme = (docblocks.ROOT / "README.md").read_text()
    para = readme[readme.index("## Accuracy"):].split("\n\n")[1]
    rows, err = re.search(r"on the\s+(\d+) rows of 64 MiB and more is (\d+\.\d)%", para).groups()
    acc = (docblocks.ROOT / "docs" / "accuracy.md").read_text()
    shown = next(ex.output.text for ex in docblocks.examples(acc) if ex.output)
    assert f">=64 MiB {rows} rows median |busbw err| {err}%" in shown
