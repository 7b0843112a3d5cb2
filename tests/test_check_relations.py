"""Orbits of tensors: networks whose intermediates the group permutes among themselves.

``Σ_k rot⁻ᵏ f(rotᵏ x)`` with a plain convolution ``f`` is C4-equivariant although no
term is; the checker certifies it from *relations* between the terms
(:mod:`groupattn.check._relations`). These tests check both directions against a float64
oracle over every element of the group: the genuine orbits certify, and every near miss
(a missing term, another weight, a scaled term, a position table, one slot picked out of
the stack, the wrong inverse) is refused — and the oracle confirms that it is broken.
A hypothesis test draws such networks and requires: certified ⇒ equivariant.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from checker_zoo import ZooCase, oracle_error
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from groupattn.check import certify

T8 = (2, 3, 8, 8)


class Orbit(nn.Module):
    """``combine_k rot^{±k} f_k(rot^k x)`` with the variations the tests draw.

    Parameters
    ----------
    turns
        The ``k`` of the terms.
    inverse
        Undo the turn after ``f`` (``rot^{-k}``); otherwise turn again (``rot^{k}``).
    shared
        One convolution for every term; otherwise one per term.
    combine
        ``"add"`` (a Python sum), ``"stack-mean"``, ``"stack-amax"``, ``"cat-sum"``
        (concatenate along channels, then sum the pieces), ``"stack-first"`` (the first
        slot only: not an orbit).
    circular
        Circular padding in ``f`` (translation-equivariant terms).
    extra
        ``"none"``, ``"scale"`` (twice the second term), ``"table"`` (plus a position
        table), ``"padding"`` (the last term's convolution pads circularly).
    """

    def __init__(
        self,
        turns: tuple[int, ...] = (0, 1, 2, 3),
        inverse: bool = True,
        shared: bool = True,
        combine: str = "add",
        circular: bool = False,
        extra: str = "none",
    ) -> None:
        super().__init__()
        mode = "circular" if circular else "zeros"
        self.f = nn.Conv2d(3, 3, 3, padding=1, padding_mode=mode)
        self.others = nn.ModuleList(nn.Conv2d(3, 3, 3, padding=1, padding_mode=mode) for _ in turns)
        self.turns, self.inverse, self.shared, self.combine, self.extra = (
            turns,
            inverse,
            shared,
            combine,
            extra,
        )
        self.table = nn.Parameter(torch.randn(8, 8))

    def conv(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if self.extra == "padding" and i == len(self.turns) - 1:
            return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), self.f.weight, self.f.bias)
        return self.f(x) if self.shared else self.others[i](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        terms = []
        for i, k in enumerate(self.turns):
            y = self.conv(i, torch.rot90(x, k, (2, 3)))
            terms.append(torch.rot90(y, -k if self.inverse else k, (2, 3)))
        if self.extra == "scale":
            terms[1] = 2 * terms[1]
        if self.combine == "add":
            out = sum(terms)
        elif self.combine == "stack-mean":
            out = torch.stack(terms).mean(0)
        elif self.combine == "stack-amax":
            out = torch.stack(terms, 1).amax(1)
        elif self.combine == "cat-sum":
            out = torch.cat(terms, 1).unflatten(1, (len(terms), 3)).sum(1)
        elif self.combine in ("halves-same", "halves-mixed"):
            # even-indexed terms by one operator, odd-indexed by the same or another one
            evens, odds = terms[0::2], terms[1::2] or terms[:1]
            first = evens[0]
            for t in evens[1:]:
                first = torch.maximum(first, t)
            second = odds[0]
            for t in odds[1:]:
                second = (
                    torch.maximum(second, t)
                    if self.combine == "halves-same"
                    else torch.minimum(second, t)
                )
            out = first + second
        else:
            out = torch.stack(terms)[0]
        if self.extra == "table":
            out = out + self.table
        return out  # type: ignore[return-value]


def paired_softmax_one_sided(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1) + x.transpose(-1, -2).softmax(-1)  # the second term is not turned back


def paired_softmax_stack(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x.softmax(-1), x.mT.softmax(-1).mT], 0).amax(0)


class Wrap(nn.Module):
    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def case(name: str, build, group: str, expected: str) -> ZooCase:  # type: ignore[no-untyped-def]
    return ZooCase(name, "orbit", build, T8, group, expected)


GENUINE = [
    case("orbit-add-c4", lambda: Orbit(), "c4", "certified"),
    case("orbit-stack-mean-c4", lambda: Orbit(combine="stack-mean"), "c4", "certified"),
    case("orbit-stack-amax-c4", lambda: Orbit(combine="stack-amax"), "c4", "certified"),
    case("orbit-cat-sum-c4", lambda: Orbit(combine="cat-sum"), "c4", "certified"),
    case("orbit-circular-p4", lambda: Orbit(circular=True), "p4", "certified"),
    case("orbit-reordered-turns-c4", lambda: Orbit(turns=(2, 0, 3, 1)), "c4", "certified"),
    case("paired-softmax-stack-d4", lambda: Wrap(paired_softmax_stack), "d4", "certified"),
]

BROKEN = [
    case("orbit-three-terms-c4", lambda: Orbit(turns=(0, 1, 2)), "c4", "not-certified"),
    case("orbit-no-inverse-c4", lambda: Orbit(inverse=False), "c4", "not-certified"),
    case("orbit-own-weights-c4", lambda: Orbit(shared=False), "c4", "not-certified"),
    case("orbit-scaled-term-c4", lambda: Orbit(extra="scale"), "c4", "not-certified"),
    case("orbit-position-table-c4", lambda: Orbit(extra="table"), "c4", "not-certified"),
    case("orbit-other-padding-c4", lambda: Orbit(extra="padding"), "c4", "not-certified"),
    case("orbit-first-slot-c4", lambda: Orbit(combine="stack-first"), "c4", "not-certified"),
    case("orbit-zero-padding-p4", lambda: Orbit(), "p4", "not-certified"),
    case("orbit-repeated-turn-c4", lambda: Orbit(turns=(0, 1, 1, 3)), "c4", "not-certified"),
    case(
        "paired-softmax-one-sided-c4", lambda: Wrap(paired_softmax_one_sided), "c4", "not-certified"
    ),
]


def _certified(c: ZooCase) -> bool:
    return bool(certify(c.make(), c.example_input(), c.group()).certified)


@pytest.mark.parametrize("c", GENUINE, ids=lambda c: c.name)
def test_genuine_orbit_certifies(c: ZooCase) -> None:
    assert oracle_error(c) <= 1e-9, f"{c.name}: the test network itself is not equivariant"
    assert _certified(c), f"{c.name}: an equivariant orbit is not certified"


@pytest.mark.parametrize("c", BROKEN, ids=lambda c: c.name)
def test_near_miss_is_refused(c: ZooCase) -> None:
    assert oracle_error(c) > 1e-6, f"{c.name}: the near miss is equivariant after all"
    assert not _certified(c), f"FALSE CERTIFICATE: {c.name}"


@settings(max_examples=40)
@given(
    turns=st.lists(st.integers(0, 3), min_size=2, max_size=5).map(tuple),
    inverse=st.booleans(),
    shared=st.booleans(),
    combine=st.sampled_from(
        ["add", "stack-mean", "stack-amax", "cat-sum", "stack-first", "halves-same", "halves-mixed"]
    ),
    circular=st.booleans(),
    extra=st.sampled_from(["none", "scale", "table", "padding"]),
    group=st.sampled_from(["c4", "d4", "p4"]),
)
def test_certified_orbits_are_equivariant(
    turns, inverse, shared, combine, circular, extra, group
) -> None:  # type: ignore[no-untyped-def]
    c = case(
        "drawn", lambda: Orbit(turns, inverse, shared, combine, circular, extra), group, "unknown"
    )
    if _certified(c):
        assert oracle_error(c) <= 1e-9, (
            f"FALSE CERTIFICATE: {turns=} {inverse=} {shared=} {combine=} {circular=} {extra=} {group=}"
        )


# ----------------------------------------------------------------------------- attacks (fresh-context attacker, this release)


def _rot(t: torch.Tensor, k: int = 1) -> torch.Tensor:
    return torch.rot90(t, k, (-2, -1))


class GatedOrbit(nn.Module):
    """A C4 orbit whose per-term kernels differ only when ``p == 0`` — true at the
    current weights, false on random draws of ``p``: broken as the model stands."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.p = nn.Parameter(torch.zeros(()))
        self.register_buffer("direction", torch.randn(4, 3, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = (self.p == 0).to(x.dtype)
        return sum(  # type: ignore[return-value]
            _rot(
                F.conv2d(
                    F.pad(_rot(x, k), (1, 1, 1, 1), mode="circular"),
                    self.weight + gate * k * self.direction,
                ),
                -k,
            )
            for k in range(4)
        )


class GatedTable(nn.Module):
    """A position table switched on exactly at ``p == 0`` (the initial value)."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.zeros(()))
        self.register_buffer("table", torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.p == 0).to(x.dtype) * self.table


class BigOffset(nn.Module):
    """A float64 table ``1e12 + noise``: equal to about 30 bits, not equal."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", 1e12 + torch.randn(8, 8, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double() + self.table - 1e12


class TinyScale(nn.Module):
    """``x · P`` for a generic table ``P``, written so that the table is ``1 + 1e-11 P``."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * (1 + 1e-11 * self.table) - x) * 1e11


def softmax_pair_plus_table(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1) + x.mT.softmax(-1).mT + table


class PairPlusTable(nn.Module):
    def __init__(self, symmetric: bool) -> None:
        super().__init__()
        t = torch.randn(8, 8)
        self.register_buffer("table", torch.ones(8, 8) if symmetric else t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_pair_plus_table(x, self.table)


ATTACKS = [
    case("attack-gated-orbit-c4", GatedOrbit, "c4", "not-certified"),
    case("attack-gated-table-translations", GatedTable, "translations", "not-certified"),
    case("attack-big-offset-c4", BigOffset, "c4", "not-certified"),
    case("attack-tiny-scale-c4", TinyScale, "c4", "not-certified"),
    case("attack-pair-plus-table-c4", lambda: PairPlusTable(False), "c4", "not-certified"),
]


@pytest.mark.parametrize("c", ATTACKS, ids=lambda c: c.name)
def test_attack_is_refused(c: ZooCase) -> None:
    """Each fooled an earlier build (constants equal on two draws but not at the current
    weights; equality to 30 bits amplified back); the oracle confirms they are broken."""
    model = c.make()
    assert not bool(certify(model, c.example_input(), c.group()).certified), (
        f"FALSE CERTIFICATE: {c.name}"
    )
    with torch.no_grad():
        x = c.example_input(torch.float64)
        m = model.double()
        g = _rot if c.group_name == "c4" else (lambda t: torch.roll(t, 1, -1))
        err = (m(g(x)) - g(m(x))).abs().max() / g(m(x)).abs().max()
    assert err > 1e-6, f"{c.name}: the attack network is equivariant after all"


def test_constant_terms_in_an_orbit_sum() -> None:
    """A constant that the group leaves alone may sit among the terms of an orbit sum."""
    c = case("pair-plus-ones-c4", lambda: PairPlusTable(True), "c4", "certified")
    assert oracle_error(c) <= 1e-9
    assert _certified(c)


# ----------------------------------------------------------------------------- chains of copies


class Chain(nn.Module):
    """Several copies in a row whose steps fail one by one (each slices one axis)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.kind == "centre":
            return y[..., 1:-1, :][..., :, 1:-1]
        if self.kind == "corners":
            return y[..., ::7, ::7]
        if self.kind == "transpose-back":
            return y.transpose(-1, -2)[..., 2:-2, :].transpose(-1, -2)[..., 2:-2, :]
        if self.kind == "off-centre":
            return y[..., 1:, :][..., :, 1:]  # a 7×7 corner: not mapped onto itself by a turn
        if self.kind == "one-axis":
            return y[..., 1:-1, :]  # rows only
        raise ValueError(self.kind)


CHAINS_OK = [
    case(f"chain-{k}-c4", (lambda k=k: Chain(k)), "c4", "certified")
    for k in ("centre", "corners", "transpose-back")
]
CHAINS_BROKEN = [
    case(f"chain-{k}-c4", (lambda k=k: Chain(k)), "c4", "not-certified")
    for k in ("off-centre", "one-axis")
]


@pytest.mark.parametrize("c", CHAINS_OK, ids=lambda c: c.name)
def test_chain_of_copies_certifies(c: ZooCase) -> None:
    assert oracle_error(c) <= 1e-9
    assert _certified(c), f"{c.name}: an equivariant chain of copies is not certified"


@pytest.mark.parametrize("c", CHAINS_BROKEN, ids=lambda c: c.name)
def test_broken_chain_is_refused(c: ZooCase) -> None:
    model, x = c.make(), c.example_input(torch.float64)
    with torch.no_grad():
        m = model.double()
        err = (
            (m(_rot(x)) - _rot(m(x))).abs().max()
            if m(x).shape[-1] == m(x).shape[-2]
            else torch.tensor(1.0)
        )
    assert err > 1e-6
    assert not _certified(c), f"FALSE CERTIFICATE: {c.name}"


# ----------------------------------------------------------------------------- symmetric operators only


def _pair_a(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1)


def _pair_b(x: torch.Tensor) -> torch.Tensor:
    return x.mT.softmax(-1).mT


PAIRS = {
    "product": (lambda x: _pair_a(x) * _pair_b(x), True),
    "maximum": (lambda x: torch.maximum(_pair_a(x), _pair_b(x)), True),
    "minimum-of-sums": (lambda x: torch.minimum(_pair_a(x) + 1, _pair_b(x) + 1), True),
    # a quarter turn swaps the operands: a - b becomes b - a (an earlier build related any
    # two-operand node as if it were a sum, and closed it at a later add)
    "difference-then-add": (lambda x: (_pair_a(x) - _pair_b(x)) + 0.0, False),
    "quotient-then-add": (lambda x: (_pair_a(x) / _pair_b(x)) + 1.0, False),
    "power-then-stack": (lambda x: torch.stack([_pair_a(x) ** _pair_b(x)]).mean(0), False),
    "atan2-then-product": (lambda x: torch.atan2(_pair_a(x), _pair_b(x)) * 2.0, False),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_only_symmetric_operators_close_an_orbit(name: str) -> None:
    fn, equivariant = PAIRS[name]
    c = case(
        f"pair-{name}-c4", lambda: Wrap(fn), "c4", "certified" if equivariant else "not-certified"
    )
    err = oracle_error(c)
    assert (err <= 1e-9) == equivariant, f"{name}: the oracle says {err:.2e}"
    assert _certified(c) == equivariant, (
        f"{name}: {'not certified' if equivariant else 'FALSE CERTIFICATE'}"
    )


class MixedOrbit(nn.Module):
    """Half an orbit combined by one operator, the other half by another (second attacker)."""

    def __init__(self, combine: str) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.combine = combine

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = [_rot(F.conv2d(_rot(x, k), self.weight, padding=1), -k) for k in range(4)]
        if self.combine == "max-plus-min":
            return torch.maximum(a[0], a[2]) + torch.minimum(a[1], a[3])
        if self.combine == "sum-plus-product":
            return (a[0] + a[2]) + a[1] * a[3]
        if self.combine == "product-times-sum":
            return (a[0] * a[2]) * (a[1] + a[3])
        if self.combine == "max-of-max-and-min":
            return torch.maximum(torch.maximum(a[0], a[2]), torch.minimum(a[1], a[3]))
        if self.combine == "stack-of-max-and-min":
            return torch.stack([torch.maximum(a[0], a[2]), torch.minimum(a[1], a[3])]).mean(0)
        if self.combine == "exp-of-max-plus-exp-of-min":
            return torch.exp(torch.maximum(a[0], a[2])) + torch.exp(torch.minimum(a[1], a[3]))
        if self.combine == "max-plus-max":  # genuine: the same operator on both halves
            return torch.maximum(a[0], a[2]) + torch.maximum(a[1], a[3])
        raise ValueError(self.combine)


MIXED = [
    "max-plus-min",
    "sum-plus-product",
    "product-times-sum",
    "max-of-max-and-min",
    "stack-of-max-and-min",
    "exp-of-max-plus-exp-of-min",
]


@pytest.mark.parametrize("combine", MIXED)
def test_halves_combined_by_different_operators_are_refused(combine: str) -> None:
    c = case(f"mixed-{combine}-c4", lambda: MixedOrbit(combine), "c4", "not-certified")
    assert oracle_error(c) > 1e-6
    assert not _certified(c), f"FALSE CERTIFICATE: {combine}"


def test_halves_combined_by_the_same_operator_certify() -> None:
    c = case("mixed-max-plus-max-c4", lambda: MixedOrbit("max-plus-max"), "c4", "certified")
    assert oracle_error(c) <= 1e-9
    assert _certified(c)


# ----------------------------------------------------------------------------- injected-bug guards


class GatedIndex(nn.Module):
    """Columns read through an index that scrambles them only at ``p == 0`` (the current
    value): the index is a structural argument equal on both random draws."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.zeros(()))
        self.register_buffer("scramble", torch.tensor([0, 2, 1, 3, 4, 5, 6, 7]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = (self.p == 0).long()
        identity = torch.arange(8, device=x.device)
        return x.index_select(-1, identity + gate * (self.scramble - identity))


def test_structural_arguments_are_read_at_the_current_weights() -> None:
    model = GatedIndex().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        moved = model(torch.roll(x, 1, -1))
        assert not torch.equal(moved, torch.roll(model(x), 1, -1))  # broken as it stands
    assert not bool(certify(model, x, "translations").certified)


def test_a_copy_with_fills_is_no_gather_of_its_source() -> None:
    """Relations treat a value as a gather ``root[P]`` only when every entry is a copy:
    circular padding is one, zero padding is not (its fills are no entry of the input)."""
    import networkx as nx

    from groupattn.check._export import export_for_check
    from groupattn.check._relations import Relations
    from groupattn.check._values import Frame
    from groupattn.groups import group_from_name

    class Pads(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return F.pad(x, (1, 1, 1, 1), mode="circular"), F.pad(x, (1, 1, 1, 1))

    x = torch.randn(1, 1, 4, 4)
    graph = export_for_check(Pads(), x, {}).program.graph_module.graph
    group = group_from_name("c4", tuple(x.shape))
    relations = Relations({}, Frame("", group, list(group.generators())), nx.DiGraph())
    for node in graph.nodes:
        relations.add_node(node)
    relations.family["x"] = ("x", torch.arange(16))
    pads = [n for n in graph.nodes if n.op == "call_function" and "pad" in str(n.target)]
    circular = next(n for n in pads if "circular" in str(n.args))
    zeros = next(n for n in pads if n is not circular)
    gathered = relations._gather_of(circular)
    expected = (
        F.pad(torch.arange(16.0).reshape(1, 1, 4, 4), (1, 1, 1, 1), mode="circular")
        .reshape(-1)
        .long()
    )
    assert gathered is not None and gathered[0] == "x" and torch.equal(gathered[1], expected)
    assert relations._gather_of(zeros) is None
