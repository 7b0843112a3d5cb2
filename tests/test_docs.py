"""The documentation builds in strict mode and its API reference lists every public symbol."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import groupattn

ROOT = Path(__file__).resolve().parents[1]
#: Public modules that are not packages but have their own ``__all__`` and reference entry.
EXTRA_MODULES = ["groupattn.testing.strategies"]


def _public_modules() -> list[str]:
    names = [
        f"groupattn.{info.name}"
        for info in pkgutil.iter_modules(groupattn.__path__)
        if info.ispkg and not info.name.startswith("_")
    ]
    return sorted(names) + EXTRA_MODULES


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if "WARNING" in line]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings or [result.stderr[-3000:]])
    return site


def test_mkdocs_build_strict_succeeds(built_site: Path) -> None:
    assert (built_site / "index.html").is_file()
    assert (built_site / "concepts" / "groups" / "index.html").is_file()
    assert (built_site / "api" / "interop" / "index.html").is_file()


def test_every_public_symbol_is_in_the_api_reference(built_site: Path) -> None:
    anchors: set[str] = set()
    for page in (built_site / "api").rglob("*.html"):
        anchors.update(re.findall(r'id="(groupattn\.[A-Za-z0-9_.]+)"', page.read_text(encoding="utf-8")))
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if f"{module_name}.{name}" not in anchors:
                missing.append(f"{module_name}.{name}")
    assert not missing, "not in the API reference (add a docs/api page and nav entry): " + ", ".join(missing)


def test_public_packages_are_listed() -> None:
    # the check above is only as good as this list: the foundation packages must be in it
    modules = _public_modules()
    for name in ["groupattn.groups", "groupattn.actions", "groupattn.contracts", "groupattn.testing",
                 "groupattn.data", "groupattn.interop"]:
        assert name in modules


def test_concept_page_code_runs() -> None:
    source = (ROOT / "docs" / "concepts" / "groups.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", source, re.S)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/concepts/groups.md", "exec"), namespace)
    assert namespace["gset"].num_orbitals() == 4  # type: ignore[attr-defined]
