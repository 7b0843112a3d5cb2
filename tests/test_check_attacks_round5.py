"""Fifth attack round on the checker (a helper with the public docs only): every false
certificate it found, as a regression test.

1. a user's channel representation that is not a homomorphism (wrong on one element of
   a group of order 40: ``verify`` samples missed it) — now checked on every element;
2. a library layer checked by its contract, with a child swapped after construction —
   now trusted only while its structure is the one it was built with (``groupattn._sealed``);
3. a complex parameter (random weight draws skipped it) and 7. a complex model / example —
   the numerical checks run on real float64 copies: now unverified;
4. call counters hidden in ``itertools.count``, a ``deque``, a list behind a bound method,
   an ``lru_cache`` — now part of the state compared around two calls;
5. a model that cannot be copied (a lock, a generator) skipped every numerical check —
   now unverified;
6. a 0-dim output skipped every numerical check — now unverified;
8. a branch on ``requires_grad`` / the grad mode — now compared with the output with
   gradients.
Plus: ``sys.exit`` in a model factory is a documented runtime error on the command line.
Each test also builds the honest twin that must still be certified (no false refusal).
"""

from __future__ import annotations

import functools
import itertools
import subprocess
import sys
import textwrap
import threading
from collections import deque
from pathlib import Path

import pytest
import torch
from torch import nn

from groupattn.actions import GridField, GSet, GSetField, MatrixRepresentation
from groupattn.attention import GroupSelfAttention
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, PermutationGroup, p4

# ---------------------------------------------------------------- 1. representations


def _cyclic_permutation_group(n: int) -> PermutationGroup:
    return PermutationGroup([[(i + 1) % n for i in range(n)]], name=f"C{n}shift")


class _AddConstant(nn.Module):
    """``x + c`` with ``c`` alternating (1, 0), (0, 1): equivariant only under the true swap rep."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("c", torch.tensor([[1.0, 0.0], [0.0, 1.0]] * (n // 2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c


@pytest.mark.parametrize("wrong", [True, False])
def test_a_channel_representation_wrong_on_one_element_is_refused(wrong: bool) -> None:
    n = 40
    group = _cyclic_permutation_group(n)
    gset = GSet.natural(group)
    s = group.generators()[0]
    s3 = s * s * s
    swap = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)

    def matrix_fn(g: object) -> torch.Tensor:
        if wrong and g == s3:
            return torch.eye(2, dtype=torch.float64)
        return swap if int(gset.permutation(g)[0]) % 2 else torch.eye(2, dtype=torch.float64)

    field = GSetField(gset, channels=MatrixRepresentation(group, 2, matrix_fn, name="rep"))
    x = torch.randn(2, n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cert = certify(_AddConstant(n).double(), x, group, input_type=field, verify=True)
    if wrong:
        assert cert.verdict == Status.UNVERIFIED
        assert "not a homomorphism" in (cert.reason or "")
    else:
        assert cert.certified, cert.reason


def test_a_representation_whose_identity_is_not_the_identity_is_refused() -> None:
    rep = MatrixRepresentation(CyclicGroup(4), 1, lambda g: [[0.0]], name="zero")
    cert = certify(
        nn.Conv2d(1, 1, 1), torch.randn(2, 1, 6, 6), "c4", input_type=GridField(channels=rep)
    )
    assert cert.verdict == Status.UNVERIFIED
    assert "identity element's matrix is not the identity" in (cert.reason or "")


# ---------------------------------------------------------------- 2. sealed library layers


class _ProjectionWithTable(nn.Module):
    def __init__(self, proj: nn.Linear) -> None:
        super().__init__()
        self.proj = proj
        self.table = nn.Parameter(torch.zeros(36, proj.out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.proj(x)
        return (
            out
            + self.table.reshape(*([1] * (out.dim() - 2)), *self.table.shape)[
                ..., : out.shape[-2], :
            ]
        )


def test_a_library_layer_with_a_swapped_child_is_checked_by_its_body() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, 4, 6, 6)
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6)
    assert certify(layer, x, p4(6)).certified  # as built
    from groupattn._sealed import changed_structure

    assert changed_structure(layer) is None
    layer.proj = nn.Linear(4, 4)  # a projection of the same class: any weights keep the contract
    assert changed_structure(layer) is None
    layer.proj = nn.Sequential(nn.Linear(4, 4))
    assert changed_structure(layer) == "a child module was added, removed or replaced"
    torch.manual_seed(0)
    broken = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6)
    broken.proj = _ProjectionWithTable(broken.proj)
    cert = certify(broken, x, p4(6))
    assert not cert.certified


def test_changed_settings_and_index_tables_are_seen() -> None:
    from groupattn._sealed import changed_structure

    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6)
    layer.encoding.pair_index = torch.zeros_like(layer.encoding.pair_index)
    assert "pair_index" in (changed_structure(layer) or "")
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6)
    layer.neighbourhood = 3
    assert "neighbourhood" in (changed_structure(layer) or "")
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6)
    layer.proj.register_forward_hook(lambda m, i, o: o)
    assert "hook" in (changed_structure(layer) or "")
    # dtype moves, copies and new parameter values keep the structure
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=6).double()
    with torch.no_grad():
        layer.proj.weight.normal_()
    import copy

    assert changed_structure(layer) is None and changed_structure(copy.deepcopy(layer)) is None


# ---------------------------------------------------------------- 3./7. complex tensors


class _AddRealPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(6, 6, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos.real


def test_complex_parameters_and_examples_are_unverified() -> None:
    x = torch.randn(2, 1, 6, 6)
    cert = certify(_AddRealPart(), x, "c4")
    assert cert.verdict == Status.UNVERIFIED and "complex parameter" in (cert.reason or "")
    conv = nn.Conv2d(1, 1, 1).to(torch.complex64)
    cert = certify(conv, torch.randn(2, 1, 6, 6, dtype=torch.complex64), "c4")
    assert not cert.certified


# ---------------------------------------------------------------- 4. hidden counters


class _Counted(nn.Module):
    """Adds 1 after 200 calls; the count is kept in ``kind``."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.conv = nn.Conv2d(1, 1, 1)
        if kind == "itertools.count":
            self.counter = itertools.count()
        elif kind == "deque":
            self.calls = deque([0], maxlen=1)
        elif kind == "bound method":
            self._calls: list[int] = []
            self.push = self._calls.append
            self.size = self._calls.__len__
        else:
            self.seen = functools.lru_cache(maxsize=None)(lambda n: n)

    def _count(self) -> int:
        if self.kind == "itertools.count":
            return next(self.counter)
        if self.kind == "deque":
            self.calls.append(self.calls[0] + 1)
            return self.calls[0]
        if self.kind == "bound method":
            self.push(1)
            return self.size()
        self.seen(object())  # a new key per call: the cache grows
        return int(self.seen.cache_info().currsize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._count() > 200:  # a path the trace (an early call) never takes
            return self.conv(x) + x.flip(-1)
        return self.conv(x)


@pytest.mark.parametrize("kind", ["itertools.count", "deque", "bound method", "lru_cache"])
def test_hidden_call_counters_are_seen(kind: str) -> None:
    cert = certify(_Counted(kind), torch.randn(2, 1, 6, 6), "c4")
    assert cert.verdict == Status.UNVERIFIED
    assert "changes Python state" in (cert.reason or ""), cert.reason


def test_a_model_with_a_constant_iterator_attribute_is_still_certified() -> None:
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 1)
            self.stages = deque([1, 2, 3])  # read, never changed
            self.fn = functools.lru_cache(maxsize=None)(lambda n: n * 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) * self.fn(len(self.stages))

    assert certify(Plain(), torch.randn(2, 1, 6, 6), "c4").certified


# ---------------------------------------------------------------- 5. models that cannot be copied


class _Uncopyable(nn.Module):
    def __init__(self, mixes: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)
        self.lock = threading.Lock()
        self.mixes = mixes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return out + out.mean(0, keepdim=True) if self.mixes else out


@pytest.mark.parametrize("mixes", [True, False])
def test_a_model_that_cannot_be_copied_is_unverified(mixes: bool) -> None:
    cert = certify(_Uncopyable(mixes), torch.randn(2, 1, 6, 6), "c4")
    assert cert.verdict == Status.UNVERIFIED and "cannot be copied" in (cert.reason or "")


# ---------------------------------------------------------------- 6. outputs without a batch axis


class _Energy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x.roll(1, 0)).sum()


class _EnergyPerSample(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(dim=(1, 2, 3))


def test_a_0_dim_output_is_unverified_and_one_value_per_sample_is_certified() -> None:
    x = torch.randn(2, 1, 6, 6)
    cert = certify(_Energy(), x, "c4")
    assert cert.verdict == Status.UNVERIFIED and "0-dim" in (cert.reason or "")
    assert certify(_EnergyPerSample(), x, "c4").verdict == Status.INVARIANT


# ---------------------------------------------------------------- 8. gradients


class _GradBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return out + x.flip(-1) if x.requires_grad else out


def test_a_branch_on_requires_grad_is_unverified() -> None:
    cert = certify(_GradBranch(), torch.randn(2, 1, 6, 6), "c4")
    assert cert.verdict == Status.UNVERIFIED and "requires_grad" in (cert.reason or "")
    assert certify(nn.Conv2d(1, 1, 1), torch.randn(2, 1, 6, 6), "c4").certified


# ---------------------------------------------------------------- the command line


def test_sys_exit_in_a_factory_is_a_documented_runtime_error(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text(
        textwrap.dedent(
            """
            def model():
                raise SystemExit(7)
            """
        )
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "groupattn",
            "check",
            "--model",
            "exits:model",
            "--input-shape",
            "2,1,8,8",
            "--group",
            "c4",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
    )
    assert run.returncode == 1, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sys.exit(7)" in lines[0] and "Traceback" not in run.stderr
