"""The one atomic writer: a file appears whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupattn._atomic import atomic_open, write_atomic


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_atomic(target, "first")
    write_atomic(target, b"second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "figure.png"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_open(target, "w") as fh:
        fh.write("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.png"]
