"""``escnn_hybrid``: an escnn steerable-convolution stem, groupattn group attention, escnn group pooling.

escnn is an optional extra: this module imports it only when a model is built.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, MissingExtraError
from ..attention._group_attention import resolve_point_group
from ..groups import CyclicGroup, DihedralGroup, PointGroup
from ..nn import OrbitPooledLinear
from ._inputs import install_input_check
from ._registry import register_model

__all__ = ["EscnnHybrid"]


def _require_escnn() -> Any:
    try:
        import escnn.nn as enn
        from escnn import gspaces
    except ImportError as err:
        raise MissingExtraError(
            "groupattn.models.create('escnn_hybrid')", "escnn", "escnn"
        ) from err
    return enn, gspaces


class EscnnHybrid(nn.Module):
    """escnn and groupattn in one network, certified by the checker under C4 or D4.

    ``(B, C, S, S)`` → escnn stem (one [``R2Conv`` (zero padding, odd kernel, stride 1,
    'same' size) → ``InnerBatchNorm`` → ``ReLU``] per entry of ``stem_dilations``, with
    that dilation), from ``C`` trivial fields to
    ``dim`` regular fields) → ``depth`` × [`GeometricGroupBlock`][groupattn.interop.GeometricGroupBlock]
    (groupattn's pre-norm group attention + MLP on the lifted layout, between
    ``GeometricTensor``s) → an invariant read-out: by default
    [`GeometricInvariantReadout`][groupattn.interop.GeometricInvariantReadout] with an
    [`OrbitPooledLinear`][groupattn.nn.OrbitPooledLinear] (max over space, then one linear
    map on every turned copy of the ``dim × |H|`` features, the largest logit kept);
    with ``readout="pool"`` escnn's ``GroupPooling`` (max over each regular field) → max
    over space → ``Linear``. Every R2Conv's basis is projected onto exactly steerable
    filters ([`exact_steerable`][groupattn.interop.exact_steerable]) and its eval-mode
    filter is rebuilt exactly whenever the model enters eval mode or changes dtype
    ([`refresh_filters`][groupattn.interop.refresh_filters]), so the logits are
    invariant to rounding in float32 and float64.

    The baseline (``equivariant=False``) is the same topology on escnn's
    ``trivialOnR2`` gspace: unconstrained convolutions and attention with the trivial
    point group C1; it breaks rotation equivariance at the first convolution. The two
    variants are compared at about the same number of parameters, the G-CNN convention:
    an equivariant convolution between ``dim`` regular fields has ``|H|`` times fewer free
    weights than an unconstrained one between the same ``dim·|H|`` channels, so the
    baseline gets ``dim·√|H|`` channels, rounded to a multiple of ``num_heads`` (C4 at the
    default ``dim=16``: 61,604 parameters, against the 32-channel baseline's 67,870; D4:
    120,620 against 46 channels' 139,382). At the same channel count
    (``baseline_dim=dim·|H|``) the equivariant model has a quarter of the baseline's
    weights and underfits (3,750 MNIST digits, 5 epochs, 3 seeds: ``dim=8``, 15,748
    parameters, 94.4 % against the 32-channel baseline's 97.9 %; at the default
    ``dim=16``, 96.2 %, for 3–3.5× the baseline's training time).

    Contract: escnn modules are checked by the contracts of
    [`register_escnn_contracts`][groupattn.interop.register_escnn_contracts]; the model is
    *invariant* (``GridField → InvariantField``) under ``H`` and its subgroups (C4: C2,
    C1; D4: also D2, D1), rotating and reflecting about the image centre. Not under
    translations: the stem pads with zeros.

    Shapes: ``(B, in_channels, S, S) → (B, num_classes)``.

    Parameters
    ----------
    equivariant
        The C4/D4 model, or the trivial-group baseline.
    point_group
        ``"C4"`` (``rot2dOnR2(4)``) or ``"D4"`` (``flipRot2dOnR2(4)``).
    in_channels, num_classes
        Input channels and classes.
    dim
        Regular fields after the stem (``dim·|H|`` channels) of the equivariant model.
    baseline_dim
        Channels of the baseline (``equivariant=False``); ``None`` (default):
        ``dim·√|H|`` rounded to a multiple of ``num_heads``, which matches the equivariant
        model's parameter count. Ignored by the equivariant model.
    depth, num_heads, neighbourhood
        Group attention blocks, heads, and the side of their local window (``None``:
        global attention).
    stem_dilations, kernel_size
        One stem convolution per entry, with that dilation; their (odd) kernel size.
        Default three 5 × 5 convolutions with dilations 1, 2, 3 (a 25-pixel receptive
        field on the 20 × 20 digits; with two, 1 and 2, the model learned slower: 3,750
        MNIST digits, 5 epochs, seed 0: 91.3 % against 95.4 %).
    image_size
        The input side (accepted for the training command; any square size works).
    readout
        ``"orbit"`` (default) or ``"pool"``. ``"pool"`` hands the head only ``dim``
        numbers — one per regular field, its orientation forgotten — where the baseline's
        head reads ``dim·|H|``; with 8 fields (``dim=8``) for 10 classes that bottleneck
        made the model learn far slower than its baseline (3,750 MNIST digits, 5 epochs, seed 0:
        78.5 % with ``"pool"``, 91.3 % with ``"orbit"``; baseline 96.6 %).

    Raises
    ------
    MissingExtraError
        Without the ``escnn`` extra (``pip install 'groupattn[escnn]'``).
    ConfigurationError
        For an even kernel size, an unsupported point group or non-positive sizes.
    """

    def __init__(
        self,
        equivariant: bool = True,
        point_group: PointGroup | str = "C4",
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 16,
        baseline_dim: int | None = None,
        depth: int = 1,
        num_heads: int = 2,
        neighbourhood: int | None = 3,
        stem_dilations: tuple[int, ...] = (1, 2, 3),
        kernel_size: int = 5,
        image_size: int = 20,
        readout: str = "orbit",
    ) -> None:
        super().__init__()
        enn, gspaces = _require_escnn()
        from ..interop import (
            GeometricGroupBlock,
            GeometricInvariantReadout,
            escnn_compatibility,
            exact_steerable,
            exportable,
            refresh_filters,
            register_escnn_contracts,
        )

        register_escnn_contracts()
        self._refresh = refresh_filters
        pg = resolve_point_group(point_group, "EscnnHybrid")
        if not (isinstance(pg, CyclicGroup | DihedralGroup) and pg.n == 4):
            raise ConfigurationError(
                f"EscnnHybrid: expected point_group 'C4' or 'D4', got {pg.name}"
            )
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ConfigurationError(f"EscnnHybrid: expected an odd kernel_size, got {kernel_size}")
        dilations = tuple(int(d) for d in stem_dilations)
        for what, value in (("dim", dim), ("baseline_dim", baseline_dim)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral)
            ):
                raise ConfigurationError(
                    f"EscnnHybrid: expected {what} to be an int, got {type(value).__name__}"
                )
        dim = int(dim)
        baseline_dim = None if baseline_dim is None else int(baseline_dim)
        if baseline_dim is None:
            heads = max(1, num_heads)
            baseline_dim = heads * max(1, round(dim * math.sqrt(pg.order()) / heads))
        for what, value in (
            ("dim", dim),
            ("baseline_dim", baseline_dim),
            ("in_channels", in_channels),
            ("len(stem_dilations)", len(dilations)),
            *(("each of stem_dilations", d) for d in dilations),
        ):
            if value < 1:
                raise ConfigurationError(f"EscnnHybrid: expected {what} >= 1, got {value}")
        if not equivariant and num_heads >= 1 and baseline_dim % num_heads:
            raise ConfigurationError(
                f"EscnnHybrid: expected baseline_dim divisible by num_heads={num_heads}, "
                f"got {baseline_dim}"
            )
        self.equivariant = equivariant
        self.num_classes = num_classes
        self.point_group = pg if equivariant else resolve_point_group("C1")
        if equivariant:
            gspace = (
                gspaces.flipRot2dOnR2(4) if isinstance(pg, DihedralGroup) else gspaces.rot2dOnR2(4)
            )
            width = dim
        else:
            gspace = gspaces.trivialOnR2()
            width = baseline_dim
        self.in_type = enn.FieldType(gspace, [gspace.trivial_repr] * in_channels)
        hidden = enn.FieldType(gspace, [gspace.regular_repr] * width)
        layers: list[Any] = []
        current = self.in_type
        with escnn_compatibility():
            for dilation in dilations:
                layers += [
                    enn.R2Conv(
                        current,
                        hidden,
                        kernel_size,
                        padding=dilation * (kernel_size // 2),
                        dilation=dilation,
                        bias=False,
                        recompute=True,  # its own sampled basis, not one shared with other convs
                    ),
                    enn.InnerBatchNorm(hidden),
                    enn.ReLU(hidden),
                ]
                current = hidden
        self.stem = enn.SequentialModule(*layers)
        exportable(exact_steerable(self.stem))
        self.blocks = nn.Sequential(
            *[
                GeometricGroupBlock(hidden, num_heads=num_heads, neighbourhood=neighbourhood)
                for _ in range(depth)
            ]
        )
        if readout not in ("orbit", "pool"):
            raise ConfigurationError(
                f"EscnnHybrid: expected readout 'orbit' or 'pool', got {readout!r}"
            )
        self.readout = readout
        if readout == "orbit":
            self.head: nn.Module = GeometricInvariantReadout(
                OrbitPooledLinear(width, num_classes, self.point_group, spatial="max"), hidden
            )
        else:
            self.pool = enn.GroupPooling(hidden)
            self.head = nn.Linear(width, num_classes)
        install_input_check(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from escnn.nn import GeometricTensor

        if x.shape[0] == 0:  # escnn's batch norm cannot reshape an empty batch
            return x.new_zeros(0, self.num_classes)
        features = self.blocks(self.stem(GeometricTensor(x, self.in_type)))
        if self.readout == "orbit":
            return self.head(features)
        pooled = self.pool(features).tensor.to(x.dtype)  # escnn's GroupPooling returns float32
        return self.head(pooled.amax(dim=(-2, -1)))

    def train(self, mode: bool = True) -> EscnnHybrid:
        """Set the mode; entering eval mode from training rebuilds the R2Conv filters exactly.

        Only on the transition (as escnn itself caches its filters): calling ``eval()`` on a
        model already in eval mode leaves the cached filters as they are, so that a filter
        edited by hand is checked as it is, never silently repaired (the checker switches
        models to eval mode).
        """
        entering_eval = self.training and not mode
        super().train(mode)
        if entering_eval:
            self._refresh(self)
        return self

    def _apply(self, fn: Any, recurse: bool = True) -> EscnnHybrid:
        super()._apply(fn, recurse)
        self._refresh(self)  # a dtype change would otherwise round the cached filters
        return self


@register_model(
    "escnn_hybrid",
    group="c4",
    input_shape=(1, 20, 20),
    learning_rate=5e-3,
    description="escnn R2Conv stem + groupattn group attention + escnn group pooling (C4 / D4), trivial baseline",
)
def _escnn_hybrid(equivariant: bool = True, **kwargs: Any) -> EscnnHybrid:
    return EscnnHybrid(equivariant=equivariant, **kwargs)
