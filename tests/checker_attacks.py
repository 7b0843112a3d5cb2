"""Networks written to fool groupattn.check.certify, each with an independent float64 oracle.

Written by a reviewer who saw only the public documentation (the adversarial review of
the export-based checker); tests/test_check_attacks.py runs every case.

Each case builds a model, certifies it, then measures equivariance itself in float64
with plain torch ops (torch.roll for translations, torch.rot90/flip for C4/D4, index
permutation for G-sets), over every element of the (small) group. For the cases whose
cause is "state that training changes", the oracle is run after that state changed
(one training-mode forward, or a new value of a parameter) -- the certificate had
promised equivariance for every value of the parameters.

A second table lists genuinely equivariant networks that the checker calls *broken*.
"""

import copy
import warnings

import torch
import torch.nn as nn

from groupattn.actions import GridField, GSet, GSetField
from groupattn.canonical import (
    AdaptivePolyphaseDownsample,
    AdaptivePolyphaseUpsample,
    Canonicalized,
    PolyphaseAnchor,
    PolyphaseUnanchor,
)
from groupattn.check import certify
from groupattn.contracts import Contract
from groupattn.groups import FiniteGroup, GroupError, check_group_axioms, group_from_name

warnings.filterwarnings("ignore")

TOL = 1e-6


# --------------------------------------------------------------------------- oracle
def grid_act(name, gv, x):
    """g . x for the built-in groups (checked against GridField().act for all elements)."""

    def point(t, h):
        r, m = h % 4, h // 4
        if m:
            t = torch.flip(t, (-1,))
        return torch.rot90(t, r, (-2, -1))

    if name == "translations":
        return torch.roll(x, gv, (-2, -1))
    if name in ("c4", "d4"):
        return point(x, gv)
    t, h = gv
    return torch.roll(point(x, h), t, (-2, -1))


def rel(a, b):
    return ((a - b).norm() / (b.norm() + 1e-300)).item()


def oracle(
    model,
    x,
    group="translations",
    invariant=False,
    act=None,
    elements=None,
    grad=False,
    train=False,
    copy_model=True,
):
    """max over elements of ||f(g x) - g f(x)|| / ||g f(x)|| in float64 (every tensor output)."""
    m = copy.deepcopy(model) if copy_model else model
    m = m.double()
    m.train(train)
    xd = x.double()
    G = group_from_name(group, x.shape) if isinstance(group, str) else group
    els = G.elements() if elements is None else elements
    act = act or (lambda g, t: grid_act(group, g.value, t))

    def leaves(o):
        if isinstance(o, torch.Tensor):
            return [o]
        if isinstance(o, Canonicalized):
            return [o.output]
        if isinstance(o, dict):
            return [t for v in o.values() for t in leaves(v)]
        if isinstance(o, (list, tuple)):
            return [t for v in o for t in leaves(v)]
        return []

    with torch.set_grad_enabled(grad):
        base = leaves(m(xd.clone()))
        worst = 0.0
        for g in els:
            moved = leaves(m(act(g, xd.clone())))
            for b, mv in zip(base, moved):
                worst = max(worst, rel(mv, b if invariant else act(g, b)))
    return worst


def self_test():
    x = torch.randn(2, 3, 8, 8)
    for name in ["translations", "c4", "d4", "p4", "p4m"]:
        G = group_from_name(name, x.shape)
        assert all(
            torch.equal(GridField().act(G, g, x), grid_act(name, g.value, x)) for g in G.elements()
        ), name


# --------------------------------------------------------------------------- cases
CASES = []


def case(cause):
    def deco(fn):
        CASES.append((cause, fn))
        return fn

    return deco


X = None  # set in main: torch.randn(2, 3, 8, 8)


def verdict(model, x, group, **kw):
    return certify(model, x, group, **kw).verdict.value


def verdict_verify(model, x, group, **kw):
    try:
        return certify(copy.deepcopy(model), x, group, verify=True, **kw).verdict.value
    except Exception as e:  # pragma: no cover
        return f"exc {type(e).__name__}"


# A. What was traced is not what runs -------------------------------------------------
@case("A trace != runtime")
def python_counter_state():
    """Python-side state (a call counter): the traced call is clean, later calls are not."""

    class Warmup(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x if self.calls <= 3 else x.flip(-1)  # e.g. 'switch on after warm-up'

    m = Warmup()
    v = verdict(m, X, "translations")
    vv = verdict_verify(Warmup(), X, "translations")
    return v, vv, oracle(m, X, "translations", copy_model=False)


@case("A trace != runtime")
def detects_export():
    class Sneaky(nn.Module):
        def forward(self, x):
            if torch.compiler.is_exporting():
                return x
            return x.cumsum(-1)

    m = Sneaky()
    return verdict(m, X, "translations"), verdict_verify(m, X, "translations"), oracle(m, X)


@case("A trace != runtime")
def grad_mode_branch():
    """certify traces with grad disabled; with grad enabled (training) a position table is added."""

    class GradBranch(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.randn(3, 8, 8))

        def forward(self, x):
            return x + self.pos if torch.is_grad_enabled() else x

    m = GradBranch()
    return (
        verdict(m, X, "translations"),
        verdict_verify(m, X, "translations"),
        oracle(m, X, grad=True),
    )


@case("A trace != runtime")
def train_mode_branch():
    """certify evaluates eval mode only (documented); the train-mode network is broken."""

    class TrainOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.randn(3, 8, 8))

        def forward(self, x):
            return x + self.pos if self.training else x

    m = TrainOnly()
    return (
        verdict(m, X, "translations"),
        verdict_verify(m, X, "translations"),
        oracle(m, X, train=True),
    )


# B. Buffers / frozen tensors judged by their current value -----------------------------
@case("B state judged by current value")
def batchnorm1d_over_pixels():
    """BatchNorm1d(affine=False) over flattened pixels: running stats start uniform (0/1)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3 * 64, affine=False)

        def forward(self, x):
            return self.bn(x.flatten(1)).view_as(x)

    m = Net()
    v, vv = verdict(m, X, "translations"), verdict_verify(m, X, "translations")
    m.train()
    m(torch.randn(16, 3, 8, 8) + torch.linspace(0, 1, 8))  # one training step updates the stats
    m.eval()
    return v, vv, oracle(m, X)


@case("B state judged by current value")
def ema_position_buffer():
    class EMA(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(3, 8, 8))

        def forward(self, x):
            if self.training:
                with torch.no_grad():
                    self.mean.mul_(0.9).add_(0.1 * x.mean(0))
            return x - self.mean

    m = EMA()
    v, vv = verdict(m, X, "translations"), verdict_verify(m, X, "translations")
    m.train()
    m(torch.randn(16, 3, 8, 8))
    m.eval()
    return v, vv, oracle(m, X)


@case("B state judged by current value")
def frozen_parameter():
    """A Parameter with requires_grad=False is taken as a constant ('Parameters are treated as free')."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.zeros(3, 8, 8), requires_grad=False)

        def forward(self, x):
            return x + self.pos

    m = Net()
    v, vv = verdict(m, X, "translations"), verdict_verify(m, X, "translations")
    m.requires_grad_(True)  # fine-tuning unfreezes it ...
    with torch.no_grad():
        m.pos.add_(torch.randn(3, 8, 8))  # ... and training moves it
    return v, vv, oracle(m, X)


@case("B state judged by current value")
def buffer_aliasing_parameter():
    """A buffer sharing storage with a trainable Parameter is read as a constant."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.zeros(3, 8, 8))
            self.register_buffer("pos_view", self.pos.data, persistent=False)

        def forward(self, x):
            return x + self.pos_view

    m = Net()
    v, vv = verdict(m, X, "translations"), verdict_verify(m, X, "translations")
    with torch.no_grad():
        m.pos.add_(torch.randn(3, 8, 8))  # another value of the trainable parameter
    return v, vv, oracle(m, X)


# C. Trust boundaries ------------------------------------------------------------------
class _Liar(nn.Module):
    def __init__(self, with_pos):
        super().__init__()
        self.with_pos = with_pos
        self.pos = nn.Parameter(torch.randn(3, 8, 8))

    def contract(self, group, input_type=None):
        t = input_type or GridField()
        return Contract.equivariant(t, t)

    def forward(self, x):
        y = x.cumsum(-1)  # no rule -> body "unverified"
        return y + self.pos if self.with_pos else y  # a break the checker CAN see


class _Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


@case("C trust")
def lying_contract():
    m = _Wrap(_Liar(False))
    return verdict(m, X, "translations"), verdict_verify(m, X, "translations"), oracle(m, X)


@case("C trust")
def contract_hides_provable_break():
    """Body has an unverifiable op AND a provable break (x + position table): contract wins."""
    m = _Wrap(_Liar(True))
    return verdict(m, X, "translations"), verdict_verify(m, X, "translations"), oracle(m, X)


class _AnchorNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.unanchor = PolyphaseUnanchor()

    def forward(self, x):
        c = self.anchor(x)
        return self.unanchor(c.output, c.frame)


@case("C trust")
def hook_on_library_leaf():
    m = _AnchorNet()
    m.anchor.register_forward_hook(
        lambda mod, args, out: Canonicalized(out.output.flip(-1), out.frame, out.margin)
    )
    return verdict(m, X, "translations"), verdict_verify(m, X, "translations"), oracle(m, X)


@case("C trust")
def patched_forward_on_library_leaf():
    """Instance-level forward on a canonicalizer is ignored -- and certify DELETES it."""
    m = _AnchorNet()
    m.anchor.forward = lambda x: Canonicalized(
        x.flip(-1), torch.zeros(x.shape[0], 2, dtype=torch.long), torch.ones(x.shape[0])
    )
    err = oracle(m, X)  # the user's model, before certify touches it
    vv = verdict_verify(m, X, "translations")
    v = verdict(m, X, "translations")
    still = "forward" in m.anchor.__dict__
    return v, vv, err, f"after certify the patch is {'kept' if still else 'GONE (model mutated)'}"


# D. Groups ---------------------------------------------------------------------------
class KleinFour(FiniteGroup):
    name = "V4"

    def __init__(self, gens):
        super().__init__()
        self._gens = gens

    def key(self):
        return ("V4", tuple(self._gens))

    def _identity(self):
        return (0, 0)

    def _compose(self, a, b):
        return (a[0] ^ b[0], a[1] ^ b[1])

    def _inverse(self, a):
        return a

    def _validate(self, value):
        if tuple(value) not in {(0, 0), (0, 1), (1, 0), (1, 1)}:
            raise GroupError(f"V4: bad {value!r}")
        return tuple(value)

    def generators(self):
        return [self.element(v) for v in self._gens]

    def _enumerate(self):
        return [(0, 0), (1, 0), (0, 1), (1, 1)]


@case("D groups")
def non_generating_generators():
    """User FiniteGroup whose generators() miss one generator; check_group_axioms says ok."""
    V = KleinFour([(1, 0)])
    assert check_group_axioms(V).ok
    corners = GSet(
        V,
        4,
        lambda g: [2 * (y ^ g.value[0]) + (x ^ g.value[1]) for y in range(2) for x in range(2)],
    )
    field = GSetField(corners)

    class XWeights(nn.Module):  # weights depend on the x coordinate of the corner
        def forward(self, t):
            return t * torch.tensor([1.0, 2.0, 1.0, 2.0], dtype=t.dtype)[:, None]

    def act(g, t):
        perm = torch.as_tensor(corners.permutation(g))
        out = torch.empty_like(t)
        out[:, perm] = t
        return out

    xt = torch.randn(2, 4, 3)
    m = XWeights()
    return (
        verdict(m, xt, V, input_type=field),
        verdict_verify(m, xt, V, input_type=field),
        oracle(m, xt, V, act=act, elements=V.elements()),
    )


# E. Documented exceptions the verdict word hides -------------------------------------
@case("E canonicalizer ties/frames")
def manufactured_ties():
    """The network itself creates exact polyphase ties on EVERY input; verify excuses them."""

    class Tie(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = AdaptivePolyphaseDownsample(2)
            self.up = AdaptivePolyphaseUpsample(2)

        def forward(self, x):
            y = torch.cat([x, x.roll(1, -1)], 1)  # phases (py,0) and (py,1) have equal norms
            c = self.down(y)
            return self.up(c.output, c.frame)

    m = Tie()
    return verdict(m, X, "translations"), verdict_verify(m, X, "translations"), oracle(m, X)


@case("E canonicalizer ties/frames")
def output_left_in_frame():
    """Status 'equivariant' although only equivariant up to a data-dependent shift (output_frame)."""

    class A(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = PolyphaseAnchor(2)

        def forward(self, x):
            return self.a(x).output

    m = A()
    c = certify(m, X, "translations")
    return (
        c.verdict.value,
        verdict_verify(m, X, "translations"),
        oracle(m, X),
        f"output_frame={c.output_frame}",
    )


# --------------------------------------------------------------------------- genuine, called broken
def _fn(f):
    class M(nn.Module):
        def forward(self, x):
            return f(x)

    return M()


class _TwoAnchors(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = PolyphaseAnchor(2)
        self.u = PolyphaseUnanchor()

    def forward(self, x):
        c, d = self.a(x), self.a(2 * x)  # same frames, always
        return self.u(c.output + d.output, c.frame)


GENUINE = [
    (
        "sum over W then mean over H (c4, invariant)",
        _fn(lambda x: x.sum(dim=3, keepdim=True).mean((-2, -1))),
        "c4",
        True,
    ),
    ("amax(-1).amax(-1) (c4, invariant)", _fn(lambda x: x.amax(-1).amax(-1)), "c4", True),
    (
        "sort(-1).values then mean (c4, invariant)",
        _fn(lambda x: x.sort(-1).values.mean((-2, -1))),
        "c4",
        True,
    ),
    (
        "4-neighbour sum via rolls (p4)",
        _fn(lambda x: x.roll(1, -1) + x.roll(-1, -1) + x.roll(1, -2) + x.roll(-1, -2)),
        "p4",
        False,
    ),
    ("anchor(x).output + anchor(2x).output, unanchored", _TwoAnchors(), "translations", False),
]


def main():
    global X
    torch.manual_seed(0)
    self_test()
    X = torch.randn(2, 3, 8, 8)
    print(
        f"{'cause':30s} {'case':34s} {'certify':12s} {'verify=True':12s} {'oracle err':>10s}  result"
    )
    n_false = 0
    for cause, fn in CASES:
        torch.manual_seed(0)
        try:
            r = fn()
        except Exception as e:  # keep going
            print(f"{cause:30s} {fn.__name__:34s} EXC {type(e).__name__}: {e}")
            continue
        v, vv, err = r[:3]
        extra = r[3] if len(r) > 3 else ""
        false = v in ("equivariant", "invariant") and err > TOL
        n_false += false
        print(
            f"{cause:30s} {fn.__name__:34s} {v:12s} {vv:12s} {err:10.2e}  "
            f"{'FALSE CERTIFICATE' if false else 'ok'} {extra}"
        )
    print(f"\n{n_false} false certificates out of {len(CASES)} cases\n")
    print(f"{'genuine network':55s} {'group':13s} {'certify':10s} {'oracle err':>10s}")
    for name, m, group, inv in GENUINE:
        v = verdict(m, X, group)
        err = oracle(m, X, group, invariant=inv)
        print(
            f"{name:55s} {group:13s} {v:10s} {err:10.2e}"
            f"  {'WRONGLY BROKEN' if v == 'broken' and err < 1e-9 else ''}"
        )


if __name__ == "__main__":
    main()
