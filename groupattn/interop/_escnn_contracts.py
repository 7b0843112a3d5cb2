"""Contracts for escnn's equivariant modules, read from their declared field types.

[`register_escnn_contracts`][groupattn.interop.register_escnn_contracts] registers, with
[`register_contract`][groupattn.contracts.register_contract], one contract per escnn module
class below, and makes ``escnn.nn.GeometricTensor`` a pytree node (its one tensor is the
child, its field type the context) so that the checker can follow GeometricTensors
into and out of escnn modules. Each registered class is kept whole by the checker and
checked by its contract.

What a contract claims, and when (otherwise it is *unverified*, with the reason naming
the module; *broken* where stated):

- The acting group must be a point group ``C_m`` or ``D_m`` acting on the pixel grid
  (``m`` divides 4), rotating and reflecting about the image centre, and a subgroup of
  the module's gspace group (``C_m`` of ``rot2dOnR2(n)`` or ``flipRot2dOnR2(n)``, ``D_m``
  of ``flipRot2dOnR2(n)`` with the default flip axis, ``m | n``). Translations (p4,
  p4m) are not claimed: escnn's zero padding is not circular.
- The module's ``in_type`` and ``out_type`` become [`GridField`][groupattn.actions.GridField]s
  whose channels move by the field types' representations restricted to that group
  (permutation matrices are rounded to exact permutations — escnn builds its regular
  representations through a change of basis). The module must have the exact
  registered class, its own ``forward`` and no hooks (inside a
  ``SequentialModule`` too).
- ``R2Conv``: *equivariant* ``in_type → out_type`` if ``groups == 1``, the padding
  mode is one of escnn's four (all symmetric about the centre), and its actual filter
  (the cached ``filter`` in eval mode, the expansion of ``weights`` in training mode)
  and bias satisfy the steerability constraint ``K(v) = ρ_out(g) K(g⁻¹v) ρ_in(g)⁻¹``,
  ``ρ_out(g) b = b`` for every generator, up to a relative ``1e-12``. escnn samples its
  basis in float32, so a plain R2Conv meets this only to about ``1e-7``: it is
  *unverified* until [`exact_steerable`][groupattn.interop.exact_steerable] projects its
  basis onto the exactly equivariant filters. With stride ``s``, padding ``p`` and
  effective kernel size ``k`` the declared input type accepts only square grids of side
  ``H`` with ``(H + 2p − k) mod s = 0`` (only then does the rotation about the centre
  map the output's sampling grid onto itself). Under a group that is not a subgroup of
  its gspace's group (e.g. any rotation for ``trivialOnR2``) it is *broken*: its
  kernel is not constrained for those elements.
- ``ReLU``, ``ELU``, ``LeakyReLU``, ``PointwiseNonLinearity`` (relu, elu, sigmoid, tanh):
  *equivariant* ``in_type → in_type`` if every field's representation is a permutation
  representation (the same scalar function on every channel commutes with permuting them)
  and it does not work in place.
- ``NormNonLinearity``, ``NormBatchNorm``, ``IIDBatchNorm2d``: *equivariant* ``in_type →
  out_type`` if every field's representation is orthogonal (norms of fields are
  invariant; the isotropic statistics are invariant).
- ``InnerBatchNorm``: *equivariant* if every field's representation is a permutation
  representation (one mean and variance per field).
- ``GroupPooling`` (max over each field) and ``NormPool`` (norm of each field):
  *equivariant* ``in_type →`` one trivial channel per field, for permutation and
  orthogonal representations respectively.
- ``IdentityModule``: *equivariant* ``in_type → in_type``.
- ``SequentialModule``: the composition of its children's contracts (each child must
  itself carry one of these contracts, and each child's ``in_type`` must be the previous
  child's ``out_type``); the first child that breaks or is unverified decides.

Nothing here imports escnn until a function is called.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._errors import ShapeError
from ..actions import FieldType, GridField, MatrixRepresentation
from ..contracts import Contract, Status, register_contract, registered_contract
from ..groups import CyclicGroup, DihedralGroup, Group, GroupError, PointGroup
from ._escnn import _escnn_group_module, gspace_point_group, to_escnn_element

__all__ = [
    "ESCNN_CONTRACT_CLASSES",
    "FILTER_TOLERANCE",
    "WindowedGridField",
    "escnn_compatibility",
    "escnn_grid_type",
    "exact_steerable",
    "exportable",
    "refresh_filters",
    "register_escnn_contracts",
    "steerability_error",
]

FILTER_TOLERANCE = 1e-12
"""Relative tolerance of the steerability check of an R2Conv's filter and bias."""

ESCNN_CONTRACT_CLASSES = (
    "R2Conv",
    "ReLU",
    "ELU",
    "LeakyReLU",
    "PointwiseNonLinearity",
    "NormNonLinearity",
    "GroupPooling",
    "NormPool",
    "InnerBatchNorm",
    "NormBatchNorm",
    "IIDBatchNorm2d",
    "IdentityModule",
    "SequentialModule",
)
"""Names of the ``escnn.nn`` classes that receive a contract."""

_REGISTERED: list[bool] = []


def _enn() -> Any:
    _escnn_group_module()  # the one clear ImportError when the extra is missing
    import escnn.nn as enn

    return enn


# ----------------------------------------------------------------------------- groups and types


def _acting_point_group(group: Group) -> PointGroup | None:
    """``group`` if it is a C_m / D_m acting on the pixel grid (m | 4), else ``None``."""
    if isinstance(group, CyclicGroup | DihedralGroup) and 4 % group.n == 0:
        return group
    return None


def _embedding(group: PointGroup, gspace: Any) -> Callable[[Any], Any] | None:
    """Our element of ``group`` → the escnn element of ``gspace`` that moves images alike.

    ``None`` when ``group`` is not a subgroup of the gspace's point group.
    """
    point = gspace_point_group(gspace)
    if point.n % group.n:
        return None
    if isinstance(group, DihedralGroup) and not isinstance(point, DihedralGroup):
        return None
    scale = point.n // group.n

    def embed(g: Any) -> Any:
        e = group.element(g)
        pe = point.make(group.rotation(e) * scale, group.is_reflection(e))
        return to_escnn_element(point, pe, gspace)

    return embed


def _matrix(representation: Any, element: Any) -> torch.Tensor:
    m = torch.as_tensor(representation(element), dtype=torch.float64)
    r = m.round()
    if bool(((m - r).abs() <= 1e-9).all()) and _is_signed_permutation(r):
        return r  # escnn's change of basis leaves 1e-16 rounding on exact permutations
    return m


def _is_signed_permutation(m: torch.Tensor) -> bool:
    return bool(
        (m.abs().sum(0) == 1).all() and (m.abs().sum(1) == 1).all() and (m.abs() <= 1).all()
    )


def _is_permutation(m: torch.Tensor) -> bool:
    return _is_signed_permutation(m) and bool((m >= 0).all())


@functools.lru_cache(maxsize=512)
def _tables(field_type: Any, group: PointGroup) -> tuple[tuple[torch.Tensor, ...], ...] | None:
    """Per field of ``field_type``: its matrices for every element of ``group`` (in order)."""
    embed = _embedding(group, field_type.gspace)
    if embed is None:
        return None
    escnn_elements = [embed(g) for g in group.elements()]
    return tuple(tuple(_matrix(r, e) for e in escnn_elements) for r in field_type.representations)


@functools.lru_cache(maxsize=512)
def _grid_type_cached(field_type: Any, group: PointGroup) -> GridField | None:
    tables = _tables(field_type, group)
    if tables is None:
        return None
    full = [torch.block_diag(*(t[i] for t in tables)) for i in range(len(group.elements()))]
    order = {e.value: i for i, e in enumerate(group.elements())}

    def matrix(g: Any) -> torch.Tensor:
        return full[order[group.element(g).value]]

    name = f"escnn:{field_type!r}"
    return GridField(channels=MatrixRepresentation(group, field_type.size, matrix, name=name))


def escnn_grid_type(field_type: Any, group: Group) -> GridField:
    """The [`GridField`][groupattn.actions.GridField] of an escnn ``FieldType`` under ``group``.

    ``group`` is our ``C_m`` / ``D_m`` acting on the grid, a subgroup of the field type's
    gspace group; the channels move by the field type's representation restricted to
    it (exact permutation matrices where escnn's are permutations up to rounding).
    The same object is returned for equal arguments, so types compare equal.

    Raises
    ------
    GroupError
        When ``group`` does not act on the grid or is not a subgroup of the gspace's group.
    """
    pg = _acting_point_group(group)
    result = _grid_type_cached(field_type, pg) if pg is not None else None
    if result is None:
        raise GroupError(
            f"escnn_grid_type: expected a subgroup of {gspace_point_group(field_type.gspace).name} acting on "
            f"the pixel grid, got {group.name}"
        )
    return result


@dataclass(frozen=True, eq=True)
class WindowedGridField(GridField):
    """A [`GridField`][groupattn.actions.GridField] read through a strided window grid.

    Acts like ``GridField`` on square images of a side ``H`` with ``H + 2·padding ≥
    kernel`` and ``(H + 2·padding − kernel) mod stride = 0`` — exactly the images for which
    rotating and reflecting about the centre maps the windows of a convolution (kernel,
    stride, padding) onto windows; [`act`][groupattn.actions.FieldType.act] and
    [`check`][groupattn.actions.FieldType.check] raise [`ShapeError`][groupattn.ShapeError]
    for any other image, so the checker applies the contract of an R2Conv declaring it
    only to inputs it holds for.
    """

    kernel: int = 1
    stride: int = 1
    padding: int = 0

    def _fits(self, x: torch.Tensor, module: str) -> None:
        h, w = int(x.shape[-2]), int(x.shape[-1])
        span = h + 2 * self.padding - self.kernel
        if h != w or span < 0 or span % self.stride:
            raise ShapeError(
                f"{module}: expected a square image whose side H has (H + 2·{self.padding} − {self.kernel}) "
                f"divisible by the stride {self.stride} (the windows then map onto windows under rotations "
                f"about the centre), got a tensor of shape {tuple(x.shape)}"
            )

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self._fits(x, "WindowedGridField")
        return super().act(group, g, x)

    def check(
        self, x: torch.Tensor, module: str = "WindowedGridField", *, channels: int | None = None
    ) -> None:
        super().check(x, module, channels=channels)
        self._fits(x, module)

    def describe(self) -> str:
        return super().describe() + f"{{k={self.kernel},s={self.stride},p={self.padding}}}"


# ----------------------------------------------------------------------------- trust


def _exactly_registered(module: Any) -> str | None:
    """Why ``module`` may not be trusted by its class's registered contract (``None``: it may)."""
    from ..contracts._contract import _REGISTRY

    cls = type(module)
    name = cls.__name__
    fn = registered_contract(module)
    if fn is None or _REGISTRY.get(cls) is not fn:
        return f"{name}: its exact class has no registered contract (a subclass or a module of another kind)"
    if "forward" in vars(module):
        return f"{name}: its forward was replaced on the instance"
    if isinstance(module, nn.Module) and (
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
    ):
        return f"{name}: it has hooks, which can change what it computes"
    return None


def _types(module: Any, group: Group) -> tuple[GridField, GridField] | Contract:
    """The declared types under ``group``, or the contract saying why there are none."""
    name = type(module).__name__
    in_ft, out_ft = getattr(module, "in_type", None), getattr(module, "out_type", None)
    enn = _enn()
    if not isinstance(in_ft, enn.FieldType) or not isinstance(out_ft, enn.FieldType):
        return Contract.unknown(f"{name}: declares no escnn in_type / out_type")
    if in_ft.gspace != out_ft.gspace:
        return Contract.unknown(f"{name}: its in_type and out_type live on different gspaces")
    try:
        gspace_group = gspace_point_group(in_ft.gspace)
    except GroupError as err:
        return Contract.unknown(f"{name}: {err}")
    pg = _acting_point_group(group)
    if pg is None:
        return Contract.unknown(
            f"{name}: escnn modules are certified only under C_m / D_m (m | 4) rotating about the image "
            f"centre, got {group.name}"
        )
    try:
        return escnn_grid_type(in_ft, pg), escnn_grid_type(out_ft, pg)
    except GroupError:
        return Contract.unknown(
            f"{name}: declares its types for {gspace_group.name}, of which {group.name} is not a subgroup"
        )


def _matrices(field_type: Any, group: PointGroup) -> tuple[tuple[torch.Tensor, ...], ...]:
    tables = _tables(field_type, group)
    assert tables is not None
    return tables


def _all_permutations(field_type: Any, group: PointGroup) -> bool:
    return all(_is_permutation(m) for field in _matrices(field_type, group) for m in field)


def _all_orthogonal(field_type: Any, group: PointGroup) -> bool:
    for field in _matrices(field_type, group):
        for m in field:
            eye = torch.eye(m.shape[0], dtype=torch.float64)
            if not torch.allclose(m @ m.T, eye, rtol=0, atol=1e-9):
                return False
    return True


def _claim(
    module: Any,
    group: Group,
    input_type: Any,
    condition: Callable[[Any, PointGroup], str | None],
    same_type: bool = False,
) -> Contract:
    name = type(module).__name__
    problem = _exactly_registered(module)
    if problem is not None:
        return Contract.unknown(problem)
    types = _types(module, group)
    if isinstance(types, Contract):
        return types
    in_t, out_t = types
    if same_type and module.in_type != module.out_type:
        return Contract.unknown(f"{name}: expected out_type equal to in_type")
    assert isinstance(group, PointGroup)
    reason = condition(module, group) or _index_buffers_mismatch(module)
    if reason is not None:
        return Contract.unknown(f"{name}: {reason}")
    declared = _declared_input(module, group, in_t)
    if isinstance(declared, Contract):
        return declared
    if input_type is not None and input_type != declared:
        return Contract.unknown(
            f"{name}: expected input type {declared.describe()}, got "
            f"{input_type.describe() if isinstance(input_type, FieldType) else input_type!r}",
            input_type,
        )
    return Contract.equivariant(declared, out_t)


def _index_buffers_mismatch(module: Any) -> str | None:
    """Why the module's channel bookkeeping differs from what its ``in_type`` gives, or ``None``.

    escnn's pooling and batch-norm modules slice and scatter their channels through
    integer buffers (``indices_*``, ``in_indices_*``, …; counters such as
    ``num_batches_tracked`` are not compared) and a contiguity table built from
    ``in_type`` at construction; the forward pass reads those, not the declared types. A
    buffer edited afterwards (by hand or by a loaded state dict) would pool or normalise
    other channels than the declared fields, so the contract is stated only when a
    freshly built module of the same class and ``in_type`` has identical ones.
    """
    own = {
        n: b
        for n, b in module.named_buffers(recurse=False)
        if "indices" in n and not (b.is_floating_point() or b.is_complex())
    }
    tables = [n for n in ("_contiguous",) if hasattr(module, n)]
    if not own and not tables:
        return None
    try:
        with escnn_compatibility():
            fresh = type(module)(module.in_type)
    except Exception as err:  # an unusual constructor: cannot compare, so promise nothing
        return f"its index buffers could not be checked against its in_type ({type(err).__name__}: {err})"
    expected = {
        n: b
        for n, b in fresh.named_buffers(recurse=False)
        if "indices" in n and not (b.is_floating_point() or b.is_complex())
    }
    if own.keys() != expected.keys() or any(
        own[n].shape != expected[n].shape or not torch.equal(own[n].cpu(), expected[n]) for n in own
    ):
        return "its index buffers do not match its declared in_type (edited, or loaded from another model)"
    if any(getattr(module, n) != getattr(fresh, n, None) for n in tables):
        return "its channel layout table does not match its declared in_type"
    return None


def _declared_input(module: Any, group: PointGroup, in_t: GridField) -> GridField | Contract:
    enn = _enn()
    if type(module) is not enn.R2Conv:
        return in_t
    values = {}
    for what in ("kernel_size", "padding", "stride", "dilation"):
        value = getattr(module, what)
        if isinstance(value, tuple | list) and len(set(value)) == 1:
            value = value[0]
        if not isinstance(value, int) or isinstance(value, bool):
            return Contract.unknown(
                f"R2Conv: expected one integer {what} for both axes, got {value!r}"
            )
        values[what] = value
    k = values["dilation"] * (values["kernel_size"] - 1) + 1
    padding, stride = values["padding"], values["stride"]
    if stride == 1 and (k - 1) % 2 == 0 and 2 * padding == k - 1:
        return in_t  # a 'same' convolution: any square image
    return _windowed(in_t, int(k), int(stride), int(padding))


@functools.lru_cache(maxsize=512)
def _windowed(in_t: GridField, k: int, stride: int, padding: int) -> WindowedGridField:
    return WindowedGridField(channels=in_t.channels, kernel=k, stride=stride, padding=padding)


# ----------------------------------------------------------------------------- conditions


def _pointwise(module: Any, group: PointGroup) -> str | None:
    if not _all_permutations(module.in_type, group):
        return "a pointwise function is equivariant only for permutation representations"
    if getattr(module, "_inplace", False):
        return "in-place: it overwrites its input, which other modules may still read"
    function = getattr(module, "_function", None)
    if type(module).__name__ == "PointwiseNonLinearity":
        allowed = {torch.nn.functional.relu, torch.nn.functional.elu, torch.sigmoid, torch.tanh}
        allowed |= {torch.nn.functional.sigmoid, torch.nn.functional.tanh}
        if function not in allowed:
            return f"its function {function!r} is not one of escnn's elementwise functions"
    return None


def _orthogonal(module: Any, group: PointGroup) -> str | None:
    if not _all_orthogonal(module.in_type, group):
        return "norms of fields are invariant only for orthogonal representations"
    if type(module).__name__ == "NormNonLinearity":
        function = getattr(module, "_function", None)
        known = {torch.relu, torch.sigmoid, torch.nn.functional.softplus}
        squash = (
            getattr(function, "__qualname__", "") == "NormNonLinearity.__init__.<locals>.<lambda>"
        )
        if function not in known and not squash:
            return f"its function {function!r} is not one of escnn's"
    return None


def _inner(module: Any, group: PointGroup) -> str | None:
    if not _all_permutations(module.in_type, group):
        return "one statistic per field is equivariant only for permutation representations"
    return None


def _pool(module: Any, group: PointGroup) -> str | None:
    enn = _enn()
    out = module.out_type
    if len(out) != len(module.in_type) or any(not r.is_trivial() for r in out.representations):
        return "expected one trivial output field per input field"
    if type(module) is enn.GroupPooling:
        if not _all_permutations(module.in_type, group):
            return "the maximum over a field is invariant only for permutation representations"
    elif not _all_orthogonal(module.in_type, group):
        return "the norm of a field is invariant only for orthogonal representations"
    return None


def _nothing(module: Any, group: PointGroup) -> str | None:
    return None


# ----------------------------------------------------------------------------- R2Conv


def _conv_filter(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if not module.training and hasattr(module, "filter"):
        return module.filter, getattr(module, "expanded_bias", None)
    with torch.no_grad():
        return module.expand_parameters()


def steerability_error(conv: Any, group: Group) -> float:
    """The largest relative violation of an ``R2Conv``'s filter and bias constraint under ``group``.

    ``max_g max|ρ_out(g) K(g⁻¹·) ρ_in(g)⁻¹ − K| / max|K|`` over the generators ``g`` of
    ``group`` (and ``max|ρ_out(g) b − b| / max|b|`` for the bias), computed in float64
    on the filter the module uses now (the cached ``filter`` in eval mode).

    Raises
    ------
    GroupError
        When ``group`` is not a subgroup of the conv's gspace group acting on the grid.
    """
    pg = _acting_point_group(group)
    if pg is None:
        raise GroupError(f"steerability_error: expected C_m / D_m with m | 4, got {group.name}")
    in_t, out_t = escnn_grid_type(conv.in_type, pg), escnn_grid_type(conv.out_type, pg)
    k, b = _conv_filter(conv)
    kernel = k.detach().to("cpu", torch.float64)
    worst = 0.0
    scale = max(float(kernel.abs().max()), torch.finfo(torch.float64).tiny)
    assert in_t.channels is not None and out_t.channels is not None
    for g in pg.generators():
        rin = in_t.channels.matrix(g)
        rout = out_t.channels.matrix(g)
        spatial = GridField().act(
            pg, g, kernel
        )  # K(g⁻¹ v): the kernel's window moved like an image
        moved = torch.einsum("oa,abyx,ib->oiyx", rout, spatial, rin)  # ρ_in(g)⁻¹ = ρ_in(g)ᵀ
        worst = max(worst, float((moved - kernel).abs().max()) / scale)
        if b is not None:
            bias = b.detach().to("cpu", torch.float64)
            bscale = max(float(bias.abs().max()), torch.finfo(torch.float64).tiny)
            worst = max(worst, float((rout @ bias - bias).abs().max()) / bscale)
    return worst


def _r2conv_condition(module: Any, group: PointGroup) -> str | None:
    if module.groups != 1:
        return f"expected groups=1, got groups={module.groups}"
    if module.padding_mode not in ("zeros", "circular", "reflect", "replicate"):
        return f"unknown padding mode {module.padding_mode!r}"
    if not _all_orthogonal(module.in_type, group):
        return "expected orthogonal input representations"
    try:
        error = steerability_error(module, group)
    except Exception as err:  # a filter that cannot be built or read promises nothing
        return f"its filter cannot be checked ({type(err).__name__}: {err})"
    if not error <= FILTER_TOLERANCE:
        return (
            f"its filter satisfies the {group.name} steerability constraint only up to a relative {error:.1e} "
            f"(> {FILTER_TOLERANCE:.0e}; escnn samples its basis in float32): apply "
            "groupattn.interop.exact_steerable to it"
        )
    return None


def _r2conv(module: Any, group: Group, input_type: Any) -> Contract:
    types = _types(module, group)
    if isinstance(types, Contract) and _acting_point_group(group) is not None:
        try:
            gs_group = gspace_point_group(module.in_type.gspace)
        except (GroupError, AttributeError):
            return types
        if _embedding(group, module.in_type.gspace) is None:  # type: ignore[arg-type]
            return Contract.breaks(
                f"R2Conv on a {gs_group.name} gspace: its kernel is constrained only for {gs_group.name}, "
                f"not for {group.name}",
                input_type,
            )
    return _claim(module, group, input_type, _r2conv_condition)


# ----------------------------------------------------------------------------- SequentialModule


def _sequential(module: Any, group: Group, input_type: Any) -> Contract:
    name = type(module).__name__
    problem = _exactly_registered(module)
    if problem is not None:
        return Contract.unknown(problem)
    children = list(module._modules.items())
    if not children:
        return Contract.unknown(f"{name}: empty")
    first: Contract | None = None
    previous: Contract | None = None
    for index, (child_name, child) in enumerate(children):
        label = f"{name}.{child_name} ({type(child).__name__})"
        problem = _exactly_registered(child)
        if problem is not None:
            return Contract.unknown(f"{label}: {problem}")
        if index and getattr(child, "in_type", None) != getattr(
            children[index - 1][1], "out_type", None
        ):
            return Contract.unknown(f"{label}: its in_type is not the previous module's out_type")
        fn = registered_contract(child)
        assert fn is not None
        stated = fn(child, group, None)
        if stated.kind == Status.BROKEN:
            return Contract.breaks(f"{label}: {stated.reason}", stated.input_type)
        if stated.kind != Status.EQUIVARIANT:
            return Contract.unknown(f"{label}: {stated.reason or 'promises nothing'}")
        if previous is not None and isinstance(stated.input_type, WindowedGridField):
            return Contract.unknown(
                f"{label}: a strided or shrinking R2Conv inside a SequentialModule needs the size of its input, "
                "which only the first module of the sequence is checked against"
            )
        first = first or stated
        previous = stated
    assert first is not None and previous is not None and previous.output_type is not None
    declared = first.input_type
    if input_type is not None and input_type != declared:
        return Contract.unknown(f"{name}: expected input type {declared!r}, got {input_type!r}")
    return Contract.equivariant(declared, previous.output_type)


# ----------------------------------------------------------------------------- registration


def _leaf(fn: Callable[[Any, Group, Any], Contract]) -> Callable[[Any, Group, Any], Contract]:
    fn.checker_leaf = True  # type: ignore[attr-defined]
    return fn


def _with(condition: Callable[[Any, PointGroup], str | None], same_type: bool = False) -> Any:
    def contract(module: Any, group: Group, input_type: Any) -> Contract:
        return _claim(module, group, input_type, condition, same_type)

    return _leaf(contract)


def _flatten(g: Any) -> tuple[list[torch.Tensor], Any]:
    return [g.tensor], (g.type, g.coords)


def _unflatten(children: Any, context: Any) -> Any:
    enn = _enn()
    field_type, coords = context
    return enn.GeometricTensor(children[0], field_type, coords)


def register_escnn_contracts() -> None:
    """Register the contracts above for escnn's module classes (idempotent).

    Also registers ``escnn.nn.GeometricTensor`` as a ``torch.utils._pytree`` node (the
    tensor is its one child), so that ``torch.export`` and the checker see the tensor
    inside. Called by the escnn adapters and models; call it yourself before
    certifying a network of your own built from escnn modules.

    Raises
    ------
    ImportError
        Without the ``escnn`` extra.
    """
    if _REGISTERED:
        return
    enn = _enn()
    from torch.utils import _pytree as pytree

    if enn.GeometricTensor not in pytree.SUPPORTED_NODES:
        pytree.register_pytree_node(
            enn.GeometricTensor,
            _flatten,
            _unflatten,
            serialized_type_name="escnn.nn.GeometricTensor",
        )
    table: dict[str, Any] = {
        "R2Conv": _leaf(_r2conv),
        "ReLU": _with(_pointwise, True),
        "ELU": _with(_pointwise, True),
        "LeakyReLU": _with(_pointwise, True),
        "PointwiseNonLinearity": _with(_pointwise, True),
        "NormNonLinearity": _with(_orthogonal, True),
        "NormBatchNorm": _with(_orthogonal, True),
        "IIDBatchNorm2d": _with(_orthogonal, True),
        "InnerBatchNorm": _with(_inner, True),
        "GroupPooling": _with(_pool),
        "NormPool": _with(_pool),
        "IdentityModule": _with(_nothing, True),
        "SequentialModule": _leaf(_sequential),
    }
    for name, fn in table.items():
        cls = getattr(enn, name, None)
        if cls is not None:
            register_contract(cls)(fn)
    _REGISTERED.append(True)


# ----------------------------------------------------------------------------- exact filters


def _reynolds(
    stack: torch.Tensor,
) -> torch.Tensor:
    """Average over the first axis, independent of its order (sorted, summed in float64)."""
    ordered = torch.sort(stack, dim=0).values
    total = ordered[0].clone()
    for row in ordered[1:]:  # elementwise, in one order for every entry (no blocked reduction)
        total = total + row
    return total / stack.shape[0]


def _grid_group(gspace: Any) -> PointGroup:
    point = gspace_point_group(gspace)
    n = math.gcd(point.n, 4)
    return DihedralGroup(n) if isinstance(point, DihedralGroup) else CyclicGroup(n)


def exact_steerable(module: nn.Module) -> nn.Module:
    """Project every ``R2Conv`` in ``module`` onto exactly steerable filters for the grid (in place).

    escnn samples each basis filter in float32, so its filters obey the steerability
    constraint only up to about ``1e-7``. For the largest subgroup ``C_m`` / ``D_m``
    (``m | 4``) of the conv's gspace group that acts on the pixel grid, this replaces
    each sampled basis filter ``B`` (and the bias expansion) by its group average
    ``(1/|G|) Σ_g ρ_out(g) B(g⁻¹·) ρ_in(g)⁻¹`` — the projection onto the exactly
    equivariant filters (escnn shares sampled bases between convolutions built with
    ``recompute=False``, its default; the projection is idempotent, so a shared basis is
    simply projected once more). For permutation representations the average is computed in an
    order that does not depend on the position (sorted, in float64), so the result is
    equivariant to the last bit; the filters the weights expand to are then exactly
    equivariant too (to rounding in the expansion). Filters already cached for eval
    mode are rebuilt. Returns ``module``.
    """
    enn = _enn()
    conv: Any
    for conv in module.modules():
        if type(conv) is not enn.R2Conv:
            continue
        try:
            pg = _grid_group(conv.in_type.gspace)
        except GroupError:  # a continuous or non-planar gspace: no group acts on the grid
            continue
        embed = _embedding(pg, conv.in_type.gspace)
        assert embed is not None
        elements = [embed(g) for g in pg.elements()]
        expansion = conv._basisexpansion
        ins = {r.name: r for r in expansion._in_reprs}
        outs = {r.name: r for r in expansion._out_reprs}
        k = conv.kernel_size
        for pair in expansion._representations_pairs:
            block = getattr(expansion, f"block_expansion_{expansion._escape_pair(pair)}")
            basis = block.sampled_basis
            b, o, i, s = basis.shape
            if s != k * k:
                raise ShapeError(f"exact_steerable: expected {k * k} sampled points, got {s}")
            x = basis.detach().to(torch.float64).reshape(b, o, i, k, k)
            copies = []
            for g, e in zip(pg.elements(), elements):
                rin = _matrix(ins[pair[0]], e)
                rout = _matrix(outs[pair[1]], e)
                spatial = GridField().act(pg, g, x.reshape(b * o, i, k, k)).reshape(b, o, i, k, k)
                # ρ_out(g) B(g⁻¹·) ρ_in(g)⁻¹, with ρ_in(g)⁻¹ = ρ_in(g)ᵀ (escnn's are orthogonal)
                copies.append(torch.einsum("pa,baiyx,qi->bpqyx", rout, spatial, rin))
            projected = _reynolds(torch.stack(copies))
            with torch.no_grad():
                basis.copy_(projected.reshape(b, o, i, s).to(basis.dtype))
        bias_expansion = getattr(conv, "bias_expansion", None)
        if isinstance(bias_expansion, torch.Tensor):
            out_t = escnn_grid_type(conv.out_type, pg)
            assert out_t.channels is not None
            be = bias_expansion.detach().to(torch.float64)
            stack = torch.stack([out_t.channels.matrix(g) @ be for g in pg.elements()])
            with torch.no_grad():
                bias_expansion.copy_(_reynolds(stack).to(bias_expansion.dtype))
        _rebuild(conv)
    return module


def _project_filter(conv: Any, kernel: torch.Tensor, bias: torch.Tensor | None) -> Any:
    """The group average of a float64 filter (and bias) over the conv's grid group."""
    pg = _grid_group(conv.in_type.gspace)
    in_t, out_t = escnn_grid_type(conv.in_type, pg), escnn_grid_type(conv.out_type, pg)
    assert in_t.channels is not None and out_t.channels is not None
    copies, biases = [], []
    for g in pg.elements():
        rin, rout = in_t.channels.matrix(g), out_t.channels.matrix(g)
        spatial = GridField().act(pg, g, kernel)
        copies.append(torch.einsum("oa,abyx,ib->oiyx", rout, spatial, rin))
        if bias is not None:
            biases.append(rout @ bias)
    return _reynolds(torch.stack(copies)), (
        _reynolds(torch.stack(biases)) if bias is not None else None
    )


def _rebuild(conv: Any) -> None:
    """Cache an eval-mode filter built exactly: expanded in float64, projected, then rounded.

    escnn's own expansion (a float32 matrix product) can round entries that the
    constraint makes equal differently; expanding in float64 and averaging over the
    grid group (in an order-independent way) before rounding to the module's dtype
    gives a filter that is steerable to the last bit.
    """
    if conv.training:
        return
    dtype = conv.weights.dtype
    with torch.no_grad():
        expansion = copy.deepcopy(conv._basisexpansion).to(torch.float64)
        kernel = expansion(conv.weights.detach().to(torch.float64))
        kernel = kernel.reshape(
            kernel.shape[0], kernel.shape[1], conv.kernel_size, conv.kernel_size
        )
        bias = None
        if conv.bias is not None:
            bias = conv.bias_expansion.detach().to(torch.float64) @ conv.bias.detach().to(
                torch.float64
            )
        try:
            kernel, bias = _project_filter(
                conv, kernel.cpu(), bias.cpu() if bias is not None else None
            )
        except GroupError:  # a continuous or non-planar gspace: nothing to average over
            pass
        device = conv.weights.device
        conv.register_buffer("filter", kernel.to(device, dtype))
        if bias is not None:
            conv.register_buffer("expanded_bias", bias.to(device, dtype))


def refresh_filters(module: nn.Module) -> nn.Module:
    """Rebuild the cached eval-mode filters of every ``R2Conv`` in ``module`` exactly (in place).

    escnn caches an R2Conv's filter when it enters eval mode, expanded in the module's
    dtype, and converts that cached filter when the module changes dtype. This rebuilds
    it from the current weights: expanded in float64, averaged over the grid group
    ``C_m`` / ``D_m`` (``m | 4``) of its gspace — a no-op up to rounding for a filter
    that already satisfies the constraint — and rounded to the module's dtype, so that
    its steerability holds to the last bit (see
    [`steerability_error`][groupattn.interop.steerability_error]). Modules in training
    mode are left alone (they expand their filter on every call).
    """
    enn = _enn()
    for conv in module.modules():
        if type(conv) is enn.R2Conv:
            _rebuild(conv)
    return module


class _FrozenHash:
    """An escnn kernel basis whose hash was computed once, outside ``torch.export``.

    Everything else is delegated to the basis.
    """

    __slots__ = ("_hash", "_target")

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_hash", hash(target))

    def __getattr__(self, name: str) -> Any:
        if name in ("_hash", "_target"):
            raise AttributeError(name)
        return getattr(self._target, name)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _FrozenHash):
            other = other._target
        return bool(self._target == other)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __getitem__(self, item: Any) -> Any:
        return self._target[item]

    def __repr__(self) -> str:
        return repr(self._target)


def exportable(module: nn.Module) -> nn.Module:
    """Let ``torch.export`` walk a module tree that holds escnn convolutions (in place).

    ``torch.export`` puts every submodule in a set while it traces; escnn's basis
    expansion modules hash their analytical kernel basis, whose radial profile hashes
    the *data* of its tensors — which fails under export ("Cannot access data pointer
    of Tensor"). The basis is kept by escnn for inspection only (the sampled filters are
    buffers); this wraps it so that its hash is computed once, now, and everything else
    is delegated to it. Returns ``module``.
    """
    for sub in module.modules():
        basis = sub.__dict__.get("basis")
        if type(sub).__name__ == "SingleBlockBasisExpansion" and not isinstance(basis, _FrozenHash):
            object.__setattr__(sub, "basis", _FrozenHash(basis))
    return module


@contextlib.contextmanager
def escnn_compatibility() -> Iterator[None]:
    """While building escnn modules: use a plain SVD in escnn's null-space solver.

    escnn 1.0.11 calls scikit-learn's ``randomized_svd`` on a ``numpy.matrix``, which
    recent scikit-learn releases refuse (``TypeError: np.matrix is not supported``);
    that breaks every dihedral ``R2Conv``. Inside this context escnn falls back to its own
    ``scipy.linalg.svd`` branch (deterministic, exact rank); the setting is restored on
    exit.
    """
    _enn()
    from escnn.group import _numerical

    saved = getattr(_numerical, "randomized_svd", None)
    _numerical.randomized_svd = None
    try:
        yield
    finally:
        _numerical.randomized_svd = saved
