"""The ``groupattn groups [--check]`` command."""

from __future__ import annotations

import pytest

from groupattn.cli import main
from groupattn.groups import builtin_groups


def _rows(out: str) -> dict[str, list[str]]:
    lines = out.strip().splitlines()
    return {
        line.split()[0]: line.split() for line in lines[1:] if line.split()[0] in builtin_groups()
    }


def test_groups_lists_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["key", "name", "order", "generators"]
    rows = _rows(out)
    groups = builtin_groups()
    assert set(rows) == set(groups)
    for key, group in groups.items():
        assert rows[key][1] == group.name.split()[0]
        order = group.order()
        assert ("infinite" if order is None else str(order)) in rows[key]
    assert "axioms" not in out


def test_groups_check_verifies_axioms_and_action_laws(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[-4:] == ["axioms", "and", "action", "laws"]
    assert out.strip().splitlines()[-1] == "all group axioms and action laws hold"
    rows = _rows(out)
    assert set(rows) == set(builtin_groups())
    for key, row in rows.items():
        text = " ".join(row)
        assert "ok (action on" in text and "FAILED" not in text, key
    assert "ok (action on points)" in " ".join(rows["petersen"])
    assert "ok (action on images)" in " ".join(rows["p4m"])
    assert "ok (action on coordinates)" in " ".join(rows["c8"])


def test_groups_check_reports_failures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import groupattn.groups as groups_module
    from groupattn.groups import AxiomReport

    def failing(group, *args, **kwargs):
        return AxiomReport(group, 0, ["associativity fails for x, y, z"], "points")

    monkeypatch.setattr(groups_module, "check_group_axioms", failing)
    assert main(["groups", "--check"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: associativity fails for x, y, z" in out
    assert out.strip().splitlines()[-1] == "some checks FAILED"


def test_unknown_subcommand_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
