"""Every rule of the checker's ATen table has a property test that checks its claim numerically.

For each operator name in :data:`groupattn.check._aten.RULES` this file registers a
:class:`Case`: a tiny network that calls the operator through its usual PyTorch
spelling, with its arguments drawn by hypothesis, plus a configuration that MUST be
certified and one that MUST NOT (so that a rule that denies everything, or certifies
everything, fails). The networks of one rule family are bundled into one model with one
output per network, so that a single ``certify`` call (one ``torch.export``) checks a
whole family; every output has its own verdict.

Whenever an output is certified (equivariant or invariant) the claim is checked by an
oracle written here, independently of the library's actions: in float64, with every
trainable parameter redrawn at random (a certificate holds for every parameter value),
``torch.roll`` / ``torch.rot90`` / ``torch.flip`` move the input, over every element of
C4 / D4 and a seeded sample of (roto-)translations, and the output is moved by the
certificate's output type (by the same oracle for grids and tokens), to a relative error
of at most 1e-9.

Operators the checker refuses on purpose (data-dependent, random, uninitialised) are in
:data:`REFUSED` with the reason; ``test_refused_operators`` checks that a network using
them is *unverified*. ``test_every_rule_has_a_property_test`` fails when a key of
``RULES`` has neither.
"""

from __future__ import annotations

import copy
import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils import _pytree as pytree

from groupattn.actions import GridField, InvariantField, TokenField
from groupattn.check import Status, certify, group_from_name
from groupattn.check._aten import RULES, rule_for

A = torch.ops.aten
GROUPS = ("translations", "c4", "d4", "p4", "p4m")
TOL = 1e-9
KINDS = ("grid", "tokens")

# ============================================================================ context and networks


@dataclass(frozen=True)
class Ctx:
    """The input a drawn network is built for: grid ``(B, C, S, S)`` or tokens ``(B, S*S, C)``."""

    group: str = "c4"
    kind: str = "grid"
    C: int = 3
    S: int = 6
    B: int = 2

    @property
    def N(self) -> int:
        return self.S * self.S

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.B, self.C, self.S, self.S) if self.kind == "grid" else (self.B, self.N, self.C)


class Net(nn.Module):
    """``forward(x) = fn(self, x)`` with the given parameters and buffers."""

    def __init__(
        self,
        fn: Callable[..., Any],
        params: dict[str, torch.Tensor] | None = None,
        buffers: dict[str, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self._fn = fn
        for k, v in (params or {}).items():
            self.register_parameter(k, nn.Parameter(v.detach().clone()))
        for k, v in (buffers or {}).items():
            self.register_buffer(k, v.detach().clone())

    def forward(self, x: torch.Tensor) -> Any:
        return self._fn(self, x)


class Bundle(nn.Module):
    """One output per network; every output gets its own verdict."""

    def __init__(self, nets: list[nn.Module]) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nets)

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        # a network marked ``isolate`` gets its own copy of x: an operator that returns its
        # input as is while tracing (native_dropout in evaluation mode) would otherwise make
        # the exporter route every later use of x through it
        return tuple(n(x.clone()) if getattr(n, "isolate", False) else n(x) for n in self.nets)


def fn(f: Callable[[torch.Tensor], Any]) -> Net:
    return Net(lambda m, x: f(x))


@dataclass
class Expect:
    """A configuration that must (or must not) be certified under ``group``."""

    group: str
    cfg: dict[str, Any]
    kind: str = "grid"
    verdict: str | None = None  # the exact verdict required (for refusals: "unverified")
    C: int = 3
    S: int = 6
    known: str | None = None  # a key of KNOWN: expected to fail until that discrepancy is fixed
    alone: bool = False  # certified in a bundle of its own (random numbers or state make the whole model unverified)


@dataclass
class Case:
    key: str
    family: str
    draw: Callable[[Any, Ctx], dict[str, Any]]
    build: Callable[[dict[str, Any], Ctx], nn.Module]
    must: list[Expect] = field(default_factory=list)
    must_not: list[Expect] = field(default_factory=list)
    kinds: tuple[str, ...] = ("grid",)
    #: the ATen operator the usual spelling puts in the exported graph (``None``: the
    #: exporter decomposes it into other operators; see ``NOT_EMITTED``)
    emits: str | None = ""
    #: ``known(cfg, ctx)``: the key of KNOWN a drawn configuration hits, if any
    known: Callable[[dict[str, Any], Ctx], str | None] | None = None
    #: False for networks with in-place operators, batch norm or dropout (bundled apart)
    functional: bool = True

    def __post_init__(self) -> None:
        if self.emits == "":
            self.emits = self.key


#: Discrepancies this file found in the checker. Each has a strict-xfail regression test
#: (``test_known_discrepancy``); expectations and drawn configurations that hit one are
#: marked with its key, so the suite stays green until it is fixed and then asks for the
#: mark to be removed.
KNOWN: dict[str, str] = {
    # false certificates (the oracle refutes a certified claim)
    "msort-dim": "aten::msort sorts along dim 0, but the sort rule reads its (absent) 'dim' argument as -1: sorting along a "
    "moved axis is certified as sorting along an axis the group does not move",
    "topk-unsorted": "aten::topk with sorted=False along an axis the group permutes inside rows is certified, but the order of "
    "the k values it returns depends on where they were",
    "inner-as-matmul": "aten::inner contracts the last axes of both operands; the rule treats it as matmul (last axis with the "
    "second to last), so a position-weighted sum is certified invariant",
    "value-chaining": "constants are compared with a 1e-9 relative tolerance between sorted neighbours, chained: entries far more "
    "than 1e-9 apart count as equal, so a slowly varying position table is certified",
    # refusals of equivariant networks (rule defects, not unsoundness)
    "pool1d-with-indices": "aten::max_pool1d_with_indices is read as a 2-d pool (its name does not end in '1d'): "
    "'only batched inputs are supported'",
    "avg-pool1d-divisor": "the avg_pool rule reads 'divisor_override', which aten::avg_pool1d does not have (KeyError)",
    "native-dropout-p": "aten::native_dropout with train=False: the rule does not read 'p' (its condition short-circuits), so the "
    "call is refused for an unread argument",
    "scalar-contraction": "a contraction to a 0-d tensor (dot, vdot, einsum '...->') gets a map that is not the identity of "
    "a 0-d tensor: never recognised as invariant",
    "type-as-operand": "aten::type_as(self, other) reads only the dtype of 'other', but the cast rule combines it with 'self' as "
    "a pointwise operand: x.type_as(position table) is reported broken",
    "value-bins-scale": "constants are compared in fixed bins of width 1e-9 x the constant's largest magnitude: the entries of a "
    "constant that also holds a large value count as equal when they differ by far more than 1e-9 relative, "
    "so a small position ramp next to a large entry is certified",
}

#: Discrepancies fixed in the checker since they were found: their marks no longer apply,
#: and the configurations that hit them are checked like any other.
FIXED: frozenset[str] = frozenset(
    {
        "msort-dim",
        "topk-unsorted",
        "inner-as-matmul",
        "value-chaining",
        "pool1d-with-indices",
        "avg-pool1d-divisor",
        "native-dropout-p",
        "type-as-operand",
        "uninitialised-constant",
        "value-bins-scale",
    }
)

CASES: dict[str, Case] = {}
_NOT_FUNCTIONAL = {
    "aten::batch_norm",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_native_batch_norm_legit_functional",
    "aten::_native_batch_norm_legit",
    "aten::native_batch_norm",
    "aten::instance_norm",
    "aten::dropout",
    "aten::feature_dropout",
    "aten::alpha_dropout",
    "aten::native_dropout",
    "aten::copy",
    "aten::fill",
    "aten::index_put",
    "aten::masked_fill_",
    "aten::zero",
}
#: keys whose usual spelling is decomposed by ``torch.export`` into other operators
#: (their rule cannot be reached from a model; the spelling is still checked)
NOT_EMITTED: dict[str, str] = {}


def case(
    key: str,
    family: str,
    draw: Callable[..., dict[str, Any]],
    build: Callable[..., nn.Module],
    must: list[Expect] | Expect | None = None,
    must_not: list[Expect] | Expect | None = None,
    kinds: tuple[str, ...] = ("grid",),
    emits: str | None = "",
    note: str | None = None,
    known: Callable[[dict[str, Any], Ctx], str | None] | None = None,
) -> None:
    assert key in RULES, key
    assert key not in CASES, key
    must_l = [must] if isinstance(must, Expect) else list(must or [])
    not_l = [must_not] if isinstance(must_not, Expect) else list(must_not or [])
    CASES[key] = Case(
        key, family, draw, build, must_l, not_l, kinds, emits, known, key not in _NOT_FUNCTIONAL
    )
    if emits is None:
        NOT_EMITTED[key] = note or "decomposed by torch.export"


class Draw:
    """``D(strategy, name)``: a labelled hypothesis draw (or a fixed value for fixed configurations)."""

    def __init__(self, data: Any, prefix: str) -> None:
        self.data, self.prefix = data, prefix

    def __call__(self, strategy: st.SearchStrategy[Any], name: str) -> Any:
        return self.data.draw(strategy, label=f"{self.prefix}.{name}")


def sdim(D: Draw, d: int, rank: int, name: str = "neg") -> int:
    """``d`` in positive or negative form."""
    return d - rank if D(st.booleans(), name) else d


def choice(D: Draw, options: Any, name: str) -> Any:
    return D(st.sampled_from(list(options)), name)


def const(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape) * scale


# ============================================================================ the oracle


def act_grid(group: str, v: Any, t: torch.Tensor) -> torch.Tensor:
    """The group element with value ``v`` on the last two axes (the oracle's own action)."""
    if group == "translations":
        dy, dx = v
        return torch.roll(t, (dy, dx), (-2, -1))
    if group == "c4":
        return torch.rot90(t, int(v) % 4, (-2, -1))
    if group == "d4":
        r, m = int(v) % 4, int(v) // 4
        if m:
            t = torch.flip(t, (-1,))
        return torch.rot90(t, r, (-2, -1))
    (dy, dx), h = v
    t = act_grid("c4" if group == "p4" else "d4", h, t)
    return torch.roll(t, (dy, dx), (-2, -1))


def act_tokens(group: str, v: Any, t: torch.Tensor, side: int) -> torch.Tensor:
    b, n, c = t.shape
    img = t.transpose(1, 2).reshape(b, c, side, side)
    return act_grid(group, v, img).reshape(b, c, n).transpose(1, 2)


def act_input(ctx: Ctx, v: Any, x: torch.Tensor) -> torch.Tensor:
    moved = act_grid(ctx.group, v, x) if ctx.kind == "grid" else act_tokens(ctx.group, v, x, ctx.S)
    return moved.contiguous()


def oracle_elements(group: str, S: int, seed: int = 0) -> list[Any]:
    """Every element of C4 / D4; generators and a seeded sample of 8 otherwise."""
    if group == "c4":
        return [0, 1, 2, 3]
    if group == "d4":
        return list(range(8))
    rng = random.Random(seed)
    if group == "translations":
        return [(1, 0), (0, 1)] + [(rng.randrange(S), rng.randrange(S)) for _ in range(8)]
    n = 4 if group == "p4" else 8
    return [((1, 0), 0), ((0, 1), 0), ((0, 0), 1)] + [
        ((rng.randrange(S), rng.randrange(S)), rng.randrange(n)) for _ in range(8)
    ]


def rel_error(actual: Any, expected: Any) -> float:
    if (
        not isinstance(actual, torch.Tensor)
        or not isinstance(expected, torch.Tensor)
        or actual.shape != expected.shape
    ):
        return math.inf
    a = actual.detach()
    b = expected.detach()
    if not a.is_complex():
        a = a.to(torch.float64)
    if not b.is_complex():
        b = b.to(torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return math.inf
    inf_a, inf_b = torch.isinf(a), torch.isinf(b)
    if not torch.equal(inf_a, inf_b) or not torch.equal(a[inf_a], b[inf_b]):
        return math.inf
    ok = torch.isfinite(a) & torch.isfinite(b)
    diff = float(torch.linalg.vector_norm(a[ok] - b[ok]))
    norm = float(torch.linalg.vector_norm(b[ok]))
    return diff / norm if norm > 0 else diff


def redraw_parameters(model: nn.Module, seed: int) -> None:
    """A certificate holds for every parameter value: the oracle uses a fresh random draw."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))


def expected_output(info: Any, ctx: Ctx, group_obj: Any, v: Any, y: torch.Tensor) -> torch.Tensor:
    if info.verdict == Status.INVARIANT:
        return y
    ft = info.field_type
    if isinstance(ft, InvariantField):
        return y
    if type(ft) is GridField and ft.channels is None and y.dim() == 4:
        return act_grid(ctx.group, v, y)
    if (
        type(ft) is TokenField
        and ft.point_group is None
        and ft.prefix == 0
        and ft.channels is None
        and y.dim() == 3
    ):
        return act_tokens(ctx.group, v, y, ft.grid[0])
    og = info.output_group or group_obj
    return ft.act(og, og.element(v), y)


def output_index(path: str) -> int:
    m = re.match(r"\[(\d+)\]", path)
    assert m, f"unexpected output path {path!r}"
    return int(m.group(1))


def leaves_by_path(y: Any) -> dict[str, Any]:
    return {pytree.keystr(p): v for p, v in pytree.tree_flatten_with_path(y)[0]}


@dataclass
class Outcome:
    cert: Any
    infos: dict[int, list[Any]]  # network index -> its OutputInfos
    refuted: list[str]
    checked: int
    refuted_at: list[int] = field(default_factory=list)  # the network of each refutation
    where: dict[int, tuple[Any, int]] = field(
        default_factory=dict
    )  # network -> (its certificate, its index there)


@dataclass
class WholeModel:
    """The verdict of a model that is unverified as a whole (no per-output verdicts)."""

    reason: str
    path: str = "output"
    verdict: Status = Status.UNVERIFIED
    field_type: Any = None
    output_group: Any = None


def run_bundle(
    nets: list[nn.Module],
    labels: list[str],
    ctx: Ctx,
    seed: int = 0,
    whole_model_may_fail: bool = False,
) -> Outcome:
    """Certify the bundle once; check every certified output against the oracle."""
    model = Bundle(nets)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ctx.shape, generator=gen)
    group_obj = group_from_name(ctx.group, (ctx.S, ctx.S))
    input_type = TokenField((ctx.S, ctx.S)) if ctx.kind == "tokens" else GridField()
    cert = certify(model, x, group_obj, input_type=input_type)
    infos: dict[int, list[Any]] = {}
    if (
        not cert.outputs
    ):  # the whole model is unverified (it cannot be traced, or draws random numbers)
        assert whole_model_may_fail, (
            f"the bundle could not be certified at all under {ctx}: {cert.reason}"
        )
        assert cert.verdict == Status.UNVERIFIED, cert.verdict
        whole = WholeModel(cert.reason or "")
        infos = {i: [whole] for i in range(len(nets))}
        return Outcome(cert, infos, [], 0)
    side = [i for i in cert.outputs if not i.path.startswith("[")]  # state the model changes
    for info in cert.outputs:
        if info.reason == "not a tensor" or not info.path.startswith("["):
            continue
        infos.setdefault(output_index(info.path), []).append(info)
    for lst in infos.values():
        lst.extend(side)
    assert set(infos) == set(range(len(nets))), f"outputs {sorted(infos)} for {len(nets)} networks"
    certified = [i for lst in infos.values() for i in lst if i.verdict.certified]
    refuted: list[str] = []
    refuted_at: list[int] = []
    if certified:
        m64 = copy.deepcopy(model).double().eval()
        redraw_parameters(m64, seed + 1)
        x64 = x.double()
        with torch.no_grad():
            y = leaves_by_path(m64(x64))
            for v in oracle_elements(ctx.group, ctx.S, seed):
                yg = leaves_by_path(m64(act_input(ctx, v, x64)))
                for info in certified:
                    k = output_index(info.path)
                    try:
                        want = expected_output(info, ctx, group_obj, v, y[info.path])
                    except (
                        Exception
                    ) as err:  # an output type the oracle cannot apply is a defect too
                        refuted.append(
                            f"{labels[k]} output {info.path}: certified {info.verdict.value} as {info.field_type!r}, which cannot act on it ({err})"
                        )
                        refuted_at.append(k)
                        continue
                    err = rel_error(yg[info.path], want)
                    if not err <= TOL:
                        refuted.append(
                            f"FALSE CERTIFICATE {labels[k]} output {info.path} under {ctx.group} element {v}: certified "
                            f"{info.verdict.value} ({info.field_type!r}), relative error {err:.3g}"
                        )
                        refuted_at.append(k)
    return Outcome(cert, infos, refuted, len(certified), refuted_at, {i: (cert, i) for i in infos})


def run_networks(
    nets: list[nn.Module],
    labels: list[str],
    functional: list[bool],
    ctx: Ctx,
    seed: int = 0,
    whole_model_may_fail: bool = False,
) -> Outcome:
    """Certify functional networks and the others (in-place operators, batch norm, dropout:
    for them the checker decomposes the whole exported graph, which costs more) in two bundles."""
    merged = Outcome(None, {}, [], 0)
    for want in (True, False):
        part = [i for i, f in enumerate(functional) if f == want]
        if not part:
            continue
        out = run_bundle(
            [nets[i] for i in part], [labels[i] for i in part], ctx, seed, whole_model_may_fail
        )
        merged.cert = merged.cert or out.cert
        merged.refuted += out.refuted
        merged.refuted_at += [part[j] for j in out.refuted_at]
        merged.checked += out.checked
        for j, i in enumerate(part):
            merged.infos[i] = out.infos[j]
            merged.where[i] = (out.cert, j)
    return merged


def base_name(key: str) -> str:
    return key.split(".")[0]


def describe(info_list: list[Any]) -> str:
    return "; ".join(
        f"{i.path}: {i.verdict.value}" + (f" ({i.reason})" if i.reason else "") for i in info_list
    )


# ============================================================================ movement: views, permutations, copies
# A shape-only operator cannot break equivariance by itself; its "must not" configuration
# puts a moving axis where the output's type cannot hold it (a transposed or flattened
# grid), which must not be certified as a grid.

G, T = "grid", "tokens"


def _swap_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"pair": choice(D, ["bc", "hw", "hwhw"], "pair"), "neg": D(st.booleans(), "neg")}


def _swap_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        def once(x: torch.Tensor, p: str) -> torch.Tensor:
            a, b = {"bc": (0, 1), "hw": (2, 3)}[p]
            if cfg["neg"]:
                a, b = a - 4, b - 4
            if spell in ("permute", "permute_copy"):
                perm = [0, 1, 2, 3]
                perm[a], perm[b] = perm[b], perm[a]
                return x.permute(*perm) if spell == "permute" else torch.permute_copy(x, perm)
            return {
                "transpose": lambda: x.transpose(a, b),
                "transpose_copy": lambda: torch.transpose_copy(x, a, b),
                "swapaxes": lambda: x.swapaxes(a, b),
                "swapdims": lambda: torch.swapdims(x, a, b),
                "movedim": lambda: x.movedim(a, b),
                "moveaxis": lambda: torch.moveaxis(x, b, a),
            }[spell]()

        def f(x: torch.Tensor) -> torch.Tensor:
            return once(once(x, "hw"), "hw") if cfg["pair"] == "hwhw" else once(x, cfg["pair"])

        return fn(f)

    return build


for _spell, _emit in [
    ("permute", ""),
    ("permute_copy", ""),
    ("transpose", ""),
    ("transpose_copy", ""),
    ("swapaxes", None),
    ("swapdims", None),
    ("movedim", None),
    ("moveaxis", None),
]:
    case(
        f"aten::{_spell}",
        "movement",
        _swap_draw,
        _swap_build(_spell),
        must=[
            Expect("p4m", {"pair": "bc", "neg": False}),
            Expect("c4", {"pair": "hwhw", "neg": True}),
        ],
        must_not=Expect("c4", {"pair": "hw", "neg": True}),
        emits=_emit,
        note="exported as aten::transpose / aten::permute",
    )


def _t_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["roundtrip", "single"], "variant"),
        "method": D(st.booleans(), "method"),
    }


def _t_build(copy_: bool) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S = ctx.B, ctx.C, ctx.S

        def t(y: torch.Tensor) -> torch.Tensor:
            return torch.t_copy(y) if copy_ else (y.t() if cfg["method"] else torch.t(y))

        if cfg["variant"] == "roundtrip":  # (B*C, S*S) -> (S*S, B*C) -> back to a grid
            return fn(lambda x: t(x.reshape(B * C, S * S)).reshape(S, S, B, C).permute(2, 3, 0, 1))
        return fn(lambda x: t(x[0, 0])[None, None])  # a transposed image

    return build


for _k, _c in [("aten::t", False), ("aten::t_copy", True)]:
    case(
        _k,
        "movement",
        _t_draw,
        _t_build(_c),
        must=Expect("p4m", {"variant": "roundtrip", "method": True}),
        must_not=Expect("c4", {"variant": "single", "method": False}),
    )


def _mt_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["roundtrip", "single"], "variant"),
        "method": D(st.booleans(), "method"),
    }


def _mt_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    def mt(y: torch.Tensor) -> torch.Tensor:
        return y.mT if cfg["method"] else torch.transpose(y, -2, -1).mT.mT

    if cfg["variant"] == "roundtrip":  # transposed twice: the input's own layout
        return fn(lambda x: mt(mt(x).contiguous()))
    return fn(lambda x: mt(x))  # a transposed image: moves by the inverse rotation under c4


case(
    "aten::mT",
    "movement",
    _mt_draw,
    _mt_build,
    must=Expect("p4m", {"variant": "roundtrip", "method": True}),
    must_not=Expect("c4", {"variant": "single", "method": True}),
)


def _view_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["roundtrip", "batch", "tokens", "scramble"], "variant")}


def _view_target(
    variant: str, ctx: Ctx
) -> tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]:
    """The shape to reshape to, and how to restore a known layout afterwards."""
    B, C, S = ctx.B, ctx.C, ctx.S
    if variant == "roundtrip":
        return (B, C, S * S), lambda y: y.view(B, C, S, S)
    if variant == "batch":
        return (B * C, 1, S, S), lambda y: y
    if variant == "tokens":
        return (B, C, S * S), lambda y: y.transpose(1, 2)
    return (B, C, S, 2, S // 2), lambda y: y.transpose(-1, -2).reshape(B, C, S, S)


def _view_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        shape, after = _view_target(cfg["variant"], ctx)
        buffers = {"like": torch.zeros(shape)}

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            y = {
                "view": lambda: x.view(*shape),
                "reshape": lambda: torch.reshape(x, shape),
                "_unsafe_view": lambda: A._unsafe_view(x, list(shape)),
                "view_as": lambda: x.view_as(m.like),
                "reshape_as": lambda: x.reshape_as(m.like),
                "view_copy": lambda: torch.view_copy(x, list(shape)),
            }[spell]()
            return after(y)

        return Net(f, buffers=buffers)

    return build


for _spell, _emit in [
    ("view", ""),
    ("reshape", None),
    ("_unsafe_view", ""),
    ("view_as", None),
    ("reshape_as", None),
    ("view_copy", ""),
]:
    case(
        f"aten::{_spell}",
        "movement",
        _view_draw,
        _view_build(_spell),
        must=[
            Expect("p4m", {"variant": "roundtrip"}),
            Expect("d4", {"variant": "tokens"}),
            Expect("translations", {"variant": "batch"}),
        ],
        must_not=Expect("translations", {"variant": "scramble"}),
        emits=_emit,
        note="exported as aten::view",
    )


def _flatten_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["spatial", "batch_channel", "scramble"], "variant"),
        "neg": D(st.booleans(), "neg"),
    }


def _flatten_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S = ctx.B, ctx.C, ctx.S
        n = -4 if cfg["neg"] else 0

        def f(x: torch.Tensor) -> torch.Tensor:
            if cfg["variant"] == "batch_channel":  # (B*C, S, S) -> unflatten back
                y = x.flatten(0 + n, 1 + n) if spell == "flatten" else x.reshape(B * C, S, S)
                return y.unflatten(0, (B, C)) if spell == "unflatten" else y.reshape(B, C, S, S)
            y = x.flatten(2 + n, 3 + n) if spell == "flatten" else x.reshape(B, C, S * S)
            sizes = (S, S) if cfg["variant"] == "spatial" else (S // 2, 2 * S)
            return y.unflatten(-1, sizes) if spell == "unflatten" else y.reshape(B, C, *sizes)

        return fn(f)

    return build


for _spell in ("flatten", "unflatten"):
    case(
        f"aten::{_spell}",
        "movement",
        _flatten_draw,
        _flatten_build(_spell),
        must=Expect("p4m", {"variant": "spatial", "neg": True}),
        must_not=Expect("c4", {"variant": "scramble", "neg": False}),
        emits=None,
        note="exported as aten::view",
    )


def _squeeze_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["roundtrip", "channel", "bad"], "variant"),
        "d": D(st.integers(0, 4), "d"),
        "neg": D(st.booleans(), "neg"),
    }


def _squeeze_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    copy_ = spell.endswith("_copy")
    squeeze = (lambda y, d: torch.squeeze_copy(y, d)) if copy_ else (lambda y, d: y.squeeze(d))
    unsqueeze = (
        (lambda y, d: torch.unsqueeze_copy(y, d)) if copy_ else (lambda y, d: torch.unsqueeze(y, d))
    )

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = cfg["d"] - 5 if cfg["neg"] else cfg["d"]

        def f(x: torch.Tensor) -> torch.Tensor:
            if cfg["variant"] == "roundtrip":
                return squeeze(unsqueeze(x, d), d)
            if cfg["variant"] == "channel":
                return unsqueeze(squeeze(x[:, :1], -3 if cfg["neg"] else 1), 1)
            return unsqueeze(x.flatten(2), 2)  # (B, C, 1, S*S)

        return fn(f)

    return build


for _spell in ("squeeze", "unsqueeze", "squeeze_copy", "unsqueeze_copy"):
    case(
        f"aten::{_spell}",
        "movement",
        _squeeze_draw,
        _squeeze_build(_spell),
        must=[
            Expect("p4m", {"variant": "roundtrip", "d": 4, "neg": True}),
            Expect("d4", {"variant": "channel", "d": 0, "neg": False}),
        ],
        must_not=Expect("c4", {"variant": "bad", "d": 0, "neg": False}),
    )


def _expand_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "new_axis", "bad"], "variant"),
        "minus_one": D(st.booleans(), "minus_one"),
    }


def _expand_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S = ctx.B, ctx.C, ctx.S
        if cfg["variant"] == "channel":
            src, shape, after = (lambda x: x[:, :1]), (B, C, S, S), (lambda y: y)
            if cfg["minus_one"] and spell in ("expand", "expand_copy"):
                shape = (-1, C, -1, -1)
        elif cfg["variant"] == "new_axis":
            src, shape, after = (
                (lambda x: x.unsqueeze(1)),
                (B, 2, C, S, S),
                (lambda y: y.flatten(1, 2)),
            )
        else:
            src, shape, after = (
                (lambda x: x.unsqueeze(-1)),
                (B, C, S, S, 2),
                (lambda y: y.flatten(-2)),
            )
        like = torch.zeros([s if s > 0 else {0: B, 2: S, 3: S}[i] for i, s in enumerate(shape)])

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            y = src(x)
            y = {
                "expand": lambda: y.expand(*shape),
                "expand_copy": lambda: torch.expand_copy(y, list(shape)),
                "expand_as": lambda: y.expand_as(m.like),
                "broadcast_to": lambda: torch.broadcast_to(y, tuple(m.like.shape)),
            }[spell]()
            return after(y)

        return Net(f, buffers={"like": like})

    return build


for _spell, _emit in [
    ("expand", ""),
    ("expand_copy", ""),
    ("expand_as", None),
    ("broadcast_to", None),
]:
    case(
        f"aten::{_spell}",
        "movement",
        _expand_draw,
        _expand_build(_spell),
        must=[
            Expect("p4m", {"variant": "channel", "minus_one": True}),
            Expect("d4", {"variant": "new_axis", "minus_one": False}),
        ],
        must_not=Expect("translations", {"variant": "bad", "minus_one": False}),
        emits=_emit,
        note="exported as aten::expand",
    )


def _copy_like_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["plain", "bad"], "variant")}


def _copy_like_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = {
        "alias": lambda y: A.alias(y),
        "alias_copy": lambda y: torch.alias_copy(y),
        "detach": lambda y: y.detach(),
        "detach_copy": lambda y: torch.detach_copy(y),
        "clone": lambda y: y.clone(),
        "contiguous": lambda y: (
            y.transpose(2, 3)
            .contiguous()
            .transpose(2, 3)
            .contiguous(memory_format=torch.channels_last)
        ),
        "lift_fresh_copy": lambda y: A.lift_fresh_copy(y),
    }[spell]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        if cfg["variant"] == "plain":
            return fn(op)
        return fn(lambda x: op(x.transpose(2, 3)))

    return build


for _spell, _emit in [
    ("alias", ""),
    ("alias_copy", ""),
    ("detach", ""),
    ("detach_copy", ""),
    ("clone", ""),
    ("contiguous", None),
    ("lift_fresh_copy", None),
]:
    case(
        f"aten::{_spell}",
        "movement",
        _copy_like_draw,
        _copy_like_build(_spell),
        must=Expect("p4m", {"variant": "plain"}),
        must_not=Expect("c4", {"variant": "bad"}),
        emits=_emit,
        note="exported as aten::clone (or nothing)",
    )


def _as_strided_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["identity", "channel", "transpose", "row_broadcast"], "variant")}


def _as_strided_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    B, C, S = ctx.B, ctx.C, ctx.S
    full = (C * S * S, S * S, S, 1)
    size, stride, offset = {
        "identity": ((B, C, S, S), full, 0),
        "channel": ((B, 1, S, S), full, S * S),
        "transpose": ((B, C, S, S), (C * S * S, S * S, 1, S), 0),
        "row_broadcast": ((B, C, S, S), (C * S * S, S * S, 0, 1), 0),
    }[cfg["variant"]]
    return fn(lambda x: torch.as_strided_copy(x.contiguous(), size, stride, offset))


case(
    "aten::as_strided_copy",
    "movement",
    _as_strided_draw,
    _as_strided_build,
    must=[Expect("p4m", {"variant": "identity"}), Expect("d4", {"variant": "channel"})],
    must_not=[
        Expect("c4", {"variant": "transpose"}),
        Expect("translations", {"variant": "row_broadcast"}),
    ],
)


def _shuffle_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["roundtrip", "bad"], "variant"), "r": choice(D, [1, 2], "r")}


def _shuffle_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        r = cfg["r"] if cfg["variant"] == "roundtrip" else 2
        if cfg["variant"] == "roundtrip":
            return fn(lambda x: F.pixel_shuffle(F.pixel_unshuffle(x, r), r))
        if spell == "pixel_shuffle":
            return fn(lambda x: F.pixel_shuffle(x.repeat(1, 4, 1, 1), 2))
        return fn(lambda x: F.pixel_unshuffle(x, 2))

    return build


for _spell in ("pixel_shuffle", "pixel_unshuffle"):
    case(
        f"aten::{_spell}",
        "movement",
        _shuffle_draw,
        _shuffle_build(_spell),
        must=[
            Expect("p4m", {"variant": "roundtrip", "r": 2}),
            Expect("translations", {"variant": "roundtrip", "r": 2}),
        ],
        must_not=Expect("c4", {"variant": "bad", "r": 2}),
    )


def _chshuffle_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channels", "bad"], "variant"),
        "groups": choice(D, [1, 2], "groups"),
    }


def _chshuffle_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        g = cfg["groups"]
        op = (
            (lambda y: F.channel_shuffle(y, g))
            if spell == "channel_shuffle"
            else (lambda y: torch.native_channel_shuffle(y, g))
        )
        if cfg["variant"] == "channels":
            return fn(lambda x: op(x.repeat(1, 2, 1, 1)))
        return fn(
            lambda x: op(x.transpose(1, 3).contiguous()).transpose(1, 3)
        )  # shuffles the W axis

    return build


for _spell in ("channel_shuffle", "native_channel_shuffle"):
    case(
        f"aten::{_spell}",
        "movement",
        _chshuffle_draw,
        _chshuffle_build(_spell),
        must=Expect("p4m", {"variant": "channels", "groups": 2}),
        must_not=Expect("translations", {"variant": "bad", "groups": 2}),
    )


def _upsample_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["x2", "grow2", "roundtrip"], "variant")}


def _upsample_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    mode = "nearest-exact" if "exact" in spell else "nearest"

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S = ctx.B, ctx.C, ctx.S
        v = cfg["variant"]
        if spell == "upsample_nearest1d":  # along W, on (B, C*S, S)
            if v == "roundtrip":
                return fn(
                    lambda x: F.interpolate(x.reshape(B, C * S, S), scale_factor=2, mode=mode)[
                        ..., ::2
                    ].reshape(B, C, S, S)
                )
            size = 2 * S if v == "x2" else S + 2
            return fn(
                lambda x: F.interpolate(x.reshape(B, C * S, S), size=size, mode=mode).reshape(
                    B, C, S, size
                )
            )
        if v == "roundtrip":
            return fn(lambda x: F.interpolate(x, scale_factor=2, mode=mode)[..., ::2, ::2])
        if v == "x2":
            return fn(lambda x: F.interpolate(x, scale_factor=2, mode=mode))
        return fn(lambda x: F.interpolate(x, size=(S + 2, S + 2), mode=mode))

    return build


case(
    "aten::upsample_nearest2d",
    "movement",
    _upsample_draw,
    _upsample_build("upsample_nearest2d"),
    must=[Expect("d4", {"variant": "roundtrip"}), Expect("p4m", {"variant": "roundtrip"})],
    must_not=Expect("c4", {"variant": "grow2"}),
)
# (an upsampled grid, "x2" under D4, is equivariant but not certified: its entries are
# copies, and the checker's maps for copies are not the grid action; see the report)
case(
    "aten::_upsample_nearest_exact2d",
    "movement",
    _upsample_draw,
    _upsample_build("_upsample_nearest_exact2d"),
    must=Expect("d4", {"variant": "roundtrip"}),
    must_not=Expect("translations", {"variant": "x2"}),
)
case(
    "aten::upsample_nearest1d",
    "movement",
    _upsample_draw,
    _upsample_build("upsample_nearest1d"),
    must=Expect("p4m", {"variant": "roundtrip"}),
    must_not=Expect("translations", {"variant": "x2"}),
)


def run_expectations(entries: list[tuple[Case, Expect, bool]], ctx: Ctx) -> list[str]:
    """Certify every fixed configuration of one (group, input) in one bundle."""
    nets = [c.build(e.cfg, ctx) for c, e, _ in entries]
    labels = [f"{c.key} {e.cfg}" for c, e, _ in entries]
    for n, (c, _, _) in zip(nets, entries):
        n.isolate = not c.functional
    out = run_networks(
        nets,
        labels,
        [c.functional for c, _, _ in entries],
        ctx,
        whole_model_may_fail=all(e.alone for _, e, _ in entries),
    )
    problems = list(out.refuted)
    for idx, (c, e, must) in enumerate(entries):
        infos = out.infos[idx]
        certified = all(i.verdict.certified for i in infos)
        if e.known is not None and e.known not in FIXED:
            assert e.known in KNOWN, e.known
            if certified == must:
                problems.append(
                    f"{c.key} {e.cfg} under {e.group}: known discrepancy {e.known!r} no longer reproduces; remove the mark"
                )
            continue
        if must and not certified:
            problems.append(
                f"{c.key} {e.cfg} MUST be certified under {e.group} ({e.kind}): {describe(infos)}"
            )
        if (
            must
            and c.emits
            and not {base_name(n) for n in c.emits.split("|")} & _emitted_by(*out.where[idx])
        ):
            problems.append(
                f"{c.key} {e.cfg}: its spelling did not reach {c.emits} (saw {sorted(_emitted_by(*out.where[idx]))})"
            )
        if not must:
            if certified:
                problems.append(
                    f"{c.key} {e.cfg} MUST NOT be certified under {e.group} ({e.kind}): {describe(infos)}"
                )
            elif e.verdict is not None and not any(i.verdict.value == e.verdict for i in infos):
                problems.append(
                    f"{c.key} {e.cfg} under {e.group}: expected {e.verdict}, got {describe(infos)}"
                )
    return problems


def _selected(c: Case, everything: bool) -> list[tuple[Expect, bool]]:
    """The first configuration that must, and the first that must not, be certified, and the
    ones marked known or certified alone; every one under the ``long`` profile."""
    chosen = [(e, True) for e in c.must[:1]] + [(e, False) for e in c.must_not[:1]]
    rest = [(e, True) for e in c.must[1:]] + [(e, False) for e in c.must_not[1:]]
    return chosen + [(e, m) for e, m in rest if everything or e.known or e.alone]


def expectation_bundles(
    everything: bool = False,
) -> dict[tuple[str, str, int, int, str], list[tuple[Case, Expect, bool]]]:
    bundles: dict[tuple[str, str, int, int, str], list[tuple[Case, Expect, bool]]] = {}
    for c in CASES.values():
        for e, must in _selected(c, everything):
            solo = "alone" if e.alone else ""  # all of them unverified: one model is enough
            bundles.setdefault((e.group, e.kind, e.C, e.S, solo), []).append((c, e, must))
    return bundles


# ============================================================================ movement: slicing, indexing, concatenation, scatter


def _slice_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "axis": choice(D, ["channel", "crop", "rows", "step"], "axis"),
        "a": D(st.integers(0, ctx.C - 1), "a"),
        "p": choice(D, [1, 2], "p"),
        "step": choice(D, [1, 2], "step"),
    }


def _slice_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        C, S = ctx.C, ctx.S
        a, p, step = cfg["a"], cfg["p"], cfg["step"]
        if spell == "narrow":
            step = 1
        # (dim, start, end, step) per slice
        plan = {
            "channel": [(1, a, C, step)],
            "crop": [(2, p, S - p, 1), (3, p, S - p, 1)],
            "rows": [(2, p, S, 1)],
            "step": [(2, 0, S, 2), (3, 0, S, 2)],
        }[cfg["axis"]]

        def f(x: torch.Tensor) -> torch.Tensor:
            for d, s, e, k in plan:
                if spell == "slice":
                    idx = [slice(None)] * 4
                    idx[d] = slice(s, e, k)
                    x = x[tuple(idx)]
                elif spell == "slice_copy":
                    x = torch.slice_copy(x, d, s, e, k)
                else:
                    x = (
                        x.narrow(d, s, e - s)
                        if k == 1
                        else x[(slice(None),) * d + (slice(s, e, k),)]
                    )
            return x

        return fn(f)

    return build


for _spell, _emit in [("slice", ""), ("slice_copy", ""), ("narrow", None)]:
    case(
        f"aten::{_spell}",
        "indexing",
        _slice_draw,
        _slice_build(_spell),
        must=Expect("p4m", {"axis": "channel", "a": 1, "p": 1, "step": 2}),
        must_not=[
            Expect("translations", {"axis": "crop", "a": 0, "p": 1, "step": 1}),
            Expect("c4", {"axis": "rows", "a": 0, "p": 1, "step": 1}),
        ],
        emits=_emit,
        note="exported as aten::slice",
    )


def _select_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "axis": choice(D, ["channel", "row"], "axis"),
        "k": D(st.integers(0, ctx.C - 1), "k"),
        "neg": D(st.booleans(), "neg"),
    }


def _select_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = 1 if cfg["axis"] == "channel" else 2
        size = ctx.C if d == 1 else ctx.S
        k = cfg["k"] - size if cfg["neg"] else cfg["k"]
        if spell == "select":
            return fn(lambda x: x.select(d, k).unsqueeze(d) if d == 2 else x[:, k, None])
        return fn(lambda x: torch.select_copy(x, d, k).unsqueeze(d))

    return build


for _spell in ("select", "select_copy"):
    case(
        f"aten::{_spell}",
        "indexing",
        _select_draw,
        _select_build(_spell),
        must=Expect("p4m", {"axis": "channel", "k": 1, "neg": True}),
        must_not=Expect("translations", {"axis": "row", "k": 1, "neg": False}),
    )


def _flip_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    dims = D(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3, unique=True), "dims")
    return {
        "dims": sorted(dims),
        "neg": D(st.booleans(), "neg"),
        "method": D(st.booleans(), "method"),
    }


def _flip_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    dims = tuple(d - 4 if cfg["neg"] else d for d in cfg["dims"])
    return fn(lambda x: x.flip(dims) if cfg["method"] else torch.flip(x, list(dims)))


case(
    "aten::flip",
    "indexing",
    _flip_draw,
    _flip_build,
    must=[
        Expect("p4m", {"dims": [1], "neg": True, "method": True}),
        Expect("d4", {"dims": [2, 3], "neg": False, "method": False}),
    ],
    must_not=[
        Expect("c4", {"dims": [3], "neg": True, "method": True}),
        Expect("translations", {"dims": [2, 3], "neg": False, "method": True}),
    ],
)


def _lrud_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["ok", "bad"], "variant")}


def _lrud_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = torch.fliplr if spell == "fliplr" else torch.flipud
    perm = (0, 3, 2, 1) if spell == "fliplr" else (3, 1, 2, 0)  # brings W to the flipped axis

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        if cfg["variant"] == "ok":  # flips channels (lr) or the batch (ud)
            return fn(op)
        return fn(lambda x: op(x.permute(*perm)).permute(*perm))

    return build


for _spell in ("fliplr", "flipud"):
    case(
        f"aten::{_spell}",
        "indexing",
        _lrud_draw,
        _lrud_build(_spell),
        must=Expect("p4m", {"variant": "ok"}),
        must_not=Expect("c4", {"variant": "bad"}),
    )


def _roll_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "spatial", "both", "flat_plane", "flat_row"], "variant"),
        "k": D(st.integers(-3, 3), "k"),
        "neg": D(st.booleans(), "neg"),
    }


def _roll_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    k, S = cfg["k"], ctx.S
    n = -4 if cfg["neg"] else 0
    v = cfg["variant"]
    if v == "channel":
        return fn(lambda x: torch.roll(x, k, 1 + n))
    if v == "spatial":
        return fn(lambda x: x.roll(k, 3 + n))
    if v == "both":
        return fn(lambda x: torch.roll(x, (k, 1 - k), (2 + n, 3 + n)))
    shift = k * S * S if v == "flat_plane" else k * S  # a roll of the flattened tensor
    return fn(lambda x: torch.roll(x, shift))


case(
    "aten::roll",
    "indexing",
    _roll_draw,
    _roll_build,
    must=[
        Expect("translations", {"variant": "both", "k": 2, "neg": True}),
        Expect("p4m", {"variant": "channel", "k": 1, "neg": False}),
        Expect("d4", {"variant": "flat_plane", "k": 1, "neg": False}),
    ],
    must_not=[
        Expect("c4", {"variant": "spatial", "k": 1, "neg": False}),
        Expect("translations", {"variant": "flat_row", "k": 1, "neg": False}),
    ],
)


def _rot90_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"k": D(st.integers(-1, 4), "k"), "dims": choice(D, [(2, 3), (3, 2), (-2, -1)], "dims")}


case(
    "aten::rot90",
    "indexing",
    _rot90_draw,
    lambda cfg, ctx: fn(lambda x: torch.rot90(x, cfg["k"], cfg["dims"])),
    must=[Expect("c4", {"k": 1, "dims": (2, 3)}), Expect("d4", {"k": 2, "dims": (3, 2)})],
    must_not=[Expect("d4", {"k": 1, "dims": (2, 3)}), Expect("p4", {"k": 1, "dims": (-2, -1)})],
)


def _repeat_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "tile2", "rows"], "variant"),
        "r": choice(D, [1, 2, 3], "r"),
    }


def _repeat_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        reps = {"channel": (1, cfg["r"], 1, 1), "tile2": (1, 1, 2, 2), "rows": (1, 1, 2, 1)}[
            cfg["variant"]
        ]
        if spell == "repeat":
            return fn(lambda x: x.repeat(*reps))
        short = reps[2:] if cfg["variant"] != "channel" else reps
        return fn(lambda x: torch.tile(x, short))

    return build


for _spell in ("repeat", "tile"):
    case(
        f"aten::{_spell}",
        "indexing",
        _repeat_draw,
        _repeat_build(_spell),
        must=Expect("p4m", {"variant": "channel", "r": 2}),
        must_not=Expect("c4", {"variant": "rows", "r": 1}),
    )


def _repeat_interleave_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "both", "rows"], "variant"),
        "r": choice(D, [1, 2, 3], "r"),
    }


def _repeat_interleave_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    r = cfg["r"]
    if cfg["variant"] == "channel":
        return fn(lambda x: x.repeat_interleave(r, dim=1))
    if cfg["variant"] == "both":  # nearest up-sampling
        return fn(lambda x: x.repeat_interleave(r, dim=-2).repeat_interleave(r, dim=-1))
    return fn(lambda x: x.repeat_interleave(r + 1, dim=-2))  # a non-square image


case(
    "aten::repeat_interleave",
    "indexing",
    _repeat_interleave_draw,
    _repeat_interleave_build,
    must=[Expect("p4m", {"variant": "channel", "r": 2}), Expect("d4", {"variant": "both", "r": 2})],
    must_not=Expect("c4", {"variant": "rows", "r": 1}),
)


def _diag_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["bc", "hw"], "variant"),
        "offset": choice(D, [0, 1, -1], "offset"),
    }


def _diagonal_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    off = cfg["offset"]
    if cfg["variant"] == "bc":
        return fn(lambda x: x.diagonal(off, 0, 1).permute(2, 0, 1).unsqueeze(1))
    return fn(lambda x: torch.diagonal(x, off, 2, 3).unsqueeze(2))


case(
    "aten::diagonal",
    "indexing",
    _diag_draw,
    _diagonal_build,
    must=Expect("p4m", {"variant": "bc", "offset": 0}),
    must_not=Expect("d4", {"variant": "hw", "offset": 0}),
)


def _tri_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = torch.tril if spell == "tril" else torch.triu

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        k = cfg["offset"]
        if cfg["variant"] == "bc":  # over (B, C): the group does not move it
            return fn(lambda x: op(x.permute(2, 3, 0, 1), k).permute(2, 3, 0, 1))
        return fn(lambda x: op(x, k))

    return build


for _spell in ("tril", "triu"):
    case(
        f"aten::{_spell}",
        "indexing",
        _diag_draw,
        _tri_build(_spell),
        must=Expect("p4m", {"variant": "bc", "offset": 1}),
        must_not=[
            Expect("d4", {"variant": "hw", "offset": 0}),
            Expect("translations", {"variant": "hw", "offset": -1}),
        ],
    )


def _diag_embed_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    if cfg["variant"] == "bc1":  # a 1-vector: no off-diagonal fills
        return fn(
            lambda x: (
                torch.diag_embed(x[:, :1].permute(0, 2, 3, 1)).permute(0, 3, 4, 1, 2).flatten(1, 2)
            )
        )
    if cfg["variant"] == "bc":  # channel vectors to diagonal matrices
        return fn(
            lambda x: (
                torch.diag_embed(x.permute(0, 2, 3, 1), cfg["offset"])
                .permute(0, 3, 4, 1, 2)
                .flatten(1, 2)
            )
        )
    return fn(lambda x: torch.diag_embed(x)[..., 0])


# (diagonal matrices of channel vectors, "bc", are equivariant but not certified: the
# off-diagonal zeros are fills that stay in place; see the report)
case(
    "aten::diag_embed",
    "indexing",
    lambda D, ctx: {**_diag_draw(D, ctx), "variant": choice(D, ["bc", "bc1", "hw"], "variant")},
    _diag_embed_build,
    must=Expect("p4m", {"variant": "bc1", "offset": 0}),
    must_not=Expect("translations", {"variant": "hw", "offset": 0}),
)


def _perm_index(kind: str, n: int, k: int) -> list[int]:
    if kind == "flip":
        return list(range(n - 1, -1, -1))
    if kind == "roll":
        return [(i + k) % n for i in range(n)]
    rng = random.Random(k)
    idx = list(range(n))
    rng.shuffle(idx)
    return idx


def _index_select_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "dim": choice(D, [1, 3, -1, -3], "dim"),
        "index": choice(D, ["perm", "flip", "roll"], "index"),
        "k": D(st.integers(1, 5), "k"),
    }


def _index_select_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    d = cfg["dim"] % 4
    idx = _perm_index(cfg["index"], ctx.C if d == 1 else ctx.S, cfg["k"])
    return Net(lambda m, x: x.index_select(cfg["dim"], m.idx), buffers={"idx": torch.tensor(idx)})


case(
    "aten::index_select",
    "indexing",
    _index_select_draw,
    _index_select_build,
    must=[
        Expect("p4m", {"dim": -3, "index": "perm", "k": 2}),
        Expect("translations", {"dim": 3, "index": "roll", "k": 2}),
    ],
    must_not=[
        Expect("c4", {"dim": -1, "index": "roll", "k": 1}),
        Expect("translations", {"dim": 3, "index": "flip", "k": 1}),
    ],
)


def _gather_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["const", "positional", "roll"], "variant"),
        "K": choice(D, [1, 2], "K"),
        "k": D(st.integers(1, 5), "k"),
    }


def _gather_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S, K = ctx.B, ctx.C, ctx.S, cfg["K"]
        ii, jj = torch.meshgrid(torch.arange(S), torch.arange(S), indexing="ij")
        if cfg["variant"] == "const":
            d, idx = (
                1,
                torch.tensor(_perm_index("perm", C, cfg["k"])[:K])
                .view(1, K, 1, 1)
                .expand(B, K, S, S),
            )
        elif cfg["variant"] == "positional":
            d, idx = 1, ((ii + 2 * jj) % C).view(1, 1, S, S).expand(B, K, S, S)
        else:
            d, idx = 3, ((jj + cfg["k"]) % S).view(1, 1, S, S).expand(B, C, S, S)
        op = (
            (lambda x, i: x.gather(d, i))
            if spell == "gather"
            else (lambda x, i: torch.take_along_dim(x, i, d))
        )
        return Net(lambda m, x: op(x, m.idx), buffers={"idx": idx.contiguous()})

    return build


for _spell in ("gather", "take_along_dim"):
    case(
        f"aten::{_spell}",
        "indexing",
        _gather_draw,
        _gather_build(_spell),
        must=[
            Expect("p4m", {"variant": "const", "K": 2, "k": 1}),
            Expect("translations", {"variant": "roll", "K": 1, "k": 2}),
        ],
        must_not=[
            Expect("translations", {"variant": "positional", "K": 1, "k": 1}),
            Expect("c4", {"variant": "roll", "K": 1, "k": 1}),
        ],
    )


def _index_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "w_roll", "w_flip", "rot", "transpose"], "variant"),
        "k": D(st.integers(1, 3), "k"),
    }


def _index_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S, v = ctx.C, ctx.S, cfg["variant"]
    if v == "channel":
        return Net(
            lambda m, x: x[:, m.i], buffers={"i": torch.tensor(_perm_index("perm", C, cfg["k"]))}
        )
    if v in ("w_roll", "w_flip"):
        return Net(
            lambda m, x: x[..., m.i], buffers={"i": torch.tensor(_perm_index(v[2:], S, cfg["k"]))}
        )
    grid = torch.arange(S * S).view(S, S)
    r = torch.rot90(grid, cfg["k"], (0, 1)) if v == "rot" else grid.t()
    return Net(lambda m, x: x[:, :, m.ih, m.iw], buffers={"ih": r // S, "iw": r % S})


case(
    "aten::index",
    "indexing",
    _index_draw,
    _index_build,
    must=[
        Expect("p4m", {"variant": "channel", "k": 1}),
        Expect("translations", {"variant": "w_roll", "k": 2}),
        Expect("c4", {"variant": "rot", "k": 1}),
    ],
    must_not=[
        Expect("d4", {"variant": "rot", "k": 1}),
        Expect("translations", {"variant": "w_flip", "k": 1}),
    ],
)


def _split_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "axis": choice(D, ["channel", "w"], "axis"),
        "a": D(st.integers(1, 3), "a"),
        "neg": D(st.booleans(), "neg"),
    }


def _split_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = 1 if cfg["axis"] == "channel" else 3
        n = ctx.C if d == 1 else ctx.S
        a = min(cfg["a"], n - 1)
        dd = d - 4 if cfg["neg"] else d
        parts: Callable[[torch.Tensor], Any] = {
            "split": lambda x: x.split(a, dd),
            "split_with_sizes": lambda x: x.split([a, n - a], dd),
            "chunk": lambda x: x.chunk(2, dd),
            "tensor_split": lambda x: x.tensor_split([a], dd),
            "unbind": lambda x: x.unbind(dd),
        }[spell]
        if spell == "unbind":
            return fn(lambda x: torch.stack(parts(x)[::-1], dd))
        return fn(lambda x: torch.cat(parts(x)[::-1], dd))

    return build


for _spell, _emit in [
    ("split", ""),
    ("split_with_sizes", ""),
    ("chunk", None),
    ("tensor_split", None),
    ("unbind", ""),
]:
    case(
        f"aten::{_spell}",
        "indexing",
        _split_draw,
        _split_build(_spell),
        must=Expect("p4m", {"axis": "channel", "a": 1, "neg": True}),
        must_not=Expect("c4", {"axis": "w", "a": 2, "neg": False}),
        emits=_emit,
        note="exported as aten::split / aten::slice",
    )


def _cat_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "channel_const", "batch", "pos"], "variant"),
        "neg": D(st.booleans(), "neg"),
    }


def _cat_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = {"cat": torch.cat, "concat": torch.concat, "concatenate": torch.concatenate}[spell]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, S = ctx.B, ctx.S
        params = {"c": const(1, 1, 1, 1), "p": const(1, 1, S, S)}
        d1, d0 = (-3, -4) if cfg["neg"] else (1, 0)
        v = cfg["variant"]
        if v == "batch":
            return Net(lambda m, x: op([x, x.flip(1)], d0), params)
        if v == "channel":
            return Net(lambda m, x: op((x.roll(1, 1), x), d1), params)
        name = "c" if v == "channel_const" else "p"
        return Net(lambda m, x: op([x, getattr(m, name).expand(B, 1, S, S)], dim=d1), params)

    return build


for _spell in ("cat", "concat", "concatenate"):
    case(
        f"aten::{_spell}",
        "indexing",
        _cat_draw,
        _cat_build(_spell),
        must=[
            Expect("p4m", {"variant": "channel", "neg": True}),
            Expect("d4", {"variant": "batch", "neg": False}),
        ],
        must_not=Expect("c4", {"variant": "pos", "neg": False}),
    )


def _stack_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["channel", "batch", "rows"], "variant")}


def _stack_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    v = cfg["variant"]
    if v == "channel":
        return fn(lambda x: torch.stack([x, x.roll(1, 1)], 1).flatten(1, 2))
    if v == "batch":
        return fn(lambda x: torch.stack([x, x.flip(0)]).flatten(0, 1))
    return fn(lambda x: torch.stack([x, x], dim=3).flatten(2, 3))


case(
    "aten::stack",
    "indexing",
    _stack_draw,
    _stack_build,
    must=[Expect("p4m", {"variant": "channel"}), Expect("c4", {"variant": "batch"})],
    must_not=Expect("translations", {"variant": "rows"}),
)


def _hvstack_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = torch.hstack if spell == "hstack" else torch.vstack

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, S = ctx.B, ctx.S
        shape = (B, 1, S, S) if spell == "hstack" else (1, ctx.C, S, S)
        if cfg["variant"] == "ok":
            return fn(lambda x: op([x, x.roll(1, 1)]))
        return Net(lambda m, x: op([x, m.p]), params={"p": const(*shape)})

    return build


for _spell in ("hstack", "vstack"):
    case(
        f"aten::{_spell}",
        "indexing",
        lambda D, ctx: {"variant": choice(D, ["ok", "pos"], "variant")},
        _hvstack_build(_spell),
        must=Expect("p4m", {"variant": "ok"}),
        must_not=Expect("d4", {"variant": "pos"}),
    )


def _scatter_like_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["channel", "spatial"], "variant"), "k": D(st.integers(0, 1), "k")}


def _slice_scatter_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    k = cfg["k"]
    if cfg["variant"] == "channel":
        return fn(lambda x: torch.slice_scatter(x, x[:, 1:2].flip(0), 1, k, k + 1))
    return fn(lambda x: torch.slice_scatter(x, x[..., 1:2], dim=3, start=k, end=k + 1))


def _select_scatter_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    k = cfg["k"]
    if cfg["variant"] == "channel":
        return fn(lambda x: torch.select_scatter(x, x[:, 1] * 2, 1, k))
    return fn(lambda x: torch.select_scatter(x, x[:, :, 1], 2, k))


def _diagonal_scatter_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    if cfg["variant"] == "channel":
        return fn(lambda x: torch.diagonal_scatter(x, x.flip(0).diagonal(0, 0, 1), 0, 0, 1))
    off, S = cfg["k"] - 1, ctx.S
    return fn(lambda x: torch.diagonal_scatter(x, x[..., 0, : S - abs(off)], off, 2, 3))


def _index_put_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["channel", "spatial", "accumulate"], "variant"),
        "k": D(st.integers(0, 1), "k"),
    }


def _index_put_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    k, v = cfg["k"], cfg["variant"]
    bufs = {"i": torch.tensor([k]), "j": torch.tensor([1 - k])}
    if v == "channel":

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y[:, m.i] = x[:, m.j]
            return y
    elif v == "spatial":

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y[..., m.i] = 0.0
            return y
    else:

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            return torch.index_put(x, (m.i,), x[1:2], accumulate=True)

    return Net(f, buffers=bufs)


def _scatter_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["const", "positional", "value", "add"], "variant")}


def _scatter_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    B, C, S, v = ctx.B, ctx.C, ctx.S, cfg["variant"]
    ii, jj = torch.meshgrid(torch.arange(S), torch.arange(S), indexing="ij")
    idx = (
        ((ii + 2 * jj) % C).view(1, 1, S, S).expand(B, 1, S, S).contiguous()
        if v == "positional"
        else torch.zeros(B, 1, S, S, dtype=torch.long)
    )
    if v == "value":
        return Net(lambda m, x: x.scatter(1, m.idx, 0.5), buffers={"idx": idx})
    if v == "add":
        return Net(lambda m, x: x.scatter(1, m.idx, x[:, 1:2], reduce="add"), buffers={"idx": idx})
    return Net(lambda m, x: torch.scatter(x, 1, m.idx, x[:, 1:2]), buffers={"idx": idx})


def _copy_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["full", "broadcast", "view"], "variant")}


def _copy_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    v = cfg["variant"]
    if v == "full":
        return fn(lambda x: torch.zeros_like(x).copy_(x))
    if v == "broadcast":
        return fn(lambda x: torch.zeros_like(x).copy_(x[:, :1]))

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[..., :1].copy_(x[..., 1:2])
        return y

    return fn(f)


def _masked_scatter_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S = ctx.C, ctx.S
    if cfg["variant"] == "channel":
        mask = (torch.arange(C) % 2 == 1).view(1, C, 1, 1)
    else:
        ii, jj = torch.meshgrid(torch.arange(S), torch.arange(S), indexing="ij")
        mask = (ii < jj).view(1, 1, S, S)
    return Net(lambda m, x: x.masked_scatter(m.mask, x.flip(1)), buffers={"mask": mask})


def _fill_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        k, chan = cfg["k"], cfg["variant"] == "channel"

        def f(x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            part = y[:, k] if chan else y[..., k, :]
            if spell == "fill":
                part.fill_(1.5)
            else:
                (y[:, k : k + 1] if chan else y[..., k : k + 1, :]).zero_()
            return y

        return fn(f)

    return build


def _index_fill_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    d = 1 if cfg["variant"] == "channel" else 3
    return Net(lambda m, x: x.index_fill(d, m.i, -0.5), buffers={"i": torch.tensor([cfg["k"]])})


def _masked_fill_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S = ctx.C, ctx.S
    if cfg["variant"] == "channel":
        mask = (torch.arange(C) == cfg["k"]).view(1, C, 1, 1)
    else:
        mask = (torch.arange(S) == cfg["k"]).view(1, 1, S, 1)

    def f(m: Net, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.masked_fill_(m.mask, 2.0)
        return y

    return Net(f, buffers={"mask": mask})


_CH = {"variant": "channel", "k": 1}
_SP = {"variant": "spatial", "k": 0}
for _key, _build in [
    ("aten::slice_scatter", _slice_scatter_build),
    ("aten::select_scatter", _select_scatter_build),
    ("aten::diagonal_scatter", _diagonal_scatter_build),
    ("aten::fill", _fill_build("fill")),
    ("aten::zero", _fill_build("zero")),
    ("aten::index_fill", _index_fill_build),
]:
    case(
        _key,
        "indexing",
        _scatter_like_draw,
        _build,
        must=Expect("p4m", _CH),
        must_not=Expect("translations", _SP),
    )
case(
    "aten::masked_fill_",
    "indexing",
    _scatter_like_draw,
    _masked_fill_build,
    must=Expect("p4m", _CH),
    must_not=Expect("c4", _SP),
    emits=None,
    note="functionalised to aten::masked_fill (a pointwise operator)",
)
case(
    "aten::index_put",
    "indexing",
    _index_put_draw,
    _index_put_build,
    must=Expect("p4m", {"variant": "channel", "k": 0}),
    must_not=Expect("translations", {"variant": "spatial", "k": 0}),
)
case(
    "aten::scatter",
    "indexing",
    _scatter_draw,
    _scatter_build,
    must=[Expect("p4m", {"variant": "const"}), Expect("d4", {"variant": "value"})],
    must_not=[Expect("translations", {"variant": "positional"})],
)
case(
    "aten::copy",
    "indexing",
    _copy_draw,
    _copy_build,
    must=[Expect("p4m", {"variant": "full"}), Expect("c4", {"variant": "broadcast"})],
    must_not=Expect("translations", {"variant": "view"}),
)
case(
    "aten::masked_scatter",
    "indexing",
    lambda D, ctx: {"variant": choice(D, ["channel", "spatial"], "variant")},
    _masked_scatter_build,
    must=Expect("p4m", {"variant": "channel"}),
    must_not=Expect("c4", {"variant": "spatial"}),
)


def _like_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["plain", "alone", "table"], "variant")}


def _like_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = {
        "zeros_like": lambda x: torch.zeros_like(x),
        "ones_like": lambda x: torch.ones_like(x),
        "full_like": lambda x: torch.full_like(x, 2.5),
        "new_zeros": lambda x: x.new_zeros(x.shape),
        "new_ones": lambda x: x.new_ones(x.shape),
        "new_full": lambda x: x.new_full(x.shape, -1.5),
    }[spell]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        v = cfg["variant"]
        if v == "plain":
            return fn(lambda x: x + op(x))
        if v == "alone":
            return fn(op)
        return fn(lambda x: x + op(x).cumsum(-1))  # a constant made into a position table

    return build


for _spell in ("zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full"):
    case(
        f"aten::{_spell}",
        "indexing",
        _like_draw,
        _like_build(_spell),
        must=[Expect("p4m", {"variant": "plain"}), Expect("c4", {"variant": "alone"})],
        must_not=Expect("translations", {"variant": "table"}),
    )


# ============================================================================ movement: padding and unfolding


def _pad_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    sym = D(st.booleans(), "symmetric")
    p = D(st.integers(0, 2), "p")
    pads = [p] * 4 if sym else [D(st.integers(0, 2), f"p{i}") for i in range(4)]
    return {
        "pads": pads,
        "mode": choice(D, ["constant", "reflect", "replicate", "circular"], "mode"),
        "value": choice(D, [0.0, 1.5], "value"),
        "pooled": D(st.booleans(), "pooled"),
    }


def _padded(
    build: Callable[[dict[str, Any], Ctx], nn.Module],
) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    """``pooled``: follow the padding by a stride-1 box filter that brings the grid back to S x S
    (a padded grid alone is not certified: its copies and fills do not move as a grid)."""

    def wrapped(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        inner = build(cfg, ctx)
        if not cfg.get("pooled"):
            return inner
        left, right, top, bottom = cfg["pads"]
        net = Net(lambda m, x: F.avg_pool2d(m.inner(x), (top + bottom + 1, left + right + 1), 1))
        net.inner = inner
        return net

    return wrapped


def _pad_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        pads, mode, value = cfg["pads"], cfg["mode"], cfg["value"]
        if spell == "pad":
            if mode == "constant":
                return fn(lambda x: F.pad(x, pads, value=value))
            return fn(lambda x: F.pad(x, pads, mode=mode))
        if spell == "constant_pad_nd":
            return fn(lambda x: torch.constant_pad_nd(x, pads, value))
        if spell == "_pad_circular":
            return fn(lambda x: A._pad_circular(x, pads))
        if spell == "circular_pad2d":
            return fn(lambda x: F.pad(x, pads, mode="circular"))
        if spell.endswith("2d"):
            op = getattr(A, spell)
            return fn(lambda x: op(x, pads))
        if spell.endswith("3d"):  # pads the channels too
            op = getattr(A, spell)
            return fn(lambda x: op(x.unsqueeze(1), [*pads, 1, 1]).squeeze(1))
        # 1-d: pad W, transpose, pad H, transpose back
        op1 = (
            (lambda y, p: F.pad(y, p, mode="circular"))
            if spell == "circular_pad1d"
            else getattr(A, spell)
        )

        def f(x: torch.Tensor) -> torch.Tensor:
            B, C, H, W = x.shape
            y = op1(x.reshape(B, C * H, W), pads[:2])
            W2 = y.shape[-1]
            y = y.reshape(B, C, H, W2).transpose(2, 3).reshape(B, C * W2, H)
            y = op1(y, pads[2:])
            return y.reshape(B, C, W2, -1).transpose(2, 3)

        return fn(f)

    return build


_SYM = {"pads": [1, 1, 1, 1], "mode": "reflect", "value": 0.0}
_ASYM = {"pads": [1, 0, 2, 1], "mode": "reflect", "value": 0.0}
for _spell, _emit in [
    ("pad", ""),
    ("constant_pad_nd", ""),
    ("reflection_pad1d", ""),
    ("reflection_pad2d", ""),
    ("reflection_pad3d", ""),
    ("replication_pad1d", ""),
    ("replication_pad2d", ""),
    ("replication_pad3d", ""),
    ("_pad_circular", ""),
    ("circular_pad1d", None),
    ("circular_pad2d", None),
]:
    case(
        f"aten::{_spell}",
        "padding",
        lambda D, ctx, s=_spell: {**_pad_draw(D, ctx), "extra3d": s.endswith("3d")},
        _padded(_pad_build(_spell)),
        must=[
            Expect("p4m", {**_SYM, "pads": [0, 0, 0, 0], "extra3d": _spell.endswith("3d")}),
            *(
                [Expect("translations", {**_SYM, "mode": "circular", "pooled": True})]
                if _spell in ("pad", "_pad_circular", "circular_pad2d")
                else []
            ),
        ],
        must_not=[
            Expect("c4", {**_ASYM, "pooled": True, "extra3d": _spell.endswith("3d")}),
            *(
                [
                    Expect(
                        "translations",
                        {
                            **_SYM,
                            "pooled": True,
                            "mode": "constant",
                            "extra3d": _spell.endswith("3d"),
                        },
                    )
                ]
                if "circular" not in _spell
                else []
            ),
        ],
        emits=_emit,
        note="no such ATen operator in this PyTorch: circular padding is exported as aten::pad",
    )


def _im2col_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["box", "circular_box", "raw_circular", "raw"], "variant"),
        "k": choice(D, [1, 2, 3], "k"),
        "d": choice(D, [1, 2], "d"),
        "stride": choice(D, [1, 2], "stride"),
    }


def _im2col_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    B, C = ctx.B, ctx.C
    k, d, s, v = cfg["k"], cfg["d"], cfg["stride"], cfg["variant"]
    q = d * (k - 1) // 2
    circular = v in ("circular_box", "raw_circular")

    def f(x: torch.Tensor) -> torch.Tensor:
        if circular:
            x = F.pad(x, (q, d * (k - 1) - q, q, d * (k - 1) - q), mode="circular")
            cols = F.unfold(x, k, dilation=d, stride=s)
        else:
            cols = F.unfold(x, (k, k), d, q, s)
        side = math.isqrt(cols.shape[-1])
        if v in ("box", "circular_box"):
            return cols.view(B, C, k * k, side, side).sum(2)
        return cols.view(B, C * k * k, side, side)

    return fn(f)


case(
    "aten::im2col",
    "padding",
    _im2col_draw,
    _im2col_build,
    must=[
        Expect("d4", {"variant": "box", "k": 2, "d": 1, "stride": 2}),
        Expect("p4m", {"variant": "raw", "k": 1, "d": 2, "stride": 1}),
    ],
    must_not=[
        Expect("translations", {"variant": "box", "k": 3, "d": 1, "stride": 1}),
        Expect("c4", {"variant": "raw", "k": 3, "d": 1, "stride": 1}),
    ],
)


def _unfold_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["circular", "step", "blocks"], "variant"),
        "size": choice(D, [1, 2, 3], "size"),
        "step": choice(D, [1, 2], "step"),
        "dim": choice(D, [2, 3, -1, -2], "dim"),
    }


def _unfold_build(spell: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        size, step, dim = cfg["size"], cfg["step"], cfg["dim"]
        op = (
            (lambda y: y.unfold(dim, size, st_))
            if spell == "unfold"
            else (lambda y: torch.unfold_copy(y, dim, size, st_))
        )
        st_ = 1 if cfg["variant"] == "circular" else step
        pads = (0, size - 1, 0, 0) if dim % 4 == 3 else (0, 0, 0, size - 1)

        def f(x: torch.Tensor) -> torch.Tensor:
            if cfg["variant"] == "blocks":  # non-overlapping 2x2 blocks: a rotation permutes them
                y = torch.unfold_copy(x, 2, 2, 2) if spell == "unfold_copy" else x.unfold(2, 2, 2)
                return y.unfold(3, 2, 2).sum((-1, -2))
            if cfg["variant"] == "circular":
                x = F.pad(x, pads, mode="circular")
            return op(x).sum(-1)

        return fn(f)

    return build


for _spell in ("unfold", "unfold_copy"):
    case(
        f"aten::{_spell}",
        "padding",
        _unfold_draw,
        _unfold_build(_spell),
        must=[
            Expect("c4", {"variant": "blocks", "size": 2, "step": 2, "dim": 2}),
            Expect("p4m", {"variant": "step", "size": 1, "step": 1, "dim": 2}),
        ],
        must_not=[
            Expect("c4", {"variant": "circular", "size": 2, "step": 1, "dim": 3}),
            Expect("translations", {"variant": "step", "size": 2, "step": 2, "dim": 3}),
        ],
    )


# ============================================================================ reductions
# dims: "channel" (never moved), "space" (every moved axis: invariant), "all", "row" (one
# spatial axis: rows move, entries move inside rows under translations; a rotation mixes
# rows), "tokens" (the token axis of a token input).


def _red_dims(D: Draw, ctx: Ctx, allow_none: bool = True, single: bool = False) -> dict[str, Any]:
    options = ["channel", "space", "row"] + (["all"] if allow_none else [])
    if single:
        options = ["channel", "row"]
    return {
        "dims": choice(D, options, "dims"),
        "keepdim": D(st.booleans(), "keepdim"),
        "neg": D(st.booleans(), "neg"),
        "form": choice(D, ["positional", "keyword"], "form"),
    }


def _dims_of(cfg: dict[str, Any], ctx: Ctx, single: bool = False) -> Any:
    """The dim argument, and a function restoring a known layout of the reduced output."""
    rank = 4 if ctx.kind == "grid" else 3
    n = -rank if cfg["neg"] else 0
    which = cfg["dims"]
    if ctx.kind == "grid":
        d = {"channel": (1,), "space": (2, 3), "row": (3,), "all": None}[which]
    else:
        d = {"channel": (2,), "space": (1,), "row": (1,), "all": None}[which]
    if d is not None:
        d = tuple(i + n for i in d)
        if single or len(d) == 1:
            d = d[0] if (single or cfg.get("int_form", True)) else d
    return d


def _restore(cfg: dict[str, Any], ctx: Ctx, y: torch.Tensor) -> torch.Tensor:
    """Bring a reduced output back to a layout a certificate can name."""
    which, keep = cfg["dims"], cfg["keepdim"]
    if ctx.kind == "grid":
        if which == "channel" and not keep:
            return y.unsqueeze(1)
        if which == "row":  # then average the other spatial axis: invariant under translations
            y = y if y.is_floating_point() else y.to(torch.float32)
            return (y if keep else y.unsqueeze(3)).mean(2, keepdim=True)
        return y
    if which == "channel" and not keep:
        return y.unsqueeze(-1)
    return y


def _call(
    spell: Callable[..., Any], x: torch.Tensor, d: Any, cfg: dict[str, Any], **kw: Any
) -> Any:
    if d is None:
        return spell(x, **kw)
    if cfg["form"] == "keyword":
        return spell(x, dim=d, keepdim=cfg["keepdim"], **kw)
    return spell(x, d, cfg["keepdim"], **kw)


_SUM_LIKE: dict[str, Callable[..., Any]] = {
    "sum": torch.sum,
    "mean": torch.mean,
    "amax": torch.amax,
    "amin": torch.amin,
    "logsumexp": torch.logsumexp,
    "nansum": torch.nansum,
    "nanmean": torch.nanmean,
}


def _sum_like_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx)
        if name in ("all", "any"):
            op = torch.all if name == "all" else torch.any
            return fn(
                lambda x: (
                    _restore(cfg, ctx, _call(op, x > 0, d, cfg)) if d is not None else op(x > 0)
                )
            )
        if name == "count_nonzero":  # no keepdim
            return fn(
                lambda x: (
                    _restore({**cfg, "keepdim": False}, ctx, torch.count_nonzero(x > 0, d))
                    if d is not None
                    else torch.count_nonzero(x > 0)
                )
            )
        if name == "prod":  # one dim only

            def f(x: torch.Tensor) -> torch.Tensor:
                if d is None:
                    return torch.prod(x)
                if isinstance(d, tuple):  # several dims: flatten them first
                    y = _call(torch.prod, x.flatten(d[0], d[-1]), d[0] if d[0] >= 0 else -1, cfg)
                    return y.unsqueeze(-1) if cfg["keepdim"] else y
                return _restore(cfg, ctx, _call(torch.prod, x, d, cfg))

            return fn(f)
        op = _SUM_LIKE[name]
        if name == "logsumexp" and d is None:
            return fn(
                lambda x: torch.logsumexp(x, (0, 1, 2, 3) if ctx.kind == "grid" else (0, 1, 2))
            )
        return fn(lambda x: _restore(cfg, ctx, _call(op, x, d, cfg)) if d is not None else op(x))

    return build


def _reduction_expect(allow_all: bool = True) -> tuple[list[Expect], list[Expect]]:
    base = {"keepdim": False, "neg": True, "form": "keyword"}
    must = [
        Expect("c4", {**base, "dims": "channel"}),
        Expect("p4m", {**base, "dims": "space", "keepdim": True, "form": "positional"}),
        Expect("translations", {**base, "dims": "row"}),
        Expect("p4m", {**base, "dims": "channel"}, kind=T),
    ]
    must_not = [Expect("c4", {**base, "dims": "row"})]
    return must, must_not


for _name in (
    "sum",
    "mean",
    "amax",
    "amin",
    "prod",
    "logsumexp",
    "nansum",
    "nanmean",
    "all",
    "any",
    "count_nonzero",
):
    _m, _n = _reduction_expect()
    case(
        f"aten::{_name}",
        "reductions",
        lambda D, ctx: _red_dims(D, ctx),
        _sum_like_build(_name),
        must=_m,
        must_not=_n,
        kinds=(G, T),
    )


def _var_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        **_red_dims(D, ctx),
        "correction": choice(D, [0, 1], "correction"),
        "spelling": choice(D, ["correction", "unbiased"], "spelling"),
    }


def _var_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    both = name.endswith("_mean")
    op = {
        "var": torch.var,
        "std": torch.std,
        "var_mean": torch.var_mean,
        "std_mean": torch.std_mean,
    }[name]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx)
        kw = (
            {"correction": cfg["correction"]}
            if cfg["spelling"] == "correction"
            else {"unbiased": bool(cfg["correction"])}
        )

        def f(x: torch.Tensor) -> Any:
            if d is None:
                y = op(x, **kw)
            else:
                y = op(x, dim=d, keepdim=cfg["keepdim"], **kw)
            if d is None:
                return y
            return tuple(_restore(cfg, ctx, t) for t in y) if both else _restore(cfg, ctx, y)

        return fn(f)

    return build


for _name in ("var", "std", "var_mean", "std_mean"):
    _m, _n = _reduction_expect()
    case(
        f"aten::{_name}",
        "reductions",
        _var_draw,
        _var_build(_name),
        must=[
            Expect(e.group, {**e.cfg, "correction": 1, "spelling": "unbiased"}, e.kind) for e in _m
        ],
        must_not=[
            Expect(e.group, {**e.cfg, "correction": 0, "spelling": "correction"}, e.kind)
            for e in _n
        ],
        kinds=(G, T),
    )


def _norm_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {**_red_dims(D, ctx), "ord": choice(D, [1, 2, 3, math.inf], "ord")}


def _norm_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx)
        dl = None if d is None else ([d] if isinstance(d, int) else list(d))
        p = cfg["ord"]

        def f(x: torch.Tensor) -> torch.Tensor:
            if name == "linalg_vector_norm":
                y = torch.linalg.vector_norm(x, p, dl, cfg["keepdim"])
            else:
                y = A.norm.ScalarOpt_dim(
                    x, p, dl if dl is not None else list(range(x.dim())), cfg["keepdim"]
                )
            return _restore(cfg, ctx, y) if d is not None else y

        return fn(f)

    return build


for _name in ("linalg_vector_norm", "norm"):
    _m, _n = _reduction_expect()
    case(
        f"aten::{_name}",
        "reductions",
        _norm_draw,
        _norm_build(_name),
        must=[Expect(e.group, {**e.cfg, "ord": 2}, e.kind) for e in _m],
        must_not=[Expect(e.group, {**e.cfg, "ord": 1}, e.kind) for e in _n],
        kinds=(G, T),
    )


def _frob_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    """The Frobenius norm over two dims: (H, W) is invariant; (C, W) keeps rows."""
    pair = (
        {"space": [2, 3], "channel": [0, 1], "row": [1, 3], "all": [2, 3]}[cfg["dims"]]
        if ctx.kind == "grid"
        else {"space": [1, 2], "channel": [0, 2], "row": [1, 2], "all": [1, 2]}[cfg["dims"]]
    )
    if cfg["neg"]:
        pair = [p - (4 if ctx.kind == "grid" else 3) for p in pair]

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.frobenius_norm(x, pair, cfg["keepdim"])
        if ctx.kind == "grid" and cfg["dims"] == "channel":
            return y if cfg["keepdim"] else y[None, None]
        if ctx.kind == "grid" and cfg["dims"] == "row":  # (B, H): average the rows
            return y.mean(-2 if cfg["keepdim"] else -1)
        return y

    return fn(f)


case(
    "aten::frobenius_norm",
    "reductions",
    _norm_draw,
    _frob_build,
    must=[
        Expect(
            "p4m", {"dims": "space", "keepdim": False, "neg": True, "form": "keyword", "ord": 2}
        ),
        Expect(
            "p4m", {"dims": "channel", "keepdim": True, "neg": False, "form": "keyword", "ord": 2}
        ),
        Expect(
            "translations",
            {"dims": "row", "keepdim": False, "neg": False, "form": "keyword", "ord": 2},
        ),
    ],
    must_not=Expect(
        "c4", {"dims": "row", "keepdim": True, "neg": False, "form": "keyword", "ord": 2}
    ),
    kinds=(G, T),
)


def _maxmin_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {**_red_dims(D, ctx, single=True), "with_dim": D(st.booleans(), "with_dim")}


def _maxmin_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = {
        "max": torch.max,
        "min": torch.min,
        "median": torch.median,
        "nanmedian": torch.nanmedian,
        "mode": torch.mode,
    }[name]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx, single=True)
        if not cfg["with_dim"] and name != "mode":
            return fn(lambda x: op(x))

        def f(x: torch.Tensor) -> Any:
            if name == "mode":
                x = (x * 2).round()  # repeated values
            y = (
                op(x, d, keepdim=cfg["keepdim"])
                if cfg["form"] == "keyword"
                else op(x, d, cfg["keepdim"])
            )
            values = _restore(cfg, ctx, y.values)
            if cfg["dims"] == "channel":  # positions along an axis the group does not move
                return values, _restore(cfg, ctx, y.indices)
            return values

        return fn(f)

    return build


for _name in ("max", "min", "median", "nanmedian", "mode"):
    _base = {"keepdim": True, "neg": False, "form": "keyword", "with_dim": True}
    case(
        f"aten::{_name}",
        "reductions",
        _maxmin_draw,
        _maxmin_build(_name),
        must=[
            Expect("p4m", {**_base, "dims": "channel"}),
            Expect("translations", {**_base, "dims": "row", "keepdim": False}),
            Expect("d4", {**_base, "dims": "channel", "with_dim": False}),
        ],
        must_not=Expect("c4", {**_base, "dims": "row"}),
        kinds=(G, T),
    )


def _argmax_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    op = torch.argmax if name == "argmax" else torch.argmin

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx, single=True)
        if not cfg["with_dim"]:
            return fn(lambda x: op(x))
        return fn(
            lambda x: _restore(
                cfg,
                ctx,
                op(x, d, cfg["keepdim"])
                if cfg["form"] == "positional"
                else op(x, dim=d, keepdim=cfg["keepdim"]),
            )
        )

    return build


for _name in ("argmax", "argmin"):
    case(
        f"aten::{_name}",
        "reductions",
        _maxmin_draw,
        _argmax_build(_name),
        must=Expect(
            "p4m",
            {"dims": "channel", "keepdim": False, "neg": True, "form": "keyword", "with_dim": True},
        ),
        must_not=[
            Expect(
                "translations",
                {"dims": "row", "keepdim": True, "neg": False, "form": "keyword", "with_dim": True},
                verdict="unverified",
            ),
            Expect(
                "translations",
                {
                    "dims": "row",
                    "keepdim": True,
                    "neg": False,
                    "form": "keyword",
                    "with_dim": False,
                },
                verdict="unverified",
            ),
        ],
        kinds=(G, T),
    )


def _sort_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        **_red_dims(D, ctx, single=True),
        "descending": D(st.booleans(), "descending"),
        "k": D(st.integers(1, 2), "k"),
        "sorted": D(st.booleans(), "sorted"),
    }


def _sort_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _dims_of(cfg, ctx, single=True)
        k = cfg["k"]
        row = cfg["dims"] == "row"

        def f(x: torch.Tensor) -> torch.Tensor:
            if name == "sort":
                y = torch.sort(x, dim=d, descending=cfg["descending"], stable=cfg["keepdim"]).values
            elif name == "topk":
                y = x.topk(k, d, largest=cfg["descending"], sorted=cfg.get("sorted", True)).values
            elif name == "kthvalue":
                y = torch.kthvalue(x, k, d, keepdim=True).values
            else:  # msort sorts the first (batch) axis; "row" moves W there first
                y = torch.msort(x.transpose(0, -1)).transpose(0, -1) if row else torch.msort(x)
            if (
                ctx.kind == "grid" and row
            ):  # average the other spatial axis: invariant under translations
                return y.mean(2, keepdim=True)
            if ctx.kind == "tokens" and row:
                return y.mean(1, keepdim=True)
            return y

        return fn(f)

    return build


_SORT_KNOWN: dict[str, Callable[[dict[str, Any], Ctx], str | None]] = {
    "topk": lambda cfg, ctx: (
        "topk-unsorted" if not cfg["sorted"] and cfg["dims"] == "row" else None
    ),
    "msort": lambda cfg, ctx: "msort-dim",
}
for _name in ("sort", "topk", "kthvalue", "msort"):
    _base = {
        "keepdim": True,
        "neg": True,
        "form": "keyword",
        "descending": True,
        "k": 2,
        "sorted": True,
    }
    _known = "msort-dim" if _name == "msort" else None
    _must = [
        Expect("p4m", {**_base, "dims": "channel"}, known=_known),
        Expect("d4", {**_base, "dims": "row"}, kind=T),
    ]
    if _name != "msort":
        _must.append(Expect("translations", {**_base, "dims": "row"}))
    case(
        f"aten::{_name}",
        "reductions",
        _sort_draw,
        _sort_build(_name),
        must=_must,
        must_not=Expect("c4", {**_base, "dims": "row"}),
        kinds=(G, T),
        known=_SORT_KNOWN.get(_name),
    )


# ============================================================================ normalisations along dims


def _softmax_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "dims": choice(D, ["channel", "row", "h", "tokens"], "dims"),
        "neg": D(st.booleans(), "neg"),
        "dtype": D(st.booleans(), "dtype"),
        "spelling": choice(D, ["function", "method", "module"], "spelling"),
    }


def _softmax_dim(cfg: dict[str, Any], ctx: Ctx) -> int:
    rank = 4 if ctx.kind == "grid" else 3
    d = (
        {"channel": 1, "row": 3, "h": 2, "tokens": 2}
        if ctx.kind == "grid"
        else {"channel": 2, "row": 1, "h": 1, "tokens": 1}
    )[cfg["dims"]]
    return d - rank if cfg["neg"] else d


def _softmax_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _softmax_dim(cfg, ctx)
        dtype = torch.float64 if cfg["dtype"] else None
        log = "log" in name
        if name in ("_softmax", "_log_softmax"):
            op = A._log_softmax if log else A._softmax
            return fn(lambda x: op(x, d, False))
        if name == "special_softmax":
            return fn(lambda x: torch.special.softmax(x, d, dtype=dtype))
        if cfg["spelling"] == "module":
            mod = nn.LogSoftmax(d) if log else nn.Softmax(d)
            return _module_net(mod)
        if cfg["spelling"] == "method":
            return fn(lambda x: x.log_softmax(d, dtype=dtype) if log else x.softmax(d, dtype=dtype))
        return fn(lambda x: (F.log_softmax if log else F.softmax)(x, dim=d, dtype=dtype))

    return build


def _module_net(mod: nn.Module) -> nn.Module:
    net = Net(lambda m, x: m.mod(x))
    net.mod = mod
    return net


for _name in ("softmax", "_softmax", "log_softmax", "_log_softmax", "special_softmax"):
    _base = {"neg": True, "dtype": False, "spelling": "function"}
    case(
        f"aten::{_name}",
        "normalisations",
        _softmax_draw,
        _softmax_build(_name),
        must=[
            Expect("p4m", {**_base, "dims": "channel"}),
            Expect("translations", {**_base, "dims": "row"}),
            Expect("p4m", {**_base, "dims": "tokens"}, kind=T),
            Expect("d4", {**_base, "dims": "channel"}, kind=T),
        ],
        must_not=Expect("c4", {**_base, "dims": "row"}),
        kinds=(G, T),
    )


def _cumulative_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        d = _softmax_dim(cfg, ctx)
        op = {
            "cumsum": torch.cumsum,
            "cumprod": torch.cumprod,
            "logcumsumexp": torch.logcumsumexp,
        }.get(name)
        if op is not None:
            return fn(lambda x: op(x, d))
        opm = torch.cummax if name == "cummax" else torch.cummin
        return fn(lambda x: opm(x, d).values)  # its positions are never tracked

    return build


for _name in ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"):
    _base = {"neg": False, "dtype": False, "spelling": "function"}
    case(
        f"aten::{_name}",
        "normalisations",
        _softmax_draw,
        _cumulative_build(_name),
        must=[
            Expect("p4m", {**_base, "dims": "channel"}),
            Expect("d4", {**_base, "dims": "channel"}, kind=T),
        ],
        must_not=[
            Expect("translations", {**_base, "dims": "row"}, verdict="unverified"),
            Expect("c4", {**_base, "dims": "tokens"}, kind=T, verdict="unverified"),
        ],
        kinds=(G, T),
    )


def _ln_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "shape": choice(D, ["W", "HW", "CHW"] if ctx.kind == "grid" else ["C", "NC"], "shape"),
        "affine": D(st.booleans(), "affine"),
        "bias": D(st.booleans(), "bias"),
        "eps": choice(D, [1e-5, 0.1], "eps"),
        "module": D(st.booleans(), "module"),
    }


def _ln_shape(cfg: dict[str, Any], ctx: Ctx) -> tuple[int, ...]:
    C, S, N = ctx.C, ctx.S, ctx.N
    return {"W": (S,), "HW": (S, S), "CHW": (C, S, S), "C": (C,), "NC": (N, C)}[cfg["shape"]]


def _ln_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        shape = _ln_shape(cfg, ctx)
        eps = cfg["eps"]
        params = {}
        if cfg["affine"]:
            params["weight"] = const(*shape)
            if cfg["bias"] and name != "rms_norm":
                params["bias"] = const(*shape)
        w = lambda m: getattr(m, "weight", None)  # noqa: E731
        b = lambda m: getattr(m, "bias", None)  # noqa: E731
        if name == "layer_norm":
            if cfg["module"]:
                return _module_net(
                    nn.LayerNorm(shape, eps, elementwise_affine=cfg["affine"], bias=cfg["bias"])
                )
            return Net(lambda m, x: F.layer_norm(x, shape, w(m), b(m), eps), params)
        if name == "native_layer_norm":  # output, mean and reciprocal std
            return Net(
                lambda m, x: torch.native_layer_norm(x, list(shape), w(m), b(m), eps), params
            )
        if cfg["module"]:
            return _module_net(nn.RMSNorm(shape, eps, elementwise_affine=cfg["affine"]))
        return Net(lambda m, x: F.rms_norm(x, shape, w(m), eps), params)

    return build


for _name in ("layer_norm", "native_layer_norm", "rms_norm"):
    _base = {"bias": True, "eps": 1e-5, "module": False}
    case(
        f"aten::{_name}",
        "normalisations",
        _ln_draw,
        _ln_build(_name),
        must=[
            Expect("p4m", {**_base, "shape": "HW", "affine": False}),
            Expect("p4m", {**_base, "shape": "C", "affine": True}, kind=T),
            Expect("translations", {**_base, "shape": "W", "affine": False}),
        ],
        must_not=[
            Expect("c4", {**_base, "shape": "HW", "affine": True}),
            Expect("translations", {**_base, "shape": "NC", "affine": True}, kind=T),
            Expect("c4", {**_base, "shape": "W", "affine": False}),
        ],
        kinds=(G, T),
    )


def _gn_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "groups": choice(D, [1, ctx.C], "groups"),
        "affine": D(st.booleans(), "affine"),
        "variant": choice(D, ["plain", "module", "transposed"], "variant"),
    }


def _gn_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S, g = ctx.C, ctx.S, cfg["groups"]
    if cfg["variant"] == "module":
        return _module_net(nn.GroupNorm(g, C, affine=cfg["affine"]))
    if cfg["variant"] == "transposed":  # the W axis as channels: per-column groups
        params = {"weight": const(S), "bias": const(S)} if cfg["affine"] else {}
        return Net(
            lambda m, x: F.group_norm(
                x.transpose(1, 3), S // 2, getattr(m, "weight", None), getattr(m, "bias", None)
            ).transpose(1, 3),
            params,
        )
    params = {"weight": const(C), "bias": const(C)} if cfg["affine"] else {}
    return Net(
        lambda m, x: F.group_norm(x, g, getattr(m, "weight", None), getattr(m, "bias", None), 1e-3),
        params,
    )


case(
    "aten::group_norm",
    "normalisations",
    _gn_draw,
    _gn_build,
    must=[
        Expect("p4m", {"groups": 3, "affine": True, "variant": "plain"}),
        Expect("d4", {"groups": 1, "affine": False, "variant": "module"}),
    ],
    must_not=Expect("translations", {"groups": 1, "affine": False, "variant": "transposed"}),
)


def _bn_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "affine": D(st.booleans(), "affine"),
        "transposed": D(st.booleans(), "transposed"),
        "eps": choice(D, [1e-5, 0.5], "eps"),
    }


def _bn_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        n = ctx.S if cfg["transposed"] else ctx.C  # "transposed": statistics per W column
        params = {"weight": const(n), "bias": const(n)} if cfg["affine"] else {}
        buffers = {"rm": const(n), "rv": torch.rand(n) + 0.5}
        eps = cfg["eps"]
        w = lambda m: getattr(m, "weight", None)  # noqa: E731
        b = lambda m: getattr(m, "bias", None)  # noqa: E731
        ops: dict[str, Callable[[Net, torch.Tensor], Any]] = {
            "batch_norm": lambda m, x: torch.batch_norm(
                x, w(m), b(m), m.rm, m.rv, False, 0.1, eps, False
            ),
            "_native_batch_norm_legit_no_training": lambda m, x: F.batch_norm(
                x, m.rm, m.rv, w(m), b(m), False, 0.1, eps
            ),
            # training statistics; fresh running statistics (not buffers): nothing is kept between calls
            "_native_batch_norm_legit_functional": lambda m, x: F.batch_norm(
                x, x.new_zeros(x.shape[1]), x.new_ones(x.shape[1]), w(m), b(m), True, 0.1, eps
            ),
            "_native_batch_norm_legit": lambda m, x: F.batch_norm(
                x, None, None, w(m), b(m), True, 0.1, eps
            ),
            "native_batch_norm": lambda m, x: torch.native_batch_norm(
                x, w(m), b(m), None, None, True, 0.1, eps
            )[0],
            "instance_norm": lambda m, x: F.instance_norm(x, weight=w(m), bias=b(m), eps=eps),
        }
        op = ops[name]
        if cfg["transposed"]:
            return Net(lambda m, x: op(m, x.transpose(1, 3)).transpose(1, 3), params, buffers)
        return Net(op, params, buffers)

    return build


for _name, _emit in [
    ("batch_norm", None),
    ("_native_batch_norm_legit_no_training", ""),
    ("_native_batch_norm_legit_functional", ""),
    ("_native_batch_norm_legit", ""),
    ("native_batch_norm", None),
    ("instance_norm", ""),
]:
    _moving = _name not in (
        "batch_norm",
        "_native_batch_norm_legit_no_training",
    )  # statistics of the input
    case(
        f"aten::{_name}",
        "normalisations",
        _bn_draw,
        _bn_build(_name),
        must=[
            Expect("p4m", {"affine": True, "transposed": False, "eps": 1e-5}),
            Expect("translations", {"affine": False, "transposed": True, "eps": 0.5}),
        ]
        if _moving
        else Expect("p4m", {"affine": True, "transposed": False, "eps": 1e-5}),
        must_not=Expect("c4", {"affine": True, "transposed": True, "eps": 1e-5}),
        emits=_emit,
        note="exported as aten::_native_batch_norm_legit(_no_training)",
    )


# ============================================================================ contractions
# Token inputs (B, N, C): mixing channels with a weight is equivariant; mixing tokens with
# a weight is not, unless the weight is invariant under the token permutation (a
# circulant matrix under translations of a 1-d axis, a radial table under rotations).


def _circulant(n: int) -> torch.Tensor:
    c = torch.randn(n)
    return torch.stack([torch.roll(c, i) for i in range(n)])  # W[i, j] = c[(j - i) mod n]


def _radial(S: int) -> torch.Tensor:
    ii, jj = torch.meshgrid(
        torch.arange(S, dtype=torch.float32), torch.arange(S, dtype=torch.float32), indexing="ij"
    )
    c = (S - 1) / 2
    return (ii - c) ** 2 + (jj - c) ** 2 + 1.0


def _contract_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(
            D,
            ["channels", "tokens_param", "attention"]
            if ctx.kind == "tokens"
            else ["w_param", "w_circulant", "channels"],
            "variant",
        ),
        "bias": D(st.booleans(), "bias"),
        "D": choice(D, [1, 2, 4], "D"),
    }


def _matmul_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S, N, Dd, v = ctx.C, ctx.S, ctx.N, cfg["D"], cfg["variant"]
    if ctx.kind == "tokens":
        if v == "channels":
            return Net(
                lambda m, x: x @ m.w if cfg["bias"] else torch.matmul(x, m.v).unsqueeze(-1),
                {"w": const(C, Dd), "v": const(C)},
            )
        if v == "tokens_param":
            return Net(lambda m, x: m.w @ x, {"w": const(N, N)})
        return fn(
            lambda x: torch.softmax(x @ x.transpose(-1, -2), -1) @ x
        )  # attention without positions
    if v == "w_param":
        return Net(lambda m, x: x @ m.w, {"w": const(S, S)})
    if v == "w_circulant":
        return Net(lambda m, x: x @ m.w, buffers={"w": _circulant(S)})
    return Net(lambda m, x: (x.transpose(1, 3) @ m.w).transpose(1, 3), {"w": const(C, Dd)})


case(
    "aten::matmul",
    "contractions",
    _contract_draw,
    _matmul_build,
    must=[
        Expect("p4m", {"variant": "channels", "bias": True, "D": 2}, kind=T),
        Expect("p4m", {"variant": "attention", "bias": False, "D": 1}, kind=T),
        Expect("p4m", {"variant": "channels", "bias": False, "D": 2}),
        Expect("d4", {"variant": "channels", "bias": False, "D": 2}, kind=T),
    ],
    must_not=[
        Expect("translations", {"variant": "tokens_param", "bias": False, "D": 1}, kind=T),
        Expect("translations", {"variant": "w_param", "bias": False, "D": 1}),
    ],
    kinds=(G, T),
)


def _mm_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, N, Dd, v = ctx.B, ctx.C, ctx.N, cfg["D"], cfg["variant"]
        if ctx.kind == "grid":  # as tokens
            tok = lambda x: x.flatten(2).transpose(1, 2)  # noqa: E731
            back = lambda y: y.transpose(1, 2).reshape(B, -1, ctx.S, ctx.S)  # noqa: E731
        else:
            tok, back = (lambda x: x), (lambda y: y)
        good = v in ("channels", "attention", "w_circulant")
        params = {"w": const(C, Dd), "v": const(C), "t": const(N, N), "u": const(N)}
        if name == "mm":
            f = (
                (lambda m, x: back(torch.mm(tok(x).reshape(B * N, C), m.w).reshape(B, N, Dd)))
                if good
                else (lambda m, x: back(torch.stack([torch.mm(m.t, tok(x)[b]) for b in range(B)])))
            )
        elif name == "bmm":
            f = (
                (lambda m, x: back(torch.bmm(tok(x), m.w.expand(B, C, Dd))))
                if good
                else (lambda m, x: back(torch.bmm(m.t.expand(B, N, N), tok(x))))
            )
            if v == "attention":
                f = lambda m, x: back(  # noqa: E731
                    torch.bmm(torch.softmax(torch.bmm(tok(x), tok(x).transpose(1, 2)), -1), tok(x))
                )
        elif name == "mv":
            f = (
                (lambda m, x: back(torch.mv(tok(x).reshape(B * N, C), m.v).reshape(B, N, 1)))
                if good
                else (
                    lambda m, x: back(
                        torch.stack([torch.mv(m.t, tok(x)[b, :, 0]) for b in range(B)]).unsqueeze(
                            -1
                        )
                    )
                )
            )
        elif name in ("dot", "vdot"):
            op = torch.dot if name == "dot" else torch.vdot
            f = (
                (lambda m, x: op(x.flatten(), x.flatten()))
                if good
                else (lambda m, x: op(tok(x)[0, :, 0], m.u))
            )
        elif cfg.get(
            "weighted"
        ):  # inner with a weight whose rows are equal: a position-weighted sum over the tokens
            f = lambda m, x: torch.inner(tok(x).transpose(1, 2), m.u.expand(N, N)).mean(-1)  # noqa: E731
        else:  # inner: contracts the last dims
            f = (
                (lambda m, x: back(torch.inner(tok(x), m.w.t())))
                if good
                else (lambda m, x: back(torch.inner(tok(x).transpose(1, 2), m.t).transpose(1, 2)))
            )
        return Net(f, params)

    return build


for _name in ("mm", "bmm", "mv", "dot", "vdot", "inner"):
    _known = {
        "dot": "scalar-contraction",
        "vdot": "scalar-contraction",
        "inner": "inner-as-matmul",
    }.get(_name)
    case(
        f"aten::{_name}",
        "contractions",
        lambda D, ctx, n=_name: {
            **_contract_draw(D, ctx),
            **({"weighted": D(st.booleans(), "weighted")} if n == "inner" else {}),
        },
        _mm_build(_name),
        known=(lambda cfg, ctx: "inner-as-matmul" if cfg.get("weighted") else None)
        if _name == "inner"
        else None,
        must=[
            Expect("p4m", {"variant": "channels", "bias": True, "D": 2}, kind=T, known=_known),
            Expect("d4", {"variant": "channels", "bias": True, "D": 2}, known=_known),
        ],
        must_not=Expect("translations", {"variant": "tokens_param", "bias": True, "D": 2}, kind=T),
        kinds=(G, T),
    )


def _addmm_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        **_contract_draw(D, ctx),
        "bias_kind": choice(D, ["channel", "scalar", "position"], "bias_kind"),
        "alpha": choice(D, [1.0, 0.5], "alpha"),
        "beta": choice(D, [1.0, 2.0], "beta"),
    }


def _addmm_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, N, Dd = ctx.B, ctx.C, ctx.N, cfg["D"]
        tok = (lambda x: x.flatten(2).transpose(1, 2)) if ctx.kind == "grid" else (lambda x: x)
        back = (
            (lambda y: y.transpose(1, 2).reshape(B, -1, ctx.S, ctx.S))
            if ctx.kind == "grid"
            else (lambda y: y)
        )
        bk, alpha, beta = cfg["bias_kind"], cfg["alpha"], cfg["beta"]
        if name == "addmm":
            bias = {"channel": const(Dd), "scalar": const(1), "position": const(B * N, Dd)}[bk]
            f = lambda m, x: back(  # noqa: E731
                torch.addmm(m.b, tok(x).reshape(B * N, C), m.w, beta=beta, alpha=alpha).reshape(
                    B, N, Dd
                )
            )
        elif name == "baddbmm":
            bias = {"channel": const(1, 1, Dd), "scalar": const(1), "position": const(N, Dd)}[bk]
            f = lambda m, x: back(  # noqa: E731
                torch.baddbmm(m.b, tok(x), m.w.expand(B, C, Dd), beta=beta, alpha=alpha)
            )
        else:  # addmv
            bias = {"channel": const(1), "scalar": const(1), "position": const(B * N)}[bk]
            f = lambda m, x: back(  # noqa: E731
                torch.addmv(m.b, tok(x).reshape(B * N, C), m.v, beta=beta, alpha=alpha).reshape(
                    B, N, 1
                )
            )
        return Net(f, {"b": bias, "w": const(C, Dd), "v": const(C)})

    return build


for _name in ("addmm", "baddbmm", "addmv"):
    _base = {"variant": "channels", "bias": True, "D": 2, "alpha": 0.5, "beta": 2.0}
    case(
        f"aten::{_name}",
        "contractions",
        _addmm_draw,
        _addmm_build(_name),
        must=[
            Expect("p4m", {**_base, "bias_kind": "channel"}, kind=T),
            Expect("c4", {**_base, "bias_kind": "scalar"}),
        ],
        must_not=Expect("translations", {**_base, "bias_kind": "position"}, kind=T),
        kinds=(G, T),
    )


def _linear_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, S, Dd, v = ctx.C, ctx.S, cfg["D"], cfg["variant"]
    if ctx.kind == "tokens":
        if v == "channels":
            if cfg["bias"]:
                return _module_net(nn.Linear(C, Dd))
            return Net(
                lambda m, x: F.linear(x, m.w).unsqueeze(-1) if Dd == 1 else F.linear(x, m.W),
                {"w": const(C), "W": const(Dd, C)},
            )
        if v == "tokens_param":
            return Net(
                lambda m, x: F.linear(x.transpose(1, 2), m.w, m.b).transpose(1, 2),
                {"w": const(ctx.N, ctx.N), "b": const(ctx.N)},
            )
        return Net(
            lambda m, x: F.scaled_dot_product_attention(
                F.linear(x, m.q), F.linear(x, m.k), F.linear(x, m.v)
            ),
            {"q": const(4, C), "k": const(4, C), "v": const(4, C)},
        )
    if v == "channels":
        return Net(
            lambda m, x: F.linear(x.transpose(1, 3), m.w, m.b if cfg["bias"] else None).transpose(
                1, 3
            ),
            {"w": const(Dd, C), "b": const(Dd)},
        )
    if (
        v == "w_circulant"
    ):  # along W: a circulant weight and a constant bias commute with rolls of W
        return Net(
            lambda m, x: F.linear(x, m.w, m.b.expand(S) if cfg["bias"] else None),
            {"b": const(1)},
            {"w": _circulant(S)},
        )
    return Net(lambda m, x: F.linear(x, m.w), {"w": const(S, S)})


case(
    "aten::linear",
    "contractions",
    _contract_draw,
    _linear_build,
    must=[
        Expect("p4m", {"variant": "channels", "bias": True, "D": 4}, kind=T),
        Expect("p4m", {"variant": "channels", "bias": False, "D": 1}, kind=T),
        Expect("translations", {"variant": "w_circulant", "bias": True, "D": 1}),
        Expect("d4", {"variant": "attention", "bias": True, "D": 1}, kind=T),
    ],
    must_not=[
        Expect("translations", {"variant": "w_param", "bias": True, "D": 1}),
        Expect("c4", {"variant": "w_circulant", "bias": False, "D": 1}),
        Expect("translations", {"variant": "tokens_param", "bias": True, "D": 1}, kind=T),
    ],
    kinds=(G, T),
)


_EINSUM_GRID = {
    "channels": ("bchw,dc->bdhw", "w"),
    "gram": ("bchw,bdhw->bcd", None),
    "sumsq": ("bchw,bchw->bc", None),
    "single": ("bchw->bc", None),
    "permute": ("bchw->hwbc", None),
    "pos_pool": ("bchw,hw->bc", "p"),
    "radial_pool": ("bchw,hw->bc", "r"),
    "ellipsis": ("...chw,dc->...dhw", "w"),
}
_EINSUM_TOKENS = {
    "channels": ("bnc,dc->bnd", "w"),
    "scores": ("bnc,bmc->bnm", None),
    "single": ("bnc->bc", None),
    "pos_pool": ("bnc,n->bc", "u"),
    "ellipsis": ("...c,dc->...d", "w"),
}


def _einsum_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "eq": choice(D, sorted(_EINSUM_GRID if ctx.kind == "grid" else _EINSUM_TOKENS), "eq"),
        "spaces": D(st.booleans(), "spaces"),
    }


def _einsum_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    table = _EINSUM_GRID if ctx.kind == "grid" else _EINSUM_TOKENS
    eq, operand = table[cfg["eq"]]
    if cfg["spaces"]:
        eq = eq.replace(",", ", ").replace("->", " -> ")
    params = {"w": const(4, ctx.C), "p": const(ctx.S, ctx.S), "u": const(ctx.N)}
    buffers = {"r": _radial(ctx.S)}
    if cfg["eq"] == "permute":  # (H, W, B, C): restore (B, C, H, W)
        return fn(lambda x: torch.einsum(eq, x).permute(2, 3, 0, 1))
    if cfg["eq"] == "scores":  # attention scores, then mix the values
        return fn(
            lambda x: torch.einsum("bnm,bmc->bnc", torch.softmax(torch.einsum(eq, x, x), -1), x)
        )
    if operand is None:
        if "," in eq:
            return fn(lambda x: torch.einsum(eq, x, x))
        return fn(lambda x: torch.einsum(eq, x))
    return Net(lambda m, x: torch.einsum(eq, x, getattr(m, operand)), params, buffers)


case(
    "aten::einsum",
    "contractions",
    _einsum_draw,
    _einsum_build,
    must=[
        Expect("p4m", {"eq": "channels", "spaces": True}),
        Expect("c4", {"eq": "radial_pool", "spaces": False}),
        Expect("p4m", {"eq": "gram", "spaces": False}),
        Expect("p4m", {"eq": "scores", "spaces": False}, kind=T),
        Expect("d4", {"eq": "ellipsis", "spaces": True}, kind=T),
    ],
    must_not=[
        Expect("c4", {"eq": "pos_pool", "spaces": False}),
        Expect("translations", {"eq": "radial_pool", "spaces": False}),
        Expect("translations", {"eq": "pos_pool", "spaces": False}, kind=T),
    ],
    kinds=(G, T),
)


def _sdpa_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "mask": choice(D, ["none", "scalar", "channel", "position", "bool_position"], "mask"),
        "causal": D(st.booleans(), "causal"),
        "scale": choice(D, [None, 0.3], "scale"),
        "heads": choice(D, [1, 2], "heads"),
        "gqa": D(st.booleans(), "gqa"),
    }


def _sdpa_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    C, N, S, h = ctx.C, ctx.N, ctx.S, cfg["heads"]
    L = S if ctx.kind == "grid" else N  # the query / key axis: H of a grid (head dim W), tokens
    mask_kind = cfg["mask"]
    causal = cfg["causal"] and mask_kind == "none"
    buffers = {
        "scalar": torch.full((1, 1), 0.5),
        "channel": torch.zeros(L, L),
        "position": torch.randn(L, L),
        "bool_position": torch.rand(L, L) > 0.3,
    }
    buffers["bool_position"].fill_diagonal_(True)
    params = {
        "q": const(2 * h, C),
        "k": const(2 * h, C),
        "v": const(2 * h, C),
        "kk": const(2, C),
        "vv": const(2, C),
    }

    def mask(m: Net) -> Any:
        return None if mask_kind == "none" else getattr(m, mask_kind)

    if ctx.kind == "grid":
        return Net(
            lambda m, x: F.scaled_dot_product_attention(
                x, x, x, attn_mask=mask(m), is_causal=causal, scale=cfg["scale"]
            ),
            params,
            buffers,
        )

    def f(m: Net, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        split = lambda t, n: t.view(B, N, n, 2).transpose(1, 2)  # noqa: E731
        q = split(F.linear(x, m.q), h)
        if cfg["gqa"] and h == 2:
            k, v = split(F.linear(x, m.kk), 1), split(F.linear(x, m.vv), 1)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask(m), is_causal=causal, scale=cfg["scale"], enable_gqa=True
            )
        else:
            k, v = split(F.linear(x, m.k), h), split(F.linear(x, m.v), h)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask(m), is_causal=causal, scale=cfg["scale"]
            )
        return out.transpose(1, 2).reshape(B, N, 2 * h)

    return Net(f, params, buffers)


_SD = {"mask": "none", "causal": False, "scale": None, "heads": 2, "gqa": False}
case(
    "aten::scaled_dot_product_attention",
    "contractions",
    _sdpa_draw,
    _sdpa_build,
    must=[
        Expect("p4m", _SD, kind=T),
        Expect("d4", {**_SD, "mask": "scalar", "scale": 0.3, "heads": 1}, kind=T),
        Expect("translations", {**_SD, "mask": "channel"}),
    ],
    must_not=[
        Expect("translations", {**_SD, "causal": True}, kind=T),
        Expect("c4", {**_SD, "mask": "position"}, kind=T),
        Expect("translations", {**_SD, "mask": "bool_position"}),
        Expect("c4", _SD),
        Expect("p4m", {**_SD, "gqa": True}, kind=T, verdict="unverified"),
    ],
    kinds=(G, T),
)


# ============================================================================ convolution and pooling


def _sym_kernel(w: torch.Tensor, group: str) -> torch.Tensor:
    """Average a square kernel over the rotations (and reflections) of the point group."""
    ws = [torch.rot90(w, k, (-2, -1)) for k in range(4)]
    if group in ("d4", "p4m"):
        ws += [torch.rot90(torch.flip(w, (-1,)), k, (-2, -1)) for k in range(4)]
    return sum(ws) / len(ws)


def _conv_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    square = D(st.booleans(), "square")
    k = choice(D, [1, 2, 3], "k")
    kw = k if square else choice(D, [1, 2, 3], "kw")
    return {
        "k": (k, kw),
        "stride": choice(D, [1, 2], "stride"),
        "dilation": choice(D, [1, 2], "dilation"),
        "padding": choice(D, ["same", "valid", "half", "zero", "one"], "padding"),
        "mode": choice(D, ["zeros", "circular", "reflect"], "mode"),
        "groups": choice(D, [1, "depthwise"], "groups"),
        "bias": D(st.booleans(), "bias"),
        "symmetric": D(st.booleans(), "symmetric"),
        "out": choice(D, [1, 2, 4], "out"),
        "transposed": False,
        "explicit_pad": D(st.booleans(), "explicit_pad"),
    }


def _conv_padding(cfg: dict[str, Any]) -> Any:
    (kh, kw), d, p = cfg["k"], cfg["dilation"], cfg["padding"]
    if p in ("same", "valid"):
        if p == "same" and (cfg["stride"] != 1 or (d * (kh - 1)) % 2 or (d * (kw - 1)) % 2):
            return "valid"  # PyTorch refuses strided 'same'; an even total would pad asymmetrically
        return p
    if p == "half":
        return (d * (kh - 1) // 2, d * (kw - 1) // 2)
    return 0 if p == "zero" else 1


def _conv_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C = ctx.B, ctx.C
        groups = C if cfg["groups"] == "depthwise" else 1
        out = C * cfg["out"] if groups > 1 else cfg["out"]
        kh, kw = cfg["k"]
        if name == "conv1d":
            kh = 1
        params = {"w": const(out, C // groups, kh, kw), "b": const(out)}
        stride, dilation, padding = cfg["stride"], cfg["dilation"], _conv_padding(cfg)
        symmetric = cfg["symmetric"] and kh == kw

        def weight(m: Net) -> torch.Tensor:
            return (
                _sym_kernel(m.w, ctx.group if ctx.group != "translations" else "d4")
                if symmetric
                else m.w
            )

        def pre(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
            """Padding modes other than zeros pad explicitly (as nn.Conv2d does)."""
            if cfg["mode"] == "zeros" and not cfg["explicit_pad"]:
                return x, padding
            p = padding
            if isinstance(p, str):
                p = (0, 0) if p == "valid" else (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
            p = (p, p) if isinstance(p, int) else p
            mode = "constant" if cfg["mode"] == "zeros" else cfg["mode"]
            if x.dim() == 3:
                return F.pad(x, (p[1], p[1]), mode=mode), 0
            return F.pad(x, (p[1], p[1], p[0], p[0]), mode=mode), 0

        if name == "conv1d":  # along W, one row at a time (padded after splitting the rows)

            def f(m: Net, x: torch.Tensor) -> torch.Tensor:
                H = x.shape[-2]
                rows = x.permute(0, 2, 1, 3).reshape(B * H, C, x.shape[-1])
                rows, p = pre(rows)
                p1 = p if isinstance(p, str) else (p[1] if isinstance(p, tuple) else p)
                z = F.conv1d(
                    rows,
                    weight(m)[:, :, 0],
                    m.b if cfg["bias"] else None,
                    stride,
                    p1,
                    dilation,
                    groups,
                )
                return z.reshape(B, H, out, -1).permute(0, 2, 1, 3)

            return Net(f, params)

        def f2(m: Net, x: torch.Tensor) -> torch.Tensor:
            y, p = pre(x)
            b = m.b if cfg["bias"] else None
            if name == "conv2d":
                return F.conv2d(y, weight(m), b, stride, p, dilation, groups)
            pp = list(p) if isinstance(p, tuple) else [p, p]
            if isinstance(p, str):
                pp = (
                    [0, 0] if p == "valid" else [dilation * (kh - 1) // 2, dilation * (kw - 1) // 2]
                )
            w = weight(m)
            if cfg["transposed"]:
                w = w.transpose(0, 1)
            if name == "convolution":
                return torch.convolution(
                    y, w, b, [stride] * 2, pp, [dilation] * 2, cfg["transposed"], [0, 0], groups
                )
            return torch._convolution(
                y,
                w,
                b,
                [stride] * 2,
                pp,
                [dilation] * 2,
                cfg["transposed"],
                [0, 0],
                groups,
                False,
                False,
                True,
                True,
            )

        return Net(f2, params)

    return build


_CV = {
    "k": (3, 3),
    "stride": 1,
    "dilation": 1,
    "padding": "half",
    "mode": "zeros",
    "groups": 1,
    "bias": True,
    "symmetric": True,
    "out": 2,
    "transposed": False,
    "explicit_pad": False,
}
for _name in ("conv2d", "convolution", "_convolution", "conv1d"):
    _must = [Expect("p4m", {**_CV, "k": (1, 1), "symmetric": False})]
    if _name != "conv1d":  # (a 1-d convolution after a circular pad: see the report)
        _must.append(Expect("translations", {**_CV, "mode": "circular", "symmetric": False}))
    _not = [
        Expect("translations", {**_CV, "symmetric": False}),
        Expect("c4", {**_CV, "k": (2, 2), "symmetric": False, "padding": "zero"}),
    ]
    if _name != "conv1d":
        _must += [
            Expect("c4", _CV),
            Expect(
                "d4", {**_CV, "k": (2, 2), "stride": 2, "padding": "zero", "groups": "depthwise"}
            ),
        ]
        _not += [
            Expect("c4", {**_CV, "symmetric": False}),
            Expect("d4", {**_CV, "k": (3, 3), "stride": 2, "padding": "zero"}),
        ]
    if _name in ("convolution", "_convolution"):
        _not.append(Expect("p4m", {**_CV, "k": (1, 1), "transposed": True}, verdict="unverified"))
    case(f"aten::{_name}", "convolution", _conv_draw, _conv_build(_name), must=_must, must_not=_not)


def _pool_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    square = D(st.booleans(), "square")
    k = choice(D, [1, 2, 3], "k")
    kw = k if square else choice(D, [1, 2, 3], "kw")
    return {
        "k": (k, kw),
        "stride": choice(D, [None, 1, 2], "stride"),
        "padding": choice(D, [0, 1], "padding"),
        "dilation": choice(D, [1, 2], "dilation"),
        "ceil": D(st.booleans(), "ceil"),
        "include_pad": D(st.booleans(), "include_pad"),
        "divisor": choice(D, [None, 3], "divisor"),
        "indices": D(st.booleans(), "indices"),
        "circular": D(st.booleans(), "circular"),
    }


def _pool_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C = ctx.B, ctx.C
        kh, kw = cfg["k"]
        if "1d" in name:
            kh = 1
        dil = cfg["dilation"] if name.startswith("max") else 1
        pad_h = min(cfg["padding"], (dil * (kh - 1) + 1) // 2, kh // 2)
        pad_w = min(cfg["padding"], (dil * (kw - 1) + 1) // 2, kw // 2)
        stride = cfg["stride"]
        circular = cfg["circular"]

        def pre(x: torch.Tensor) -> torch.Tensor:
            if not circular:
                return x
            th, tw = dil * (kh - 1), dil * (kw - 1)  # pad circularly for a stride-1 "same" pooling
            if x.dim() == 3:
                return F.pad(x, (tw // 2, tw - tw // 2), mode="circular")
            return F.pad(x, (tw // 2, tw - tw // 2, th // 2, th - th // 2), mode="circular")

        ph, pw = (0, 0) if circular else (pad_h, pad_w)
        s2 = stride if stride is not None else (kh, kw)
        with_idx = cfg["indices"] or name.endswith("with_indices")

        if "1d" in name:  # along W, one row at a time

            def f(x: torch.Tensor) -> torch.Tensor:
                H, W = x.shape[-2:]
                rows = pre(x.permute(0, 2, 1, 3).reshape(B * H, C, W))
                s1 = stride if stride is not None else None
                if name.startswith("max"):
                    z = F.max_pool1d(rows, kw, s1, pw, dil, cfg["ceil"], return_indices=with_idx)
                    z = z[0] if with_idx else z
                else:
                    z = F.avg_pool1d(rows, kw, s1, pw, cfg["ceil"], cfg["include_pad"])
                return z.reshape(B, H, C, -1).permute(0, 2, 1, 3)

            return fn(f)

        def f2(x: torch.Tensor) -> torch.Tensor:
            y = pre(x)
            if name.startswith("max"):
                z = F.max_pool2d(
                    y, (kh, kw), s2, (ph, pw), dil, cfg["ceil"], return_indices=with_idx
                )
                return z[0] if with_idx else z
            return F.avg_pool2d(
                y, (kh, kw), s2, (ph, pw), cfg["ceil"], cfg["include_pad"], cfg["divisor"]
            )

        return fn(f2)

    return build


_PL = {
    "k": (2, 2),
    "stride": None,
    "padding": 0,
    "dilation": 1,
    "ceil": False,
    "include_pad": True,
    "divisor": None,
    "indices": False,
    "circular": False,
}
for _name, _emit in [
    ("max_pool2d", ""),
    ("max_pool2d_with_indices", ""),
    ("avg_pool2d", ""),
    ("max_pool1d", ""),
    ("max_pool1d_with_indices", ""),
    ("avg_pool1d", ""),
]:
    _known = {
        "max_pool1d_with_indices": "pool1d-with-indices",
        "avg_pool1d": "avg-pool1d-divisor",
    }.get(_name)
    _must = [Expect("p4m", {**_PL, "k": (1, 1), "stride": 1}, known=_known)]
    _not = [Expect("translations", _PL)]
    if "2d" in _name:
        _must.append(Expect("translations", {**_PL, "k": (3, 3), "stride": 1, "circular": True}))
        _must += [
            Expect("d4", _PL),
            Expect("c4", {**_PL, "k": (3, 3), "stride": 1, "padding": 1, "include_pad": False}),
        ]
        _not += [Expect("c4", {**_PL, "k": (3, 3), "stride": 2})]
    _not += [Expect("c4", {**_PL, "k": (2, 3), "stride": 1, "circular": True})]
    case(
        f"aten::{_name}",
        "convolution",
        _pool_draw,
        _pool_build(_name),
        must=_must,
        must_not=_not,
        emits=_emit,
    )


def _adaptive_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "size": choice(D, [1, 2, 3, 4, 5], "size"),
        "indices": D(st.booleans(), "indices"),
        "tuple": D(st.booleans(), "tuple"),
    }


def _adaptive_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        B, C, S = ctx.B, ctx.C, ctx.S
        o = cfg["size"]
        size2 = (o, o) if cfg["tuple"] else o
        if (
            "1d" in name
        ):  # along W, then average over H (invariant under translations when it holds)

            def f(x: torch.Tensor) -> torch.Tensor:
                rows = x.permute(0, 2, 1, 3).reshape(B * S, C, S)
                if "max" in name:
                    z = F.adaptive_max_pool1d(rows, o, return_indices=cfg["indices"])
                    z = z[0] if cfg["indices"] else z
                else:
                    z = F.adaptive_avg_pool1d(rows, o)
                return z.reshape(B, S, C, o).mean(1)

            return fn(f)
        if name == "_adaptive_avg_pool2d":
            return fn(lambda x: A._adaptive_avg_pool2d(x, [o, o]))
        if "max" in name:
            return fn(
                lambda x: (
                    F.adaptive_max_pool2d(x, size2, return_indices=True)[0]
                    if cfg["indices"]
                    else F.adaptive_max_pool2d(x, size2)
                )
            )
        return fn(lambda x: F.adaptive_avg_pool2d(x, size2))

    return build


for _name in (
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "_adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "adaptive_max_pool1d",
):
    _must = [Expect("translations", {"size": 1, "indices": True, "tuple": True})]
    if "2d" in _name:
        _must += [
            Expect("d4", {"size": 3, "indices": False, "tuple": False}),
            Expect("p4m", {"size": 1, "indices": True, "tuple": True}),
        ]
    case(
        f"aten::{_name}",
        "convolution",
        _adaptive_draw,
        _adaptive_build(_name),
        must=_must,
        must_not=[
            Expect("c4", {"size": 4, "indices": False, "tuple": True}, verdict="unverified"),
            Expect("translations", {"size": 2, "indices": True, "tuple": False}),
        ],
    )


# ============================================================================ casts, dropout, embedding, no-ops
# A cast or an evaluation-mode dropout cannot break equivariance; its "must not"
# configuration feeds it an untracked value (arg-max positions along a moved axis),
# which must stay unverified.


def _cast_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["plain", "positions"], "variant"),
        "dtype": choice(D, ["float64", "float16", "int64", "complex128"], "dtype"),
    }


_DTYPES = {
    "float64": torch.float64,
    "float16": torch.float16,
    "int64": torch.int64,
    "complex128": torch.complex128,
}


def _cast_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        dtype = _DTYPES[cfg["dtype"]]
        op: Callable[[Net, torch.Tensor], torch.Tensor] = {
            "_to_copy": lambda m, y: y.to(dtype),
            "to": lambda m, y: y.to(dtype=dtype, copy=True),
            "type_as": lambda m, y: y.type_as(m.like),
            "_conj": lambda m, y: torch.conj(y.to(torch.complex128)),
            "resolve_conj": lambda m, y: torch.conj(y.to(torch.complex128)).resolve_conj(),
            "resolve_neg": lambda m, y: torch.resolve_neg(-y),
            "positive": lambda m, y: torch.positive(y),
        }[name]
        like = torch.zeros(1, dtype=dtype)
        if cfg["variant"] == "plain":
            return Net(lambda m, x: op(m, x), buffers={"like": like})
        return Net(
            lambda m, x: op(m, x.max(-1, keepdim=True).indices.to(torch.float32)),
            buffers={"like": like},
        )

    return build


for _name, _emit in [
    ("_to_copy", "aten::_to_copy|aten::to"),
    ("to", "aten::to|aten::_to_copy"),
    ("type_as", ""),
    ("_conj", ""),
    ("resolve_conj", None),
    ("resolve_neg", None),
    ("positive", None),
]:
    case(
        f"aten::{_name}",
        "misc",
        _cast_draw,
        _cast_build(_name),
        must=[
            Expect("p4m", {"variant": "plain", "dtype": "float64"}),
            Expect("c4", {"variant": "plain", "dtype": "int64"}, kind=T),
        ],
        must_not=Expect(
            "translations", {"variant": "positions", "dtype": "float64"}, verdict="unverified"
        ),
        kinds=(G, T),
        emits=_emit,
        note="exported as aten::_to_copy / aten::clone, or dropped",
    )


# ``a & b``, ``a | b``, ``a ^ b``, ``a << n``, ``a >> n`` keep their operator names in the
# exported graph (not tagged pointwise by PyTorch): elementwise on masks / integers made from
# the input; fed arg-max positions along a moved axis they must stay unverified.


def _bitwise_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {
        "variant": choice(D, ["plain", "positions"], "variant"),
        "other": choice(D, ["tensor", "scalar"], "other"),
    }


def _bitwise_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    ops: dict[str, Callable[[Any, Any], torch.Tensor]] = {
        "__and__": lambda a, b: a & b,
        "__or__": lambda a, b: a | b,
        "__xor__": lambda a, b: a ^ b,
        "__lshift__": lambda a, b: a << b,
        "__rshift__": lambda a, b: a >> b,
    }
    op = ops[name]

    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        scalar = cfg["other"] == "scalar"

        def forward(m: Net, x: torch.Tensor) -> torch.Tensor:
            if cfg["variant"] == "positions":
                a = x.max(-1, keepdim=True).indices
            else:
                a = (x > 0).to(torch.int64) + 2 * (x > 0.5).to(torch.int64)
            b = 1 if scalar else (x < 0.25).to(torch.int64)
            return op(a, b).to(torch.float64)

        return Net(forward)

    return build


for _name in ("__and__", "__or__", "__xor__", "__lshift__", "__rshift__"):
    case(
        f"aten::{_name}",
        "misc",
        _bitwise_draw,
        _bitwise_build(_name),
        must=[
            Expect("p4m", {"variant": "plain", "other": "tensor"}),
            Expect("c4", {"variant": "plain", "other": "scalar"}, kind=T),
        ],
        must_not=Expect(
            "translations", {"variant": "positions", "other": "tensor"}, verdict="unverified"
        ),
        kinds=(G, T),
        emits=f"aten::{_name}|aten::bitwise_{_name.strip('_').replace('shift', '_shift')}",
    )


def _where_number_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["plain", "positions"], "variant")}


def _where_number_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        def forward(m: Net, x: torch.Tensor) -> torch.Tensor:
            if cfg["variant"] == "positions":
                mask = x.max(-1, keepdim=True).indices > 1
            else:
                mask = x > 0.2
            if name == "ScalarOther":
                return torch.where(mask, x, 0.5)
            if name == "ScalarSelf":
                return torch.where(mask, -1.5, x)
            return torch.where(mask, 2.0, -3.0)

        return Net(forward)

    return build


for _overload in ("ScalarOther", "ScalarSelf", "Scalar"):
    case(
        f"aten::where.{_overload}",
        "misc",
        _where_number_draw,
        _where_number_build(_overload),
        must=[Expect("p4m", {"variant": "plain"}), Expect("c4", {"variant": "plain"}, kind=T)],
        must_not=Expect("translations", {"variant": "positions"}, verdict="unverified"),
        kinds=(G, T),
        emits="aten::where",
    )


def _dropout_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    p = choice(D, [0.0, 0.3], "p")
    # training mode with p > 0 draws random numbers, which makes the whole bundle unverified:
    # those configurations are certified alone (the "must not" expectations)
    return {
        "p": p,
        "train": D(st.booleans(), "train") if p == 0.0 else False,
        "module": D(st.booleans(), "module"),
    }


def _dropout_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        p, train = cfg["p"], cfg["train"]
        if name == "native_dropout":
            return fn(lambda x: torch.native_dropout(x, p, train)[0])
        if cfg["module"] and not train:  # a dropout module (certify evaluates in eval mode)
            return _module_net(
                {
                    "dropout": nn.Dropout(p),
                    "feature_dropout": nn.Dropout2d(p),
                    "alpha_dropout": nn.AlphaDropout(p),
                }[name]
            )
        op = {
            "dropout": torch.dropout,
            "feature_dropout": torch.feature_dropout,
            "alpha_dropout": torch.alpha_dropout,
        }[name]
        return fn(lambda x: op(x, p, train))

    return build


for _name, _emit in [
    ("dropout", None),
    ("feature_dropout", None),
    ("alpha_dropout", None),
    ("native_dropout", ""),
]:
    _not = [
        Expect(
            "translations",
            {"p": 0.3, "train": True, "module": False},
            verdict="unverified",
            alone=True,
        )
    ]
    case(
        f"aten::{_name}",
        "misc",
        _dropout_draw,
        _dropout_build(_name),
        must=[
            Expect(
                "p4m",
                {"p": 0.3, "train": False, "module": True},
                known="native-dropout-p" if _name == "native_dropout" else None,
            ),
            Expect("d4", {"p": 0.0, "train": True, "module": False}, kind=T),
        ],
        must_not=_not,
        kinds=(G, T),
        emits=_emit,
        note="evaluation-mode dropout is exported as aten::clone (or nothing); training mode as aten::native_dropout / bernoulli",
    )


def _embedding_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    # (max_norm renormalises the table in place: certified alone, as a "must not")
    return {
        "variant": "data",
        "padding_idx": choice(D, [None, 0], "padding_idx"),
        "dim": choice(D, [1, 3], "dim"),
    }


def _embedding_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    n = cfg["dim"]
    kw: dict[str, Any] = {"padding_idx": cfg["padding_idx"]}
    if cfg["variant"] == "max_norm":
        kw["max_norm"] = 1.0  # renormalises the table in place: state kept between calls

    def f(m: Net, x: torch.Tensor) -> torch.Tensor:
        idx = (x > 0).long() + (x > 1).long()  # an index computed from the data
        e = F.embedding(idx, m.table, **kw)
        if x.dim() == 4:  # (B, C, H, W, n) -> (B, C*n, H, W)
            return e.permute(0, 1, 4, 2, 3).flatten(1, 2)
        return e.flatten(2)  # (B, N, C*n)

    return Net(f, {"table": const(3, n)})


case(
    "aten::embedding",
    "misc",
    _embedding_draw,
    _embedding_build,
    must=[
        Expect("p4m", {"variant": "data", "padding_idx": 0, "dim": 3}),
        Expect("d4", {"variant": "data", "padding_idx": None, "dim": 1}, kind=T),
    ],
    must_not=Expect(
        "c4",
        {"variant": "max_norm", "padding_idx": None, "dim": 3},
        verdict="unverified",
        alone=True,
    ),
    kinds=(G, T),
)


def _noop_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    return {"variant": choice(D, ["plain", "positions"], "variant")}


def _noop_build(name: str) -> Callable[[dict[str, Any], Ctx], nn.Module]:
    def build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
        def f(x: torch.Tensor) -> torch.Tensor:
            if name == "_assert_tensor_metadata":  # a cast asserts the dtype first
                y = x.to(torch.float64)
            elif name == "_assert_async":
                torch._assert_async((x == x).all())
                y = x
            elif name == "_assert_scalar":
                torch._check(x.shape[0] == ctx.B)
                y = x
            else:
                torch._check_is_size(ctx.B)
                y = x
            if cfg["variant"] == "positions":
                y = y.argmax(-1, keepdim=True).to(torch.float64)
            return y

        return fn(f)

    return build


for _name, _emit in [
    ("_assert_tensor_metadata", ""),
    ("_assert_scalar", None),
    ("sym_constrain_range_for_size", None),
    ("sym_constrain_range", None),
    ("_assert_async", None),
]:
    case(
        f"aten::{_name}",
        "misc",
        _noop_draw,
        _noop_build(_name),
        must=Expect("p4m", {"variant": "plain"}),
        must_not=Expect("translations", {"variant": "positions"}, verdict="unverified"),
        kinds=(G, T),
        emits=_emit,
        note="an assertion on static sizes is dropped by torch.export; with data-dependent sizes it appears next to refused operators "
        "(test_refused_operators checks those)",
    )


# ============================================================================ refused operators
#: Operators the checker refuses on purpose, with the reason and a network using them
#: (built for a grid input); ``test_refused_operators`` checks that it is unverified.
REFUSED: dict[str, tuple[str, Callable[[Ctx], nn.Module]]] = {
    "aten::where.default": (
        "data-dependent: torch.where(cond) returns the positions where cond holds",
        lambda ctx: fn(lambda x: torch.where(x > 0)[0]),
    ),
    "aten::nonzero": ("data-dependent positions", lambda ctx: fn(lambda x: torch.nonzero(x > 0))),
    "aten::nonzero_static": (
        "data-dependent positions",
        lambda ctx: fn(lambda x: torch.nonzero_static(x > 0, size=4)),
    ),
    "aten::masked_select": (
        "data-dependent shape",
        lambda ctx: fn(lambda x: torch.masked_select(x, x > 0)),
    ),
    "aten::unique": (
        "data-dependent shape; no such ATen operator in this PyTorch: torch.unique is exported as aten::_unique2",
        lambda ctx: fn(lambda x: torch.unique(x)),
    ),
    "aten::_unique2": (
        "data-dependent values and shape",
        lambda ctx: fn(lambda x: torch.unique(x, return_inverse=True)[1]),
    ),
    "aten::item": (
        "a Python number read from the data",
        lambda ctx: fn(lambda x: x + x.sum().item()),
    ),
    "aten::_local_scalar_dense": (
        "a Python number read from the data",
        lambda ctx: fn(lambda x: x + A._local_scalar_dense(x.sum())),
    ),
    "aten::bincount": (
        "data-dependent shape",
        lambda ctx: fn(lambda x: torch.bincount((x > 0).long().flatten())),
    ),
    "aten::histc": (
        "a histogram: counts of data-chosen bins",
        lambda ctx: fn(lambda x: torch.histc(x, 4)),
    ),
    "aten::multinomial": (
        "random numbers",
        lambda ctx: fn(lambda x: torch.multinomial(x.abs().flatten(1) + 0.1, 1)),
    ),
    "aten::randperm": ("random numbers", lambda ctx: fn(lambda x: x[:, torch.randperm(ctx.C)])),
    "aten::empty_like": ("uninitialised memory", lambda ctx: fn(lambda x: torch.empty_like(x))),
    "aten::new_empty": (
        "uninitialised memory",
        lambda ctx: fn(lambda x: x.new_empty((ctx.B, ctx.C)) + x.mean((2, 3))),
    ),
    "aten::empty_strided": (
        "uninitialised memory (see KNOWN['uninitialised-constant']: without an input operand the rule is never "
        "consulted)",
        lambda ctx: fn(lambda x: torch.empty_strided((ctx.B, ctx.C), (ctx.C, 1)) + x.mean((2, 3))),
    ),
    "aten::addbmm": (
        "a batched product summed over the batch: not supported by the contraction rule",
        lambda ctx: Net(
            lambda m, x: torch.addbmm(m.b, x[:, 0], m.w.expand(ctx.B, ctx.S, 2)),
            {"b": const(ctx.S, 2), "w": const(1, ctx.S, 2)},
        ),
    ),
}
_RANDOM_REFUSED = {
    "aten::multinomial",
    "aten::randperm",
    "aten::empty_like",
    "aten::new_empty",
}  # outputs differ between calls
KNOWN["uninitialised-constant"] = (
    "aten::empty_strided (and aten::empty) take no tensor operand, so the call is evaluated as a constant and its rule never "
    "runs; the refusal then depends on the two evaluations of the model happening to see different garbage (flaky: "
    "sometimes certified invariant)"
)


# ============================================================================ the pointwise family
# Every operator PyTorch tags pointwise gets the pointwise rule (``rule_for``).

_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": lambda a: torch.exp(a.clamp(max=5)),
    "abs": torch.abs,
    "neg": torch.neg,
    "sqrt": lambda a: torch.sqrt(a.abs()),
    "log1p": lambda a: torch.log1p(a.abs()),
    "sin": torch.sin,
    "erf": torch.erf,
    "floor": torch.floor,
    "round": torch.round,
    "sign": torch.sign,
    "clamp": lambda a: a.clamp(-0.5, 0.5),
    "nan_to_num": torch.nan_to_num,
    "square": torch.square,
    "reciprocal": lambda a: torch.reciprocal(a.abs() + 1),
    "silu": F.silu,
    "softplus": F.softplus,
    "leaky_relu": F.leaky_relu,
    "hardtanh": F.hardtanh,
    "elu": F.elu,
    "hardswish": F.hardswish,
}
_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "sub": lambda a, b: a - 2 * b,
    "mul": torch.mul,
    "div": lambda a, b: a / (b.abs() + 1),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b),
    "atan2": torch.atan2,
    "fmod": lambda a, b: torch.fmod(a, b.abs() + 1),
    "remainder": lambda a, b: torch.remainder(a, b.abs() + 1),
    "hypot": torch.hypot,
    "copysign": torch.copysign,
    "eq": lambda a, b: torch.eq(a.round(), b.round()),
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": lambda a, b: torch.logical_and(a > 0, b > 0),
    "clamp_min": lambda a, b: torch.clamp(a, min=b),
    "where": lambda a, b: torch.where(a > b, a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 1.0),
}
_TERNARY: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1),
    "where3": lambda a, b, c: torch.where(c > 0, a, b),
    "lerp3": lambda a, b, c: torch.lerp(a, b, c),
    "clamp3": lambda a, b, c: torch.clamp(a, b, b + c.abs()),
}
_OPERANDS = (
    "x",
    "x_channels",
    "mean",
    "scalar",
    "channel_param",
    "channel_buffer",
    "position_param",
    "radial",
    "row_buffer",
    "zero_table",
    "x_roll",
)


def _operand_tables(ctx: Ctx) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    C, S, N = ctx.C, ctx.S, ctx.N
    if ctx.kind == "grid":
        params = {"channel_param": const(1, C, 1, 1), "position_param": const(1, 1, S, S)}
        buffers = {
            "channel_buffer": const(C, 1, 1),
            "radial": _radial(S) / S,
            "row_buffer": torch.arange(S, dtype=torch.float32).view(S, 1) - 1.5,
            "zero_table": torch.zeros(1, 1, S, S),
            "scalar": torch.tensor(0.7),
        }
    else:
        params = {"channel_param": const(C), "position_param": const(N, 1)}
        buffers = {
            "channel_buffer": const(1, 1, C),
            "radial": (_radial(S) / S).reshape(N, 1),
            "row_buffer": (torch.arange(N, dtype=torch.float32) % S).view(N, 1) - 1.5,
            "zero_table": torch.zeros(N, C),
            "scalar": torch.tensor(0.7),
        }
    return params, buffers


def _operand(m: Net, x: torch.Tensor, name: str, kind: str) -> torch.Tensor:
    if name == "x":
        return x
    if name == "x_channels":
        return x.flip(1 if kind == "grid" else -1)
    if name == "mean":
        return x.mean((2, 3) if kind == "grid" else 1, keepdim=True)
    if name == "x_roll":
        return x.roll(1, -1 if kind == "grid" else 1)
    return getattr(m, name)


def _pointwise_draw(D: Draw, ctx: Ctx) -> dict[str, Any]:
    arity = choice(D, [1, 2, 2, 3], "arity")
    op = choice(D, sorted({1: _UNARY, 2: _BINARY, 3: _TERNARY}[arity]), "op")
    first = choice(D, ["x", "x_channels", "x_roll", "mean"], "first")
    rest = [choice(D, _OPERANDS, f"operand{i}") for i in range(arity - 1)]
    return {"op": op, "operands": [first, *rest], "swap": D(st.booleans(), "swap")}


def _pointwise_build(cfg: dict[str, Any], ctx: Ctx) -> nn.Module:
    table = {**_UNARY, **_BINARY, **_TERNARY}
    op = table[cfg["op"]]
    names = list(cfg["operands"])
    if cfg["swap"] and len(names) > 1:  # the moving operand second: broadcasting from either side
        names = names[::-1]
    params, buffers = _operand_tables(ctx)

    def f(m: Net, x: torch.Tensor) -> torch.Tensor:
        args = [_operand(m, x, n, ctx.kind) for n in names]
        y = op(*args)
        return (
            y.expand(*x.shape)
            if y.shape != x.shape
            and y.dim() <= x.dim()
            and y.numel() < x.numel()
            and y.shape[0] != x.shape[0]
            else y
        )

    return Net(f, params, buffers)


POINTWISE_EXPECT: list[tuple[Expect, bool]] = [
    (Expect("c4", {"op": "add", "operands": ["x", "channel_param"], "swap": False}), True),
    (Expect("p4m", {"op": "add", "operands": ["x", "position_param"], "swap": True}), False),
    (Expect("d4", {"op": "mul", "operands": ["x", "radial"], "swap": False}), True),
    (Expect("translations", {"op": "mul", "operands": ["x", "radial"], "swap": False}), False),
    (Expect("c4", {"op": "masked_fill", "operands": ["x", "row_buffer"], "swap": False}), False),
    (
        Expect("p4m", {"op": "masked_fill", "operands": ["x", "channel_buffer"], "swap": False}),
        True,
    ),
    (
        Expect("p4m", {"op": "where3", "operands": ["x", "channel_buffer", "mean"], "swap": False}),
        True,
    ),
    (Expect("p4m", {"op": "maximum", "operands": ["x", "x_channels"], "swap": False}), True),
    (Expect("d4", {"op": "pow", "operands": ["x", "scalar"], "swap": False}), True),
    (Expect("translations", {"op": "add", "operands": ["x", "zero_table"], "swap": False}), True),
    (Expect("translations", {"op": "atan2", "operands": ["x", "x_roll"], "swap": True}), True),
    (Expect("c4", {"op": "atan2", "operands": ["x", "x_roll"], "swap": False}), False),
    (Expect("p4m", {"op": "gelu", "operands": ["x"], "swap": False}), True),
    (Expect("p4m", {"op": "mul", "operands": ["x", "channel_param"], "swap": False}, kind=T), True),
    (
        Expect(
            "translations",
            {"op": "add", "operands": ["x", "position_param"], "swap": False},
            kind=T,
        ),
        False,
    ),
    (
        Expect("c4", {"op": "clamp3", "operands": ["x", "radial", "mean"], "swap": False}, kind=T),
        True,
    ),
    (
        Expect(
            "translations",
            {"op": "lerp3", "operands": ["x", "mean", "row_buffer"], "swap": False},
            kind=T,
        ),
        False,
    ),
]


def is_pointwise_target(name: str) -> bool:
    """Whether an exported operator (``aten::add.Tensor``) resolves to the pointwise rule."""
    op_name, _, overload = name.partition("::")[2].partition(".")
    packet = getattr(torch.ops.aten, op_name, None)
    if packet is None:
        return False
    target = getattr(packet, overload or "default", None)
    return target is not None and rule_for(target) is rule_for(torch.ops.aten.add.Tensor)


# ============================================================================ the tests

FAMILIES = (
    "movement",
    "indexing",
    "padding",
    "reductions",
    "normalisations",
    "contractions",
    "convolution",
    "misc",
)
FAMILY_KINDS = [
    (f, k)
    for f in FAMILIES
    for k in KINDS
    if any(c.family == f and k in c.kinds for c in CASES.values())
]
#: Examples per family and input kind (each certifies every operator of the family once,
#: about 0.05 s per network: the exporter dominates); more under HYPOTHESIS_PROFILE=long.
LONG = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "long"
EXAMPLES = 10 if LONG else 2


def _cases(family: str, kind: str) -> list[Case]:
    return [c for c in CASES.values() if c.family == family and kind in c.kinds]


def _draw_ctx(data: Any, kind: str, rotate: int = 0) -> Ctx:
    # hypothesis starts from the simplest example (the first group): rotate the list so
    # that the families do not all start with the same group
    r = rotate % len(GROUPS)
    group = data.draw(st.sampled_from(GROUPS[r:] + GROUPS[:r]), label="group")
    C = data.draw(st.sampled_from((2, 3)), label="C")
    S = data.draw(st.sampled_from((6, 8)), label="S")
    return Ctx(group, kind, C, S)


def _filter_known(out: Outcome, known: list[str | None]) -> list[str]:
    """Refutations not explained by a known discrepancy."""
    return [
        msg for msg, i in zip(out.refuted, out.refuted_at) if known[i] is None or known[i] in FIXED
    ]


@pytest.mark.parametrize(
    ("family", "kind"), FAMILY_KINDS, ids=[f"{f}-{k}" for f, k in FAMILY_KINDS]
)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_rule_family(family: str, kind: str, data: Any) -> None:
    """One drawn configuration of every operator of the family, one certify call; every
    certified output must pass the oracle."""
    ctx = _draw_ctx(data, kind, FAMILY_KINDS.index((family, kind)))
    cases = _cases(family, kind)
    cfgs = [c.draw(Draw(data, c.key), ctx) for c in cases]
    known = [c.known(cfg, ctx) if c.known else None for c, cfg in zip(cases, cfgs)]
    labels = [f"{c.key} {cfg}" for c, cfg in zip(cases, cfgs)]
    nets = [c.build(cfg, ctx) for c, cfg in zip(cases, cfgs)]
    for n, c in zip(nets, cases):
        n.isolate = not c.functional
    out = run_networks(
        nets,
        labels,
        [c.functional for c in cases],
        ctx,
        seed=data.draw(st.integers(0, 2**16), label="seed"),
    )
    problems = _filter_known(out, known)
    assert not problems, "\n".join(problems)


_BUNDLES = expectation_bundles(everything=LONG)
_BUNDLE_IDS = sorted(_BUNDLES)


_EMITTED: dict[int, tuple[Any, dict[str, set[str]]]] = {}


def _emitted_by(cert: Any, index: int) -> set[str]:
    """The ATen operators the network ``nets.<index>`` of a bundle ran."""
    if id(cert) not in _EMITTED or _EMITTED[id(cert)][0] is not cert:
        table: dict[str, set[str]] = {}
        for r in cert.records:
            if r.target.startswith("aten::") and r.module.startswith("nets."):
                table.setdefault(r.module.split(".")[1], set()).add(base_name(r.target))
        _EMITTED.clear()
        _EMITTED[id(cert)] = (cert, table)
    return _EMITTED[id(cert)][1].get(str(index), set())


@pytest.mark.parametrize(
    "bundle", _BUNDLE_IDS, ids=["-".join(str(p) for p in b if p != "") for b in _BUNDLE_IDS]
)
def test_rules_decide(bundle: tuple[str, str, int, int, str]) -> None:
    """Every rule certifies a configuration it must certify and refuses one it must refuse
    (so a rule that denies everything, or certifies everything, fails); certified ones
    pass the oracle; each "must" configuration reaches the operator's own rule."""
    entries = _BUNDLES[bundle]
    group, kind, C, S, _ = bundle
    problems = run_expectations(entries, Ctx(group, kind, C, S))
    assert not problems, "\n".join(problems)


def test_every_rule_decides_both_ways() -> None:
    for c in CASES.values():
        assert c.must, f"{c.key}: no configuration that must be certified"
        assert c.must_not, f"{c.key}: no configuration that must not be certified"
        assert c.draw is not None and c.build is not None


@pytest.mark.parametrize("random_ops", [False, True], ids=["deterministic", "random"])
def test_refused_operators(random_ops: bool) -> None:
    """A network using a deliberately refused operator is unverified, for that reason."""
    ctx = Ctx("c4", "grid", 3, 6)
    keys = [
        k for k in REFUSED if (k in _RANDOM_REFUSED) == random_ops and k != "aten::empty_strided"
    ]
    out = run_bundle([REFUSED[k][1](ctx) for k in keys], keys, ctx, whole_model_may_fail=random_ops)
    problems = list(out.refuted)
    for i, key in enumerate(keys):
        infos = out.infos[i]
        if not any(info.verdict == Status.UNVERIFIED for info in infos):
            problems.append(f"{key}: a network using it is {describe(infos)}, not unverified")
        elif not random_ops:
            name = base_name(key).split("::")[1]
            reasons = " ".join(str(info.reason) for info in infos)
            if name not in reasons and not (key == "aten::unique" and "_unique2" in reasons):
                problems.append(f"{key}: unverified for another reason: {reasons}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_pointwise_family(kind: str, data: Any) -> None:
    """Pointwise-tagged operators with broadcast operands: moving ones, invariant ones,
    per-channel constants, position tables (a radial table is invariant under rotations
    only), scalars; every certified output must pass the oracle."""
    ctx = _draw_ctx(data, kind, 2 + KINDS.index(kind))
    cfgs = [_pointwise_draw(Draw(data, f"net{i}"), ctx) for i in range(8)]
    out = run_bundle(
        [_pointwise_build(cfg, ctx) for cfg in cfgs],
        [str(cfg) for cfg in cfgs],
        ctx,
        seed=data.draw(st.integers(0, 2**16), label="seed"),
    )
    assert not out.refuted, "\n".join(out.refuted)
    stray = {
        r.target
        for r in out.cert.records
        if r.target.startswith("aten::")
        and r.status in ("equivariant", "invariant", "broken")
        and not is_pointwise_target(r.target)
        and base_name(r.target) not in _POINTWISE_HELPERS
    }
    assert not stray, f"operators that are not pointwise-tagged: {stray}"


_POINTWISE_HELPERS = {
    "aten::flip",
    "aten::mean",
    "aten::roll",
    "aten::expand",
    "aten::clone",
    "aten::_to_copy",
    "aten::_assert_tensor_metadata",
}


@pytest.mark.parametrize("group", GROUPS)
def test_pointwise_decides(group: str) -> None:
    for kind in KINDS:
        chosen = [(e, must) for e, must in POINTWISE_EXPECT if e.group == group and e.kind == kind]
        if not chosen:
            continue
        ctx = Ctx(group, kind, 3, 6)
        out = run_bundle(
            [_pointwise_build(e.cfg, ctx) for e, _ in chosen], [str(e.cfg) for e, _ in chosen], ctx
        )
        problems = list(out.refuted)
        for i, (e, must) in enumerate(chosen):
            certified = all(info.verdict.certified for info in out.infos[i])
            if certified != must:
                problems.append(
                    f"{e.cfg} under {group} ({kind}) must {'' if must else 'not '}be certified: {describe(out.infos[i])}"
                )
        assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the oracle itself


def test_oracle_action_matches_the_library() -> None:
    """The oracle's own action (roll / rot90 / flip) is the library's action, element for element."""
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float64).reshape(2, 3, 6, 6)
    tokens = x.flatten(2).transpose(1, 2)
    for name in GROUPS:
        group = group_from_name(name, (6, 6))
        for v in oracle_elements(name, 6, seed=3):
            g = group.element(v)
            assert torch.equal(act_grid(name, v, x), GridField().act(group, g, x)), (name, v)
            assert torch.equal(
                act_tokens(name, v, tokens, 6), TokenField((6, 6)).act(group, g, tokens)
            ), (name, v)


def test_oracle_refutes_a_wrong_claim() -> None:
    """The oracle is not vacuous: a transposed output is not moved like the input."""
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    ctx = Ctx("c4")
    for v in (1, 3):  # (a half turn commutes with transposition)
        moved = act_input(ctx, v, x)
        assert rel_error(moved.transpose(-1, -2), act_grid("c4", v, x.transpose(-1, -2))) > TOL


# ----------------------------------------------------------------------------- discrepancies found


def _known_repro(key: str) -> tuple[nn.Module, Ctx, str]:
    """A minimal network for each discrepancy: (network, input, "sound" or "complete")."""
    grid = Ctx("translations", "grid", 3, 6)
    if key == "msort-dim":  # sorts every image row: not translation-equivariant
        return fn(lambda x: torch.msort(x.transpose(0, 3)).transpose(0, 3)), grid, "sound"
    if key == "topk-unsorted":
        return (
            fn(lambda x: x.topk(3, dim=-1, sorted=False).values.mean(2, keepdim=True)),
            grid,
            "sound",
        )
    if key == "inner-as-matmul":  # sum_w x[..., w] c[w], averaged: a position-weighted sum
        return (
            Net(lambda m, x: torch.inner(x, m.c.expand(6, 6)).mean((-1, -2)), {"c": const(6)}),
            grid,
            "sound",
        )
    if key == "value-chaining":
        ramp = 1 + 5e-10 * torch.arange(36, dtype=torch.float64).view(6, 6)
        return Net(lambda m, x: x + m.p * m.ramp, {"p": const(())}, {"ramp": ramp}), grid, "sound"
    if key == "uninitialised-constant":
        return REFUSED["aten::empty_strided"][1](grid), grid, "sound"
    p4m = Ctx("p4m", "grid", 3, 6)
    if key == "pool1d-with-indices":
        return (
            fn(lambda x: F.max_pool1d(x.flatten(2), 1, return_indices=True)[0].view_as(x)),
            p4m,
            "complete",
        )
    if key == "avg-pool1d-divisor":
        return fn(lambda x: F.avg_pool1d(x.flatten(2), 1).view_as(x)), p4m, "complete"
    if key == "native-dropout-p":
        return fn(lambda x: torch.native_dropout(x, 0.3, False)[0]), p4m, "complete"
    if key == "scalar-contraction":
        return fn(lambda x: torch.dot(x.flatten(), x.flatten())), Ctx("c4"), "complete"
    if (
        key == "value-bins-scale"
    ):  # channel 0 of the table is large, channel 1 a ramp 1e-7 relative per position
        ramp = 1 + 1e-7 * torch.arange(36, dtype=torch.float64).view(6, 6)

        def f(m: Net, x: torch.Tensor) -> torch.Tensor:
            table = torch.stack([m.p[0] * 1e6 * torch.ones_like(m.ramp), m.p[1] * m.ramp])
            return (x + table)[:, 1:2]

        return (
            Net(f, {"p": torch.ones(2)}, {"ramp": ramp}),
            Ctx("translations", "grid", 2, 6),
            "sound",
        )
    if key == "type-as-operand":
        return (
            Net(
                lambda m, x: x.type_as(m.like),
                buffers={"like": torch.randn(1, 1, 6, 6, dtype=torch.float64)},
            ),
            Ctx("c4"),
            "complete",
        )
    raise KeyError(key)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(
            k, marks=pytest.mark.xfail(strict=k != "uninitialised-constant", reason=KNOWN[k])
        )
        for k in KNOWN
        if k not in FIXED
    ],
)
def test_known_discrepancy(key: str) -> None:
    """Each discrepancy this file found, as a minimal network; xfail until it is fixed."""
    net, ctx, kind = _known_repro(key)
    for attempt in range(5 if key == "uninitialised-constant" else 1):
        out = run_bundle([net], [key], ctx, seed=attempt, whole_model_may_fail=True)
        if kind == "sound":
            assert not out.refuted, "\n".join(out.refuted)
            if key == "uninitialised-constant":
                assert not out.infos[0][0].verdict.certified, "uninitialised memory certified"
        else:
            assert all(i.verdict.certified for i in out.infos[0]), describe(out.infos[0])


@pytest.mark.parametrize("key", sorted(FIXED))
def test_fixed_discrepancy_stays_fixed(key: str) -> None:
    """The minimal network of each fixed discrepancy: sound now, and certified where it should be."""
    net, ctx, kind = _known_repro(key)
    out = run_bundle([net], [key], ctx, seed=0, whole_model_may_fail=True)
    if kind == "sound":
        assert not out.refuted, "\n".join(out.refuted)
    else:
        assert all(i.verdict.certified for i in out.infos[0]), describe(out.infos[0])


# ----------------------------------------------------------------------------- the meta-test

#: Every key of RULES: the property test that covers it, or why it is refused.
TESTED: dict[str, str] = {
    **{
        c.key: f"test_rule_family[{c.family}-{c.kinds[0]}] + test_rules_decide"
        for c in CASES.values()
    },
    **{k: f"refused: {reason} (test_refused_operators)" for k, (reason, _) in REFUSED.items()},
}


def test_every_rule_has_a_property_test() -> None:
    assert set(RULES) == set(TESTED), {
        "without a test": sorted(set(RULES) - set(TESTED)),
        "not a rule": sorted(set(TESTED) - set(RULES)),
    }
    assert not set(CASES) & set(REFUSED)
    for key, target in TESTED.items():
        if target.startswith("refused: "):
            assert key in REFUSED
            continue
        name = target.split("[")[0]
        assert callable(globals().get(name)), f"{key}: {target} is not a test of this file"
        c = CASES[key]
        assert (c.family, c.kinds[0]) in FAMILY_KINDS
    assert set(NOT_EMITTED) <= set(CASES)
