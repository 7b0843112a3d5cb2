"""Orbital attention: multi-head self-attention over the tokens of any G-set.

Self-attention is equivariant to every permutation of its tokens; the positional bias
is what breaks that. With a bias that is a function of the orbital of each token pair
([`OrbitalBias`][groupattn.positional.OrbitalBias]), attention over the points of a G-set is
equivariant to its group — any finite group: ``S_n`` on a set, a graph's
automorphisms, the symmetries of a hexagonal grid, products, a user's own group.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, ShapeError
from ..actions import (
    FieldType,
    GSet,
    GSetField,
    Representation,
    TrivialRepresentation,
    intertwiner_basis,
)
from ..contracts import Contract, EquivariantModule, Status, contract_of
from ..groups import Group
from ..positional import OrbitalBias, PairwiseBias
from ._global import check_heads
from ._kernel import attend

__all__ = ["OrbitalAttention"]

OrbitalBiasKind = Literal["orbital", "pairwise"] | None


def _representation_matrices(rep: Representation, group: Group) -> list[torch.Tensor]:
    """``ρ(g)`` in float64 for every generator ``g`` of ``group`` (through ``rep.apply``)."""
    eye = torch.eye(rep.dim, dtype=torch.float64)
    return [rep.apply(group, g, eye, 0).contiguous() for g in group.generators()]


class OrbitalAttention(EquivariantModule):
    """Multi-head self-attention over the ``N`` tokens of a G-set, with an orbital bias.

    ``softmax(q kᵀ / √d + bias) v`` through [`attend`][groupattn.attention.attend] (the
    library's one kernel entry point), where the bias ``(num_heads, N, N)`` is
    [`OrbitalBias`][groupattn.positional.OrbitalBias] — one learned value per orbital of
    ``G`` on token pairs, per head. Attention commutes with every joint permutation of
    its tokens and the bias is constant on orbitals, so the layer is equivariant to
    ``G`` (any finite group acting on the tokens; also torus translations through
    [`GSet.grid`][groupattn.actions.GSet.grid]).

    With ``channels`` (a representation ``ρ`` of ``G`` on the token features, e.g.
    regular or permutation) the values carry ``ρ``: value and output maps are
    intertwiners (combinations of the fixed basis
    [`intertwiner_basis`][groupattn.actions.intertwiner_basis] of equivariant maps with learned
    coefficients), and queries and keys are computed from invariant features of the
    tokens only (their projections onto the trivial representation, plus the squared
    norm when ``ρ`` is orthogonal), so the attention weights are invariant and the
    output moves by ``ρ`` like the input.

    Contract under ``gset.group``: *equivariant* from ``GSetField(gset, channels)`` to
    itself. With ``bias="pairwise"`` (one free value per token pair, the baseline)
    *breaks*: "a free bias per token pair is not constant on the orbitals". *Unknown*
    for other groups.

    Shapes: ``(B, N, dim) → (B, N, dim)``.

    Parameters
    ----------
    dim
        Token width ``C`` (``channels.dim`` when ``channels`` is given).
    num_heads
        Number of heads (divides ``dim`` for trivial channels).
    gset
        The tokens and the group acting on them.
    bias
        ``"orbital"`` ([`OrbitalBias`][groupattn.positional.OrbitalBias]), ``"pairwise"``
        ([`PairwiseBias`][groupattn.positional.PairwiseBias], breaks), ``None`` (no bias:
        equivariant to all of ``S_N``), or a bias module returning ``(num_heads, N, N)``
        and declaring a contract (e.g. [`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias]).
    channels
        The representation carried by the features (as the ``channels`` of its field
        type, [`GSetField`][groupattn.actions.GSetField]); ``None`` or trivial for plain
        features.
    qk_dim
        Query/key width per head for ``channels`` (default ``dim // num_heads``, at least 4).
    bias_init_std
        Initial standard deviation of a bias built by name.

    Raises
    ------
    ConfigurationError
        For a ``gset`` that is not a [`GSet`][groupattn.actions.GSet], a width not
        divisible by the heads, a representation of another size, or a representation
        with no invariant features.
    """

    floating_input = True
    heads = DeprecatedAttribute("num_heads")

    @renamed_arguments(heads="num_heads")
    def __init__(
        self,
        dim: int,
        num_heads: int,
        gset: GSet,
        bias: OrbitalBiasKind | nn.Module = "orbital",
        channels: Representation | None = None,
        qk_dim: int | None = None,
        bias_init_std: float = 0.02,
    ) -> None:
        if not isinstance(gset, GSet):
            raise ConfigurationError(f"OrbitalAttention: expected a GSet, got {gset!r}")
        equivariant_channels = channels is not None and not isinstance(
            channels, TrivialRepresentation
        )
        if channels is not None and channels.dim != dim:
            raise ConfigurationError(
                f"OrbitalAttention: expected dim equal to the channel representation's size {channels.dim}, got {dim}"
            )
        field = GSetField(gset, channels if equivariant_channels else None)
        super().__init__(field, field)
        if not equivariant_channels:
            check_heads(dim, num_heads, "OrbitalAttention")
        self.dim, self.num_heads = dim, num_heads
        self.channels = channels if equivariant_channels else None
        self.bias = self._make_bias(bias, gset, num_heads, bias_init_std)
        if self.channels is None:
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
        else:
            self._init_equivariant_channels(gset.group, self.channels, qk_dim)

    @staticmethod
    def _make_bias(kind: Any, gset: GSet, num_heads: int, init_std: float) -> nn.Module | None:
        if kind is None or isinstance(kind, nn.Module):
            return kind
        if kind == "orbital":
            return OrbitalBias(gset, num_heads, init_std=init_std)
        if kind == "pairwise":
            return PairwiseBias(
                gset.num_points, num_heads, init_std=init_std, field_type=GSetField(gset)
            )
        raise ConfigurationError(
            f"OrbitalAttention: expected bias 'orbital', 'pairwise', None or a module, got {kind!r}"
        )

    # ------------------------------------------------------------------ equivariant channels
    def _init_equivariant_channels(
        self, group: Group, rep: Representation, qk_dim: int | None
    ) -> None:
        invariant = intertwiner_basis(rep, TrivialRepresentation(1), group)[:, 0, :]  # (m, dim)
        mats = _representation_matrices(rep, group)
        eye = torch.eye(rep.dim, dtype=torch.float64)
        self.use_norm = all(torch.allclose(m.T @ m, eye, atol=1e-12) for m in mats)
        features = invariant.shape[0] + (1 if self.use_norm else 0)
        if features == 0:
            raise ConfigurationError(
                f"OrbitalAttention: expected a representation with invariant features for the attention "
                f"weights, got {rep!r} (no invariant projection, not orthogonal)"
            )
        basis = intertwiner_basis(rep, rep, group)  # (k, dim, dim)
        # fixed bases: plain tensor attributes moved with the module (see _apply), not state
        self.__dict__["invariant_basis"] = invariant
        self.__dict__["value_basis"] = basis
        d = qk_dim or max(4, self.dim // self.num_heads)
        self.qk_dim = d
        self.query_key = nn.Linear(features, 2 * self.num_heads * d)
        # initial maps Σ c_k B_k with E‖W‖²_F = dim (like a linear layer), whatever the basis scale
        std = (rep.dim / float((basis**2).sum().clamp(min=1e-12))) ** 0.5
        k = basis.shape[0]
        self.value_coefficients = nn.Parameter(torch.randn(self.num_heads, k) * std)
        self.output_coefficients = nn.Parameter(
            torch.randn(self.num_heads, k) * std / self.num_heads**0.5
        )

    def _apply(self, fn: Any, recurse: bool = True) -> Any:  # type: ignore[override]
        out = super()._apply(fn, recurse)
        # the bases stay float64 (cast per call, exact for 0/1 bases); only the device follows
        device = self.value_coefficients.device if "value_basis" in self.__dict__ else None
        for name in ("invariant_basis", "value_basis"):
            if name in self.__dict__ and self.__dict__[name].device != device:
                self.__dict__[name] = self.__dict__[name].to(device)
        return out

    def _forward_equivariant_channels(
        self, x: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        c = x.shape[2]
        inv_basis = self.__dict__["invariant_basis"].to(x.dtype)
        basis = self.__dict__["value_basis"].to(x.dtype)
        feats = [x @ inv_basis.T]  # (B, N, m): projections onto the trivial representation
        if self.use_norm:
            feats.append((x * x).sum(-1, keepdim=True) / c)
        q, k = rearrange(
            self.query_key(torch.cat(feats, -1)),
            "b n (two h d) -> two b h n d",
            two=2,
            h=self.num_heads,
        )
        values = torch.einsum(
            "hk,koi->hoi", self.value_coefficients.to(x.dtype), basis
        )  # (heads, C, C)
        v = torch.einsum("bni,hoi->bhno", x, values)
        y = attend(
            q.contiguous(), k.contiguous(), v, bias, module="OrbitalAttention"
        )  # (B, heads, N, C)
        outputs = torch.einsum("hk,koi->hoi", self.output_coefficients.to(x.dtype), basis)
        return torch.einsum("bhni,hoi->bno", y, outputs)

    # ------------------------------------------------------------------ forward and contract
    @property
    def gset(self) -> GSet:
        """The G-set of the tokens."""
        field = self.in_type
        assert isinstance(field, GSetField)
        return field.gset

    def check_input(self, x: Any) -> None:
        """As [`EquivariantModule.check_input`][groupattn.contracts.EquivariantModule.check_input], and the width must be ``dim``."""
        super().check_input(x)
        if x.shape[2] != self.dim:
            raise ShapeError(
                f"OrbitalAttention: expected tokens (B, N={self.gset.num_points}, C={self.dim}), "
                f"got a tensor of shape {tuple(x.shape)}"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over all tokens: ``(B, N, dim) → (B, N, dim)``."""
        bias = None if self.bias is None else self.bias().unsqueeze(0)
        if self.channels is not None:
            return self._forward_equivariant_channels(x, bias)
        q, k, v = rearrange(
            self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.num_heads
        )
        out = attend(q, k, v, bias, module="OrbitalAttention")
        return self.proj(rearrange(out, "b h n d -> b n (h d)"))

    def breaks_reason(self, group: Group) -> str | None:
        """The bias's reason, if its contract breaks under ``group``."""
        if self.bias is None:
            return None
        contract = contract_of(self.bias, group, _token_layout(self.in_type))
        if contract.kind == Status.BROKEN:
            return f"attention bias: {contract.reason}"
        return None

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant under the G-set's group unless the bias breaks (see the class docstring)."""
        if self.bias is not None and group == self.gset.group:
            bias_contract = contract_of(self.bias, group, _token_layout(self.in_type))
            if bias_contract.kind not in (Status.INVARIANT, Status.BROKEN):
                return Contract.unknown(
                    f"OrbitalAttention: attention bias promises nothing "
                    f"({bias_contract.reason or bias_contract.kind.value})",
                    input_type if input_type is not None else self.in_type,
                )
        return super().contract(group, input_type)

    def extra_repr(self) -> str:
        rep = f", channels={self.channels!r}" if self.channels is not None else ""
        return f"dim={self.dim}, num_heads={self.num_heads}, gset={self.gset.name}{rep}"


def _token_layout(field: FieldType) -> FieldType:
    """The token layout without channels (what a pairwise bias sees)."""
    if isinstance(field, GSetField) and field.channels is not None:
        return GSetField(field.gset)
    return field
