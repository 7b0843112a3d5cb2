"""The documentation builds in strict mode, works offline and documents every public symbol.

The site is built once per test session (``mkdocs build --strict`` into a temporary
folder); the code blocks of the pages are run by ``tests/test_docs_code.py``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import groupattn

ROOT = Path(__file__).resolve().parents[1]
#: Public modules that are not packages but have their own ``__all__`` and reference entry.
EXTRA_MODULES = ["groupattn.testing.strategies"]
#: A Sphinx cross-reference role; mkdocstrings renders it as raw text. Write
#: ``[`CyclicGroup`][groupattn.groups.CyclicGroup]`` (an autorefs link) instead.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|doc|term):`")


def _public_modules() -> list[str]:
    names = [
        f"groupattn.{info.name}"
        for info in pkgutil.iter_modules(groupattn.__path__)
        if info.ispkg and not info.name.startswith("_")
    ]
    return ["groupattn", *sorted(names), *EXTRA_MODULES]


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
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if "WARNING" in line]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        warnings or [result.stderr[-3000:]]
    )
    return site


def _anchors(site: Path) -> set[str]:
    anchors: set[str] = set()
    for page in (site / "api").rglob("*.html"):
        anchors.update(
            re.findall(r'id="(groupattn\.[A-Za-z0-9_.]+)"', page.read_text(encoding="utf-8"))
        )
    return anchors


def test_mkdocs_build_strict_succeeds(built_site: Path) -> None:
    assert (built_site / "index.html").is_file()
    assert (built_site / "concepts" / "groups.html").is_file()
    assert (built_site / "concepts" / "architecture.html").is_file()
    assert (built_site / "api" / "interop.html").is_file()


def test_every_public_symbol_is_in_the_api_reference(built_site: Path) -> None:
    anchors = _anchors(built_site)
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if f"{module_name}.{name}" not in anchors:
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        "not in the API reference (add a docs/api page and nav entry): " + ", ".join(missing)
    )


def test_public_packages_are_listed() -> None:
    # the check above is only as good as this list: the foundation packages must be in it
    modules = _public_modules()
    for name in [
        "groupattn",
        "groupattn.groups",
        "groupattn.actions",
        "groupattn.contracts",
        "groupattn.testing",
        "groupattn.data",
        "groupattn.interop",
    ]:
        assert name in modules


# ----------------------------------------------------------------------------- docstrings
#
# The rule. Every class and function in the ``__all__`` of a public module has its own
# docstring (data — constants, type aliases — keep theirs as attribute docstrings, which
# Python drops at run time: the reference test above finds them, since the reference
# lists only documented members). Every public method and property (name without a
# leading ``_``) that a public class has and that is defined in groupattn has a
# docstring: its own, or that of the method it overrides (as ``help()`` shows it). So an
# override of a documented method of a groupattn base class (``GridField.act`` of
# ``FieldType.act``, ``CyclicGroup.key`` of ``Group.key``) is documented by the base,
# and ``forward`` / ``extra_repr`` overriding ``torch.nn.Module`` are documented at class
# level (the class docstring gives the inputs and outputs). Class attributes, dataclass
# fields and enum members are data, documented in the class's Attributes section.
# A method with its own docstring is in the reference under the public class that
# defines it — or, when a private base class defines it, under each public subclass
# (``inherited_members`` in docs/api/*.md).


def _public_classes() -> dict[type, str]:
    classes: dict[type, str] = {}
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                classes.setdefault(obj, f"{module_name}.{name}")
    return classes


def _own_doc(raw: object) -> str:
    function = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
    return (getattr(function, "__doc__", None) or "").strip()


def _public_methods() -> Iterator[tuple[str, str, type, object]]:
    """``(class path, name, defining class, attribute)`` for every public method and property."""
    for cls, path in _public_classes().items():
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is None or not owner.__module__.startswith("groupattn"):
                continue
            raw = vars(owner)[name]
            if isinstance(
                raw, staticmethod | classmethod | property | functools.cached_property
            ) or inspect.isfunction(raw):
                yield path, name, owner, raw


def test_every_public_class_and_function_has_a_docstring() -> None:
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not (
                obj.__doc__ or ""
            ).strip():
                missing.append(f"{module_name}.{name}")
    assert not missing, "without a docstring: " + ", ".join(missing)


def test_every_public_method_has_a_docstring() -> None:
    missing = set()
    for path, name, owner, raw in _public_methods():
        if _own_doc(raw):
            continue
        if any(name in vars(base) and _own_doc(vars(base)[name]) for base in owner.__mro__[1:]):
            continue  # an override: documented by the method it overrides
        missing.add(f"{path}.{name} (defined in {owner.__module__}.{owner.__qualname__})")
    assert not missing, "public methods without a docstring:\n" + "\n".join(sorted(missing))


def test_every_documented_public_method_is_in_the_api_reference(built_site: Path) -> None:
    anchors = _anchors(built_site)
    classes = _public_classes()
    missing = set()
    for path, name, owner, raw in _public_methods():
        if not _own_doc(raw):
            continue
        where = f"{classes[owner]}.{name}" if owner in classes else f"{path}.{name}"
        if where not in anchors:
            missing.add(
                where
                + (
                    ""
                    if owner in classes
                    else f" (inherited from the private {owner.__qualname__})"
                )
            )
    assert not missing, "documented but not in the reference:\n" + "\n".join(sorted(missing))


# ------------------------------------------------------------------- cross-references


def test_no_sphinx_roles_remain() -> None:
    files = [
        *(ROOT / "groupattn").rglob("*.py"),
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
    ]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SPHINX_ROLE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, (
        "Sphinx roles render as raw text with mkdocstrings; write [`Name`][groupattn.package.Name] "
        "(or ``name`` for a private name):\n" + "\n".join(found)
    )


def test_cross_references_render_as_links(built_site: Path) -> None:
    # strict mode refuses unresolved autorefs; this guards the syntax itself
    for page in built_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "][groupattn." not in text, (
            f"{page.relative_to(built_site)}: an unrendered cross-reference"
        )
    groups = (built_site / "api" / "groups.html").read_text(encoding="utf-8")
    assert 'href="#groupattn.groups.FiniteGroup.word"' in groups


# ------------------------------------------------------------------------ offline site


class _Links(HTMLParser):
    """Every URL a page loads (scripts, styles, images, frames) and every link it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")
        elif tag == "link" and values.get("href"):
            self.loads.append(values["href"] or "")
        elif tag in {"script", "img", "iframe", "source", "embed", "audio", "video"} and values.get(
            "src"
        ):
            self.loads.append(values["src"] or "")


def _is_remote(url: str) -> bool:
    return url.startswith("//") or urlsplit(url).scheme in {"http", "https"}


def test_site_loads_nothing_from_the_network(built_site: Path) -> None:
    remote = []
    for page in built_site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        remote += [
            f"{page.relative_to(built_site)}: {url}" for url in parser.loads if _is_remote(url)
        ]
    for sheet in built_site.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", sheet.read_text(encoding="utf-8")):
            if not url.startswith("data:") and _is_remote(url):
                remote.append(f"{sheet.relative_to(built_site)}: {url}")
        for url in re.findall(r"@import\s+['\"]([^'\"]+)", sheet.read_text(encoding="utf-8")):
            if _is_remote(url):
                remote.append(f"{sheet.relative_to(built_site)}: @import {url}")
    assert not remote, "the site loads from the network:\n" + "\n".join(sorted(set(remote)))


def test_internal_links_work_from_disk(built_site: Path) -> None:
    # opened as file://…/site/index.html there is no server to map "page/" to "page/index.html"
    broken = []
    for page in built_site.rglob("*.html"):
        if page.name == "404.html":
            continue  # served by a web server for a missing page, with links from the site root
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for url in parser.links + parser.loads:
            parts = urlsplit(url)
            if parts.scheme or url.startswith(("//", "#")) or not parts.path:
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if parts.path.endswith("/") or not target.is_file():
                broken.append(f"{page.relative_to(built_site)}: {url}")
            elif target.suffix not in {
                ".html",
                ".css",
                ".js",
                ".png",
                ".svg",
                ".json",
                ".txt",
                ".ico",
                ".xml",
                ".gz",
            }:
                broken.append(f"{page.relative_to(built_site)}: {url} (unexpected file type)")
    assert not broken, "links that do not open from disk:\n" + "\n".join(sorted(set(broken)))
    index = (built_site / "index.html").read_text(encoding="utf-8")
    assert 'href="concepts/groups.html"' in index
