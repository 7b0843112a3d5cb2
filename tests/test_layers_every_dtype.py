"""Every public layer keeps its contract's promise in float32 and in float64.

For each entry of the layer catalogue ``LAYERS`` (``tests/test_edge_inputs.py``, whose
coverage test fails when a public layer with a batch axis is missing) one of two tables
below says what to test:

- ``PROMISES``: the groups under which the layer's contract promises something
  (equivariant, invariant or canonicalizing), with the kind promised. The layer is
  measured with [`assert_equivariant`][groupattn.testing.assert_equivariant] (field types
  from the contract, group actions in float64) at
  [`default_tolerance`][groupattn.testing.default_tolerance] of the dtype, on every
  element of a group of at most ``SMALL_GROUP`` elements and on
  [`representative_elements`][groupattn.testing.representative_elements] of a larger one.
- ``NO_PROMISE``: layers whose contract breaks under every natural group, with the
  reason; the test asserts that the contract says so.

Every test runs once per dtype through the session-wide ``float_dtype`` fixture. The
weights are perturbed away from their initialisation (zero-initialised biases and
position tables included), since a promise must hold for trained weights too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_edge_inputs import LAYERS
from torch import nn

from groupattn.actions import FieldType, SetField
from groupattn.contracts import Status, contract_of
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    Group,
    GroupElement,
    SymmetricGroup,
    TorusTranslations,
    p4,
    p4m,
)
from groupattn.testing import (
    assert_equivariant,
    equivariance_error,
    representative_elements,
)

#: Groups of at most this many elements are tested on every element.
SMALL_GROUP = 64
#: Extra seeded samples (after the generators) for a larger group.
SAMPLES = 8
#: Relative error above which a layer whose contract breaks visibly breaks.
BREAK_THRESHOLD = 1e-3

EQ, INV, CANON = Status.EQUIVARIANT, Status.INVARIANT, Status.CANONICALIZING
C4, D4 = CyclicGroup(4), DihedralGroup(4)
#: Translations of the 4×4 token grid of the token layers.
TOKENS = TorusTranslations(4, 4)
#: Translations of that grid by multiples of 2 (what stride-2 layers keep exactly).
TOKENS_BY_2 = TorusTranslations(2, 2, stride=2)


@dataclass(frozen=True)
class Promise:
    """What a layer's contract promises under one group.

    Attributes
    ----------
    group
        The acting group.
    kind
        The contract's kind under ``group`` (equivariant, invariant, canonicalizing).
    input_type
        The input field type to ask the contract for, for layers that state none of
        their own (``None``: the layer's declared input type).
    """

    group: Group
    kind: Status
    input_type: FieldType | None = None

    @property
    def id(self) -> str:
        """A short test id: the group's name."""
        return self.group.name


@dataclass(frozen=True)
class NoPromise:
    """A layer whose contract promises nothing under any natural group.

    Attributes
    ----------
    reason
        Why, in plain words.
    match
        A phrase the contract's own reason contains under each group.
    groups
        The natural groups of the layer's input, under each of which the contract must
        say *broken*.
    """

    reason: str
    match: str
    groups: tuple[Group, ...]


#: Layer name → the groups under which its contract promises something.
PROMISES: dict[str, tuple[Promise, ...]] = {
    "AttentionPooling": (Promise(TOKENS, INV),),
    "GlobalSelfAttention": (Promise(TOKENS, EQ),),
    "GroupSelfAttention": (Promise(p4(4), EQ),),
    "GroupSelfAttention-local": (Promise(p4m(5), EQ), Promise(D4, EQ)),
    "LiftingSelfAttention": (Promise(p4(5), EQ), Promise(C4, EQ)),
    "LiftingSelfAttention-local": (Promise(p4(6), EQ), Promise(C4, EQ)),
    "LiftingSelfAttention-local-wide": (Promise(p4(6), EQ), Promise(C4, EQ)),
    "LiftingSelfAttention-local-query": (Promise(p4(6), EQ), Promise(C4, EQ)),
    "MeanPooling": (Promise(TOKENS, INV),),
    # No grid: the contract needs an input type; the mean is symmetric in the 5 tokens.
    "MeanPooling-any": (Promise(SymmetricGroup(5), INV, SetField(5)),),
    "OrbitalAttention": (Promise(SymmetricGroup(4), EQ),),
    "OrbitalAttention-channels": (Promise(SymmetricGroup(3), EQ),),
    "SpatialReductionAttention": (Promise(TOKENS, EQ),),
    "WindowAttention": (Promise(TOKENS, EQ),),
    # Not anchored: only shifts by multiples of the window size 2 move the windows.
    "WindowAttention-plain": (Promise(TOKENS_BY_2, EQ),),
    # Token-wise: equivariant under every permutation of the 16 tokens (no grid stated).
    "MLP": (Promise(SymmetricGroup(16), EQ, SetField(16)),),
    "ClassToken": (Promise(TOKENS, EQ),),
    "ClassTokenReadout": (Promise(TOKENS, INV),),
    "GroupBlock": (Promise(p4(5), EQ), Promise(C4, EQ)),
    "GroupGlobalPool": (Promise(p4(4), INV),),
    "OrbitPooledLinear": (Promise(p4m(4), INV), Promise(D4, INV)),
    "OrbitPooledLinear-mean": (Promise(p4(5), INV), Promise(C4, INV)),
    "GroupLayerNorm": (Promise(p4m(4), EQ), Promise(D4, EQ)),
    "GroupMLP": (Promise(p4(4), EQ),),
    "GroupPooling": (Promise(p4(4), EQ),),
    # Stride 2: rotations about the centre, and shifts by multiples of 2 (4×4 → 2×2).
    "LiftedAvgPool": (Promise(C4, EQ), Promise(TOKENS_BY_2, EQ)),
    # Patch 2 on an 8×8 image: D4 about the centre, and shifts by multiples of 2 or 4.
    "LiftedPatchEmbedding": (
        Promise(D4, EQ),
        Promise(TorusTranslations(4, 4, stride=2), EQ),
        Promise(TorusTranslations(2, 2, stride=4), EQ),
    ),
    # Polyphase: p4 of the 4×4 grid up to a frame in p4 of the 2×2 grid; exact for even shifts.
    "LiftedPolyphaseDownsample": (Promise(p4(4), CANON), Promise(TOKENS_BY_2, EQ)),
    "LiftingConvolution": (Promise(p4(5), EQ), Promise(C4, EQ)),
    # Anchored patch 2 on 8×8: every shift up to a frame; shifts by 2 exactly.
    "PatchEmbedding": (
        Promise(TorusTranslations(8, 8), CANON),
        Promise(TorusTranslations(4, 4, stride=2), EQ),
    ),
    # Anchor stride 4: every shift up to a frame; shifts by 4 exactly.
    "PatchEmbedding-smooth": (
        Promise(TorusTranslations(8, 8), CANON),
        Promise(TorusTranslations(2, 2, stride=4), EQ),
    ),
    # Anchored 2×2 merging: every shift up to a frame; shifts by 2 exactly.
    "PatchMerging": (Promise(TOKENS, CANON), Promise(TOKENS_BY_2, EQ)),
    "SymmetricConvStem": (Promise(p4m(5), EQ), Promise(D4, EQ)),
    "TransformerBlock": (Promise(TOKENS, EQ),),
    # Circular 3×3 (dilation 2) group convolution of C4-lifted fields on 5×5: all of p4.
    "GroupConvolution": (Promise(p4(5), EQ), Promise(C4, EQ)),
    # 2×2 windows (shifted by 1) of a 4×4 C4-lifted field: C4 about the centre, shifts by 2.
    "GroupWindowAttention": (Promise(C4, EQ), Promise(TOKENS_BY_2, EQ)),
    "GroupWindowBlock": (Promise(D4, EQ), Promise(TOKENS_BY_2, EQ)),
    # 2×2 stride-2 group convolution, 4×4 → 2×2: C4 about the centre, shifts by 2.
    "GroupPatchMerging": (Promise(C4, EQ), Promise(TOKENS_BY_2, EQ)),
    # Nearest ×2, 4×4 → 8×8: C4 about the centre, every shift (by 2 pixels of the output).
    "LiftedUpsample": (Promise(C4, EQ), Promise(TOKENS, EQ)),
    "ConvPositionalEncoding": (Promise(TOKENS, EQ),),
    # One learned vector per C4-orbit of (group element, position): moves with rotations about the centre.
    "LiftedOrbitPositionalEncoding": (Promise(C4, EQ), Promise(CyclicGroup(2), EQ)),
    # RoPE with torus frequencies: q·k depends on (j − i) mod the grid only.
    "RotarySelfAttention": (Promise(TOKENS, EQ), Promise(TOKENS_BY_2, EQ)),
    # Averages a plain CNN over all of C4: invariant under C4 and its subgroup C2.
    "FrameAveraging": (Promise(C4, INV), Promise(CyclicGroup(2), INV)),
    # Averages a plain convolution over all of D4 (one call per element): equivariant, also under C4.
    "FrameAveraging-equivariant": (Promise(D4, EQ), Promise(C4, EQ)),
    # Arg-max over all of C4 (trivial output group), then a plain CNN: invariant up to ties.
    "Canonicalized": (Promise(C4, INV),),
}

#: Layers whose contract is *unverified* by design, with the phrase of its reason: a
#: learned canonicalizer's scorer is a user network the checker does not check for
#: per-sample evaluation (a scorer that reads the batch breaks the arg-max).
UNVERIFIED_BY_DESIGN: dict[str, tuple[Group, str]] = {
    "Canonicalized-learned": (D4, "per-sample evaluation is not checked"),
    "LearnedCanonicalizer": (C4, "per-sample evaluation is not checked"),
}

#: Layer name → why its contract promises nothing under any natural group.
NO_PROMISE: dict[str, NoPromise] = {
    "GlobalSelfAttention-prefix": NoPromise(
        "the clipped (non-circular) relative position bias is not constant on the "
        "translation orbitals of the torus",
        "clipped",
        (TOKENS, TOKENS_BY_2),
    ),
    "AbsolutePositionalEncoding": NoPromise(
        "an absolute position embedding is added: it does not move with the tokens",
        "absolute positional encoding",
        (TOKENS, TOKENS_BY_2),
    ),
    "LiftedAbsolutePositionalEncoding": NoPromise(
        "an absolute position embedding is added: it moves with neither translations nor rotations",
        "absolute positional encoding",
        (TOKENS, TOKENS_BY_2, C4, p4(4)),
    ),
    "SinusoidalPositionalEncoding": NoPromise(
        "a fixed absolute (sinusoidal) code is added: it does not move with the tokens",
        "absolute (sinusoidal) encoding",
        (TOKENS, TOKENS_BY_2),
    ),
}

_CATALOGUE = {name: (build, make) for name, build, make in LAYERS}
PROMISE_CASES = [(name, promise) for name, promises in PROMISES.items() for promise in promises]
PROMISE_IDS = [f"{name}-{promise.id}" for name, promise in PROMISE_CASES]


def _elements(group: Group) -> list[GroupElement]:
    """Every element of a group of order ≤ ``SMALL_GROUP``, else generators and samples."""
    return representative_elements(group, max_all=SMALL_GROUP, samples=SAMPLES, seed=0)


@functools.cache
def _cached_elements(name: str, index: int) -> list[GroupElement]:
    """``_elements`` of the group of ``PROMISES[name][index]``, computed once."""
    return _elements(PROMISES[name][index].group)


def _perturb(layer: nn.Module, seed: int) -> nn.Module:
    """Move every weight away from its initialisation (seeded), zero-initialised ones too."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in layer.parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            parameter.add_(0.5 * noise.to(parameter.dtype))
    return layer


def _layer_and_input(
    name: str, dtype: torch.dtype, batch: int, seed: int
) -> tuple[nn.Module, torch.Tensor]:
    """The catalogue's layer (perturbed, cast to ``dtype``, eval mode) and a seeded input."""
    build, make = _CATALOGUE[name]
    torch.manual_seed(seed)
    layer = _perturb(build(), seed).to(dtype).eval()
    torch.manual_seed(seed + 1)
    x: torch.Tensor = make(batch).to(dtype)
    return layer, x


def _check_promise(
    name: str,
    promise: Promise,
    dtype: torch.dtype,
    batch: int,
    seed: int,
    elements: list[GroupElement] | None = None,
) -> None:
    """Assert that the contract still says ``promise.kind`` and that the layer keeps it.

    Parameters
    ----------
    name, promise
        The catalogue entry and one of its ``PROMISES``.
    dtype, batch, seed
        The layer's and the input's dtype, the batch size, the seed of weights and input.
    elements
        The elements to test (default: ``_elements`` of the group).
    """
    layer, x = _layer_and_input(name, dtype, batch, seed)
    contract = contract_of(layer, promise.group, promise.input_type)
    assert contract.kind == promise.kind, (
        f"{name} under {promise.group.name}: {contract.describe()}"
    )
    elements = _elements(promise.group) if elements is None else elements
    report = assert_equivariant(
        layer, x, promise.group, elements=elements, input_type=promise.input_type
    )
    assert report.dtype == dtype
    assert len(report.errors) == len(set(elements))


@pytest.mark.parametrize(("name", "promise"), PROMISE_CASES, ids=PROMISE_IDS)
def test_layer_keeps_its_promise(name: str, promise: Promise, float_dtype: torch.dtype) -> None:
    _check_promise(name, promise, float_dtype, batch=2, seed=0)


@settings(
    suppress_health_check=[
        *settings().suppress_health_check,
        HealthCheck.function_scoped_fixture,  # float_dtype only picks the dtype
    ]
)
@given(data=st.data())
def test_layer_keeps_its_promise_for_any_batch_and_seed(
    float_dtype: torch.dtype, data: st.DataObject
) -> None:
    name, index = data.draw(
        st.sampled_from([(n, i) for n, ps in PROMISES.items() for i in range(len(ps))]),
        label="case",
    )
    batch = data.draw(st.integers(1, 3), label="batch")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    elements = data.draw(
        st.lists(
            st.sampled_from(_cached_elements(name, index)), min_size=1, max_size=3, unique=True
        ),
        label="elements",
    )
    _check_promise(name, PROMISES[name][index], float_dtype, batch, seed, elements)


@pytest.mark.parametrize("name", sorted(NO_PROMISE))
def test_layer_without_a_promise_says_so(name: str, float_dtype: torch.dtype) -> None:
    entry = NO_PROMISE[name]
    layer, x = _layer_and_input(name, float_dtype, batch=2, seed=0)
    for group in entry.groups:
        contract = contract_of(layer, group)
        assert contract.kind == Status.BROKEN, f"{name} under {group.name}: {contract.describe()}"
        assert entry.match in (contract.reason or ""), contract.describe()
        # ... and the break is real, not merely a conservative contract.
        error = equivariance_error(layer, x, group, elements=_elements(group))
        assert error.max_error > BREAK_THRESHOLD, (
            f"{name} under {group.name}: {error.max_error:.2e}"
        )


def test_every_layer_is_in_exactly_one_table() -> None:
    names = [name for name, _, _ in LAYERS]
    assert len(names) == len(set(names))
    for name in names:
        tables = [name in PROMISES, name in NO_PROMISE, name in UNVERIFIED_BY_DESIGN]
        assert sum(tables) == 1, f"put {name} in PROMISES, NO_PROMISE or UNVERIFIED_BY_DESIGN"
    assert set(PROMISES) | set(NO_PROMISE) | set(UNVERIFIED_BY_DESIGN) == set(names), (
        "a table names a layer not in LAYERS"
    )
    assert all(PROMISES.values()), "every PROMISES entry names at least one group"


def test_promise_ids_are_unique() -> None:
    assert len(PROMISE_IDS) == len(set(PROMISE_IDS))


@pytest.mark.parametrize("name", sorted(UNVERIFIED_BY_DESIGN))
def test_layer_unverified_by_design_says_why(name: str) -> None:
    group, phrase = UNVERIFIED_BY_DESIGN[name]
    layer, _ = _layer_and_input(name, torch.float64, batch=2, seed=0)
    contract = contract_of(layer, group)
    assert contract.kind == Status.UNVERIFIED and phrase in (contract.reason or "")
