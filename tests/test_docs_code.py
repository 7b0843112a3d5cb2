"""Every ``python`` code block of the documentation and of the README runs.

The blocks of one page run in order in one namespace, so a block may use what an
earlier block of the same page defined. Each page is its own test case, run with the
current directory set to a fresh temporary folder (a block that saves a file writes
nothing into the repository) and one thread.

A block that must not run is marked by an HTML comment on the line right before its
opening fence (blank lines in between are allowed)::

    <!-- docs-test: skip (needs a CUDA device) -->
    ```python
    model.cuda()
    ```

The reason in parentheses is required and is shown in the source of the page; the
comment does not appear on the rendered site. A block whose only content is a snippet
include of an example script (``--8<-- "examples/quickstart.py"``) is run by
``tests/test_examples.py``, which runs every example; any other snippet include is
expanded and run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
PYTHON_LANGUAGES = {"python", "py", "python3"}
#: Time limit of one block (one thread; the slowest block, a short training run, takes ~5 s).
MAX_SECONDS_PER_BLOCK = 30

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<directive>\S+)(?P<rest>.*?)-->", re.S)
_SKIP_REASON = re.compile(r"^\s*\((?P<reason>[^()]*\S[^()]*)\)\s*$")
_SNIPPET = re.compile(r"^\s*-{1,2}8<-{1,2}\s+\"(?P<path>[^\"]+)\"\s*$")


@dataclass
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  #: 1-based line of the first line of code (after the opening fence)
    language: str
    code: str
    skip_reason: str | None
    marker_error: str | None = None

    @property
    def where(self) -> str:
        return f"{_rel(self.page)}:{self.line - 1}"


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


def parse_blocks(page: Path) -> tuple[list[Block], list[str]]:
    """Every fenced block of ``page`` with its skip marker, and the marker errors."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    errors: list[str] = []
    pending: tuple[int, str | None, str | None] | None = None  # (line, reason, error)
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening:
            indent, fence = opening["indent"], opening["fence"]
            language = (
                opening["info"].strip().split(" ")[0].lower() if opening["info"].strip() else ""
            )
            body: list[str] = []
            j = i + 1
            while j < len(lines):
                closing = re.match(
                    rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[j]
                )
                if closing:
                    break
                text = lines[j]
                body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
                j += 1
            reason, error = (pending[1], pending[2]) if pending else (None, None)
            if pending and language not in PYTHON_LANGUAGES:
                errors.append(
                    f"{_rel(page)}:{pending[0]}: a docs-test marker before a "
                    f"{language or 'plain'} block (only python blocks run)"
                )
            blocks.append(Block(page, i + 2, language, "\n".join(body) + "\n", reason, error))
            pending = None
            i = j + 1
            continue
        for marker in _MARKER.finditer(line):
            if pending:
                errors.append(
                    f"{_rel(page)}:{pending[0]}: a docs-test marker not followed by a code block"
                )
            if marker["directive"] != "skip":
                pending = (
                    i + 1,
                    None,
                    f"unknown docs-test directive {marker['directive']!r} (only 'skip')",
                )
            else:
                found = _SKIP_REASON.match(marker["rest"])
                pending = (
                    i + 1,
                    found["reason"].strip() if found else None,
                    None
                    if found
                    else "a skip without a reason: write <!-- docs-test: skip (why) -->",
                )
            if pending[2]:
                errors.append(f"{_rel(page)}:{pending[0]}: {pending[2]}")
        if pending and line.strip() and not _MARKER.fullmatch(line.strip()):
            errors.append(
                f"{_rel(page)}:{pending[0]}: a docs-test marker must come right "
                "before the code block's opening fence"
            )
            pending = None
        i += 1
    if pending:
        errors.append(f"{_rel(page)}:{pending[0]}: a docs-test marker not followed by a code block")
    return blocks, errors


def _python_blocks(page: Path) -> list[Block]:
    return [block for block in parse_blocks(page)[0] if block.language in PYTHON_LANGUAGES]


def _example_include(block: Block) -> str | None:
    """The example script a block only includes, e.g. ``examples/quickstart.py``, else None."""
    lines = [line for line in block.code.splitlines() if line.strip()]
    paths = [m["path"] for m in map(_SNIPPET.match, lines) if m]
    if len(paths) == 1 == len(lines) and paths[0].startswith("examples/"):
        return paths[0]
    return None


def _expand_snippets(block: Block) -> str:
    out = []
    for line in block.code.splitlines():
        m = _SNIPPET.match(line)
        out.append((ROOT / m["path"]).read_text(encoding="utf-8") if m else line)
    return "\n".join(out) + "\n"


PAGES_WITH_CODE = [page for page in PAGES if _python_blocks(page)]


def test_markers_are_well_formed() -> None:
    errors = [error for page in PAGES for error in parse_blocks(page)[1]]
    assert not errors, "\n".join(errors)


def test_the_parser_finds_the_blocks() -> None:
    # guards the test below against a parser that silently finds nothing
    blocks = [block for page in PAGES_WITH_CODE for block in _python_blocks(page)]
    assert len(blocks) >= 20
    assert {p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE} >= {
        "README.md",
        "docs/index.md",
        "docs/concepts/groups.md",
        "docs/tutorials/vit-digits.md",
    }
    examples = {_example_include(block) for block in blocks} - {None}
    assert "examples/quickstart.py" in examples
    for path in examples:
        assert path is not None and (ROOT / path).is_file(), path


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in _python_blocks(page):
        if block.skip_reason is not None or _example_include(block) is not None:
            continue  # a marked block, or an example script run by tests/test_examples.py
        # pad with blank lines so that a traceback names the line of the Markdown file
        source = "\n" * (block.line - 1) + _expand_snippets(block)
        start = time.perf_counter()
        try:
            exec(compile(source, str(page), "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"the code block at {block.where} failed: {error!r}") from error
        elapsed = time.perf_counter() - start
        # a page that trains uses tiny settings (a block takes seconds on one thread)
        assert elapsed < MAX_SECONDS_PER_BLOCK, (
            f"the code block at {block.where} took {elapsed:.0f} s; give it smaller settings"
        )


def test_the_skip_convention(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- docs-test: skip (needs a GPU) -->\n\n```python\nmodel.cuda()\n```\n\n"
        "```python\nx = 1\n```\n\n<!-- docs-test: skip -->\n```python\ny = 2\n```\n\n"
        "<!-- docs-test: skip (a shell block) -->\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    blocks, errors = parse_blocks(page)
    assert [(b.language, b.skip_reason) for b in blocks] == [
        ("python", "needs a GPU"),
        ("python", None),
        ("python", None),
        ("bash", "a shell block"),
    ]
    assert len(errors) == 2
    assert "a skip without a reason" in errors[0] and "only python blocks run" in errors[1]
