"""Encodings indexed by orbital: pairwise attention biases, orbitals and baselines.

Every pairwise bias here is one code path, [`IndexedTable`][groupattn.positional.IndexedTable]: a table of values of
shape ``(heads, K)`` and a long label per token pair, owned by the module; the bias is
``table[:, label]`` of shape ``(heads, N, N)``. The labels decide the symmetry:

* [`OrbitalBias`][groupattn.positional.OrbitalBias] — labels are the *orbitals* of a group ``G`` acting on the
  tokens (a [`GSet`][groupattn.actions.GSet]): the bias is ``G``-invariant by
  construction, so attention with it is ``G``-equivariant.
* [`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias] — the table is an MLP of a pair invariant (e.g.
  graph shortest-path distance), evaluated once per orbital.
* [`PairwiseBias`][groupattn.positional.PairwiseBias] — one label per pair (a free bias): the non-invariant
  baseline; its contract *breaks* for every group that moves a token.
* [`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] — the orbitals of the torus
  translations; [`ClippedRelativeBias`][groupattn.positional.ClippedRelativeBias] — Swin's clipped
  offsets (not constant on orbitals).
* [`OrbitalTableEncoding`][groupattn.positional.OrbitalTableEncoding] — the roto-translation case
  (p4, p4m, …): the orbitals of ``T ⋊ H`` on the (output, key) pairs of lifting and
  group attention, enumerated by a closed form.

The contract of a label-indexed bias can be decided exactly: with a generic table it is
invariant under ``G`` if and only if every generator ``p`` of the token permutation
preserves the labels, ``label[p(i), p(j)] = label[i, j]``. [`labels_contract`][groupattn.positional.labels_contract] checks
this on the generators.

The label index is the module's own copy, a plain tensor attribute (not a parameter,
not a registered buffer): it moves with the module (``.to(device)``), never enters the
``state_dict`` and does not break ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, ShapeError
from ..actions import FieldType, GSet, GSetField, TokenField
from ..contracts import Contract
from ..groups import Group, GroupError

__all__ = [
    "ContinuousOrbitalBias",
    "IndexedTable",
    "OrbitalBias",
    "PairTableBias",
    "PairwiseBias",
    "gather_pair_table",
    "labels_contract",
    "token_permutation",
]


def gather_pair_table(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather a per-label table into a per-pair bias: ``out[h, i, j] = values[h, index[i, j]]``.

    A pure gather (exact in every dtype).

    Parameters
    ----------
    values
        ``(heads, K)``.
    index
        Long tensor of labels in ``[0, K)``, any shape ``S`` (e.g. ``(N, N)``), on
        ``values``' device.

    Returns
    -------
    torch.Tensor
        ``(heads, *S)``.
    """
    return values.index_select(1, index.reshape(-1)).view(values.shape[0], *index.shape)


def token_permutation(field_type: FieldType, group: Group, g: Any, num_tokens: int) -> torch.Tensor:
    """Where each token of ``field_type`` goes under ``g``: ``perm[i]`` is token ``i``'s new position.

    Read off by acting on a float64 probe ``(1, N, 1)`` holding the token indices, so
    it agrees with ``field_type.act`` by construction. Works for every token layout
    whose action moves whole tokens ([`TokenField`][groupattn.actions.TokenField],
    [`GSetField`][groupattn.actions.GSetField], [`SetField`][groupattn.actions.SetField]); the
    channels are ignored.

    Parameters
    ----------
    field_type
        A token layout ``(B, N, C)``.
    group, g
        The acting group and one of its elements.
    num_tokens
        ``N``.

    Returns
    -------
    torch.Tensor
        Long tensor ``(N,)``.

    Raises
    ------
    GroupError
        If the field type does not accept the group or element, or does not move whole
        tokens.
    """
    stripped = _without_channels(field_type)
    probe = torch.arange(num_tokens, dtype=torch.float64).reshape(1, num_tokens, 1)
    moved = stripped.act(group, g, probe).reshape(-1)  # moved[j] = the token now at j
    src = moved.round().long()
    if (
        moved.shape != (num_tokens,)
        or not torch.equal(src.double(), moved)
        or not torch.equal(torch.sort(src).values, torch.arange(num_tokens))
    ):
        raise GroupError(
            f"token_permutation: expected {field_type.describe()} to move whole tokens under {group.name}, "
            f"got a result that is not a permutation of them"
        )
    perm = torch.empty_like(src)
    perm[src] = torch.arange(num_tokens)
    return perm


def _without_channels(field_type: FieldType) -> FieldType:
    if isinstance(field_type, TokenField) and field_type.channels is not None:
        return TokenField(field_type.grid, field_type.point_group, field_type.prefix)
    if isinstance(field_type, GSetField) and field_type.channels is not None:
        from ..actions import SetField

        if isinstance(field_type, SetField):
            return SetField(field_type.num_points)
        return GSetField(field_type.gset)
    return field_type


def _num_tokens(field_type: FieldType) -> int | None:
    if isinstance(field_type, TokenField):
        return field_type.num_tokens
    if isinstance(field_type, GSetField):
        return field_type.num_points
    return None


def labels_contract(
    labels: torch.Tensor, group: Group, field_type: FieldType, module: str, reason: str
) -> Contract:
    """The exact contract of a bias ``table[:, labels]`` with a generic learned table.

    *Invariant* if every generator of ``group`` (acting on the tokens through
    ``field_type``) preserves the labels, ``labels[p(i), p(j)] = labels[i, j]``; then
    so does every element, and the bias is constant on the orbitals. *Breaks* (with
    ``reason`` and a witness pair) otherwise; *unknown* if ``field_type`` does not
    describe how ``group`` moves the tokens.

    Parameters
    ----------
    labels
        ``(N, N)`` long labels (use ``-1`` for pairs whose bias is a constant, e.g.
        prefix tokens).
    group
        The acting group.
    field_type
        The token layout, ``N`` tokens.
    module
        Name used in the reasons.
    reason
        Why it breaks, in plain words.
    """
    n = labels.shape[0]
    if _num_tokens(field_type) != n:
        return Contract.unknown(
            f"{module}: expected a token layout of {n} tokens, got {field_type.describe()}",
            field_type,
        )
    try:
        generators = group.generators()
        perms = [token_permutation(field_type, group, g, n) for g in generators]
    except (GroupError, ShapeError) as error:  # ShapeError: its own class from the next release on
        return Contract.unknown(
            f"{module}: promises nothing for {group.name} ({error})", field_type
        )
    labels = labels.cpu()
    for g, p in zip(generators, perms):
        moved = labels[p[:, None], p[None, :]]  # moved[i, j] = labels[p(i), p(j)]
        if not torch.equal(moved, labels):
            i, j = (int(v) for v in torch.nonzero(moved != labels)[0])
            return Contract.breaks(
                f"{reason} (under {group.name}: the pairs ({i}, {j}) and ({int(p[i])}, {int(p[j])}), "
                f"related by the generator {_short(g)}, get different table entries)",
                field_type,
            )
    return Contract.invariant(field_type)


def _short(g: object) -> str:
    text = repr(g)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {_short(value)}"


class IndexedTable(nn.Module):
    """Base class of every encoding indexed by orbital: an index it owns, and the gather by it.

    The one "index by orbital" code path of [`groupattn.positional`][groupattn.positional]. A subclass sets
    its labels once with ``_set_labels`` — a long tensor of any shape ``S`` with
    values in ``[0, K)`` — and reads a ``(heads, K)`` table of values through
    [`gather`][groupattn.positional.IndexedTable.gather]: ``out[h, s] = values[h, labels[s]]`` of shape ``(heads, *S)``
    ([`gather_pair_table`][groupattn.positional.gather_pair_table], a pure gather, exact in every dtype). Where the labels
    are orbitals, the result is constant on orbitals by construction.

    Specialisations: [`PairTableBias`][groupattn.positional.PairTableBias] (labels ``(N, N)``, one per token pair:
    [`OrbitalBias`][groupattn.positional.OrbitalBias], [`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias],
    [`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] and the baselines
    [`PairwiseBias`][groupattn.positional.PairwiseBias], [`ClippedRelativeBias`][groupattn.positional.ClippedRelativeBias]) and
    [`OrbitalTableEncoding`][groupattn.positional.OrbitalTableEncoding] (labels ``(|H|, N, |H|, N)``
    and the like: the orbitals of ``T ⋊ H`` on (output, key) pairs of lifting and group
    attention, from the closed form of [`relative_geometry`][groupattn.positional.relative_geometry]).

    The labels, ``pair_index``:

    * belong to the module: ``_set_labels`` copies them, so editing one module's
      index in place reaches neither another module nor the cache it was read from
      (``GSet.orbitals()``, [`relative_geometry`][groupattn.positional.relative_geometry]);
    * are a plain tensor attribute — not a parameter, not a registered buffer: they never
      enter the ``state_dict`` (checkpoints hold weights only, and stay loadable when the
      enumeration of the labels changes), ``.to()``/``.cuda()`` move them with the
      module's parameters, and ``torch.compile`` reads them as a constant attribute,
      without a graph break.

    Other plain tensor attributes a subclass names in ``_plain_tensors`` follow the
    parameters' device the same way (e.g. [`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias]'s features).
    """

    pair_index: torch.Tensor
    _plain_tensors: ClassVar[tuple[str, ...]] = ("pair_index",)
    _num_labels: int

    def _set_labels(self, labels: torch.Tensor, num_labels: int | None = None) -> None:
        """Own a long, contiguous copy of ``labels`` as ``pair_index``.

        Parameters
        ----------
        labels
            Integer tensor of any shape ``S``, values in ``[0, num_labels)``.
        num_labels
            ``K``, the number of table entries; ``labels.max() + 1`` (0 if empty) when
            omitted.

        Raises
        ------
        ConfigurationError
            For labels that are not integers, or a label outside ``[0, K)``.
        """
        name = type(self).__name__
        if (
            not isinstance(labels, torch.Tensor)
            or labels.is_floating_point()
            or labels.is_complex()
            or (labels.dtype == torch.bool)
        ):
            raise ConfigurationError(
                f"{name}: expected an integer label tensor, got {_describe(labels)}"
            )
        owned = labels.detach().long().clone(memory_format=torch.contiguous_format)
        low, high = (int(owned.min()), int(owned.max())) if owned.numel() else (0, -1)
        k = high + 1 if num_labels is None else num_labels
        if low < 0 or high >= k:
            raise ConfigurationError(
                f"{name}: expected labels in [0, {k}), got labels from {low} to {high}"
            )
        # a plain attribute: no parameter, no registered buffer (see the class docstring)
        self.__dict__["pair_index"] = owned
        self._num_labels = k

    @property
    def num_labels(self) -> int:
        """``K``, the number of table entries per head."""
        return self._num_labels

    def _device(self) -> torch.device:
        """Where the labels belong: the first parameter's device (a real tensor, also while
        ``values`` is a tracing proxy), or the labels' own for a module without parameters."""
        reference = next(self.parameters(), None)
        if reference is None:
            return self.pair_index.device if "pair_index" in self.__dict__ else torch.device("cpu")
        return reference.device

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:  # type: ignore[override]
        out = super()._apply(fn, recurse)
        device = self._device()
        for name in self._plain_tensors:
            tensor = self.__dict__.get(name)
            if tensor is not None and tensor.device != device:
                self.__dict__[name] = tensor.to(device)
        return out

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """``out[h, s] = values[h, pair_index[s]]``: the table read by the labels.

        Parameters
        ----------
        values
            ``(heads, K)`` on the module's device.

        Returns
        -------
        torch.Tensor
            ``(heads, *pair_index.shape)``.
        """
        index = self.pair_index
        device = self._device()
        if index.device != device:  # parameters moved without .to()/.cuda() (e.g. assigned)
            index = index.to(device)
        return gather_pair_table(values, index)


class PairTableBias(IndexedTable):
    """Base class: a bias ``(heads, prefix + N, prefix + N)`` read from a table by a label per pair.

    The token-pair case of [`IndexedTable`][groupattn.positional.IndexedTable]: subclasses set ``(N, N)`` labels with
    ``_set_labels`` and implement [`values`][groupattn.positional.PairTableBias.values] (the ``(heads, K)``
    table); [`forward`][groupattn.positional.PairTableBias.forward] gathers ([`gather`][groupattn.positional.IndexedTable.gather]) and pads ``prefix``
    leading tokens with bias 0. The labels are the module's own plain tensor attribute
    ``pair_index``, moved by ``.to()``/``.cuda()`` with the module.

    Contract: see [`labels_contract`][groupattn.positional.labels_contract] (decided from the labels).

    Parameters
    ----------
    num_heads
        Number of attention heads.
    prefix
        Leading tokens outside the pair table (e.g. a class token); their rows and
        columns get bias 0.
    """

    heads = DeprecatedAttribute("num_heads")

    @renamed_arguments(heads="num_heads")
    def __init__(self, num_heads: int, prefix: int = 0) -> None:
        super().__init__()
        if num_heads < 1:
            raise ConfigurationError(
                f"{type(self).__name__}: expected num_heads >= 1, got {num_heads}"
            )
        if prefix < 0:
            raise ConfigurationError(f"{type(self).__name__}: expected prefix >= 0, got {prefix}")
        self.num_heads, self.prefix = num_heads, prefix

    def values(self) -> torch.Tensor:
        """``(heads, K)``: one value per label and head."""
        raise NotImplementedError

    def forward(self) -> torch.Tensor:
        """The bias ``(heads, prefix + N, prefix + N)``."""
        bias = self.gather(self.values())
        if self.prefix:
            bias = nn.functional.pad(bias, (self.prefix, 0, self.prefix, 0))
        return bias

    def padded_labels(self) -> torch.Tensor:
        """``(prefix + N, prefix + N)`` labels on the CPU, ``-1`` on prefix rows and columns."""
        labels = self.pair_index.cpu()
        if self.prefix:
            labels = nn.functional.pad(labels, (self.prefix, 0, self.prefix, 0), value=-1)
        return labels


class _OrbitalLabels(PairTableBias):
    """A pair table whose labels are orbitals (the ``orbital_index`` alias of ``pair_index``)."""

    @property
    def orbital_index(self) -> torch.Tensor:
        """``(N, N)`` long: the orbital label of every token pair."""
        return self.pair_index


class _GSetOrbitals(_OrbitalLabels):
    """A pair table over the orbitals of a G-set: what [`OrbitalBias`][groupattn.positional.OrbitalBias] and
    [`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias] share (the G-set check, the labels, the contract).

    Sets ``field = GSetField(gset)`` and the labels ``gset.orbitals()`` (copied: the
    G-set's cache stays the G-set's).

    Raises
    ------
    ConfigurationError
        If ``gset`` is not a [`GSet`][groupattn.actions.GSet].
    """

    def __init__(self, gset: GSet, num_heads: int) -> None:
        super().__init__(num_heads)
        if not isinstance(gset, GSet):
            raise ConfigurationError(
                f"{type(self).__name__}: expected a GSet, got {_describe(gset)}"
            )
        self.field = GSetField(gset)
        self._set_labels(gset.orbitals())

    @property
    def gset(self) -> GSet:
        """The G-set of the tokens."""
        return self.field.gset

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant under the G-set's group; otherwise decided from the orbitals."""
        field = input_type if isinstance(input_type, FieldType) else self.field
        if field == self.field and group == self.gset.group:
            return Contract.invariant(field)
        return labels_contract(
            self.orbital_index,
            group,
            field,
            type(self).__name__,
            f"the orbitals of {self.gset.group.name} are not unions of orbitals of {group.name}",
        )

    def extra_repr(self) -> str:
        return f"gset={self.gset.name}, num_heads={self.num_heads}, orbitals={self.num_labels}"


class OrbitalBias(_GSetOrbitals):
    """A learned attention bias with one value per orbital of ``G`` on token pairs, per head.

    ``bias[h, i, j] = table[h, orbital(i, j)]`` with the orbital labels of
    ``gset.orbitals()`` (computed from the generators once, at construction, and copied
    into the module). Two pairs get the same value exactly when some group element maps
    one onto the other, so the bias is the most expressive ``G``-invariant learned bias:
    for ``S_n`` it has 2 values per head (``i = j`` and ``i ≠ j``), for a graph's
    automorphisms one per orbital of node pairs, for torus translations one per circular
    offset.

    Contract: *invariant* under ``gset.group`` (input type
    ``GSetField(gset)``); under another group acting on the tokens through a given
    input type, decided exactly by [`labels_contract`][groupattn.positional.labels_contract].

    Shapes: ``() → (heads, N, N)``.

    Parameters
    ----------
    gset
        The tokens and the group acting on them.
    num_heads
        Number of attention heads.
    init_std
        Standard deviation of the normal initialisation of the table.

    Raises
    ------
    ConfigurationError
        If ``gset`` is not a [`GSet`][groupattn.actions.GSet] or ``num_heads < 1``.

    Examples
    --------
    >>> from groupattn.actions import GSet
    >>> from groupattn.groups import SymmetricGroup
    >>> bias = OrbitalBias(GSet.natural(SymmetricGroup(5)), num_heads=2)
    >>> bias().shape, bias.table.shape
    (torch.Size([2, 5, 5]), torch.Size([2, 2]))
    """

    @renamed_arguments(heads="num_heads")
    def __init__(self, gset: GSet, num_heads: int, init_std: float = 0.02) -> None:
        super().__init__(gset, num_heads)
        self.table = nn.Parameter(torch.randn(num_heads, self.num_labels) * init_std)

    def values(self) -> torch.Tensor:
        """The learned table ``(heads, K)``, ``K`` = number of orbitals."""
        return self.table


class ContinuousOrbitalBias(_GSetOrbitals):
    """An attention bias given by an MLP of a pair invariant, evaluated once per orbital.

    ``bias[h, i, j] = mlp(f(i, j) / scale)[h]`` for a user-supplied pair invariant
    ``f`` (e.g. the shortest-path distance on a graph, the distance between two cells,
    a number of shared neighbours). ``f`` must be constant on the orbitals of ``G``
    (checked at construction); the MLP then runs on one representative per orbital
    and the result is gathered by orbital label, so the bias is *exactly* invariant —
    even when ``f`` is computed with rounding — and costs ``K`` MLP evaluations, not
    ``N²``. Unlike [`OrbitalBias`][groupattn.positional.OrbitalBias] it shares parameters across orbitals and can
    extrapolate (e.g. to distances it never saw).

    Contract: *invariant* under ``gset.group`` (input type ``GSetField(gset)``);
    otherwise decided from the orbitals ([`labels_contract`][groupattn.positional.labels_contract]).

    Shapes: ``() → (heads, N, N)``.

    Parameters
    ----------
    gset
        The tokens and the group acting on them.
    num_heads
        Number of attention heads.
    invariant_fn
        Either a tensor of shape ``(N, N)`` or ``(N, N, F)`` holding the invariant of
        every pair, or a callable ``f(i, j)`` of two long tensors of shape ``(N, N)``
        (all row and column indices) returning such a tensor (e.g.
        ``lambda i, j: distance[i, j]``).
    hidden
        Width of the MLP's hidden layer.
    tolerance
        Largest spread of ``f`` within one orbital that counts as constant (relative to
        ``max(1, max|f|)``).
    init_std
        Scale of the initial bias (standard deviation of the output layer's weights
        times ``√hidden``).

    Raises
    ------
    ConfigurationError
        If ``gset`` is not a [`GSet`][groupattn.actions.GSet], or ``f`` has the wrong
        shape or is not finite.
    GroupError
        If ``f`` is not constant on an orbital (naming the orbital, two of its pairs and
        their values).
    """

    features: torch.Tensor
    _plain_tensors: ClassVar[tuple[str, ...]] = ("pair_index", "features")

    @renamed_arguments(heads="num_heads")
    def __init__(
        self,
        gset: GSet,
        num_heads: int,
        invariant_fn: torch.Tensor | Callable[[torch.Tensor, torch.Tensor], Any],
        hidden: int = 16,
        tolerance: float = 1e-9,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(gset, num_heads)
        name = "ContinuousOrbitalBias"
        n = gset.num_points
        if callable(invariant_fn) and not isinstance(invariant_fn, torch.Tensor):
            i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            raw = invariant_fn(i, j)
        else:
            raw = invariant_fn
        values = torch.as_tensor(raw, dtype=torch.float64).cpu()
        if values.dim() == 2:
            values = values.unsqueeze(-1)
        if values.dim() != 3 or values.shape[:2] != (n, n):
            raise ConfigurationError(
                f"{name}: expected pair invariants of shape (N, N) or (N, N, F) with N={n}, "
                f"got {tuple(torch.as_tensor(raw).shape)}"
            )
        if not bool(torch.isfinite(values).all()):
            raise ConfigurationError(f"{name}: expected finite pair invariants, got inf or nan")
        k = self.num_labels
        flat, labels = values.reshape(n * n, -1), self.pair_index.reshape(-1)
        f = flat.shape[1]
        lo = torch.full((k, f), float("inf"), dtype=torch.float64).scatter_reduce(
            0, labels[:, None].expand(-1, f), flat, reduce="amin"
        )
        hi = torch.full((k, f), float("-inf"), dtype=torch.float64).scatter_reduce(
            0, labels[:, None].expand(-1, f), flat, reduce="amax"
        )
        scale = flat.abs().amax(0).clamp(min=1.0)
        spread = (hi - lo) / scale
        if bool((spread > tolerance).any()):
            bad = int(torch.nonzero((spread > tolerance).any(-1))[0])
            members = torch.nonzero(labels == bad).flatten()
            a = int(members[torch.argmin(flat[members].sum(-1))])
            b = int(members[torch.argmax(flat[members].sum(-1))])
            raise GroupError(
                f"{name}: expected an invariant constant on the orbitals of {gset.group.name}, got "
                f"{flat[a].tolist()} on pair ({a // n}, {a % n}) and {flat[b].tolist()} on pair "
                f"({b // n}, {b % n}) of orbital {bad}"
            )
        first = torch.full((k,), n * n, dtype=torch.long).scatter_reduce(
            0, labels, torch.arange(n * n), reduce="amin"
        )
        norm = flat.abs().amax(0)
        norm = torch.where(norm > 0, norm, torch.ones_like(norm))
        self.__dict__["features"] = (flat[first] / norm).contiguous()  # (K, F), one per orbital
        self.num_features = f
        inner, last = (
            nn.Linear(f, hidden),
            nn.Linear(hidden, num_heads),
        )  # in this order (seeded inits)
        self.mlp = nn.Sequential(inner, nn.GELU(), last)
        nn.init.normal_(last.weight, std=init_std / hidden**0.5)
        nn.init.zeros_(last.bias)

    def values(self) -> torch.Tensor:
        """``(heads, K)``: the MLP of each orbital's invariant (normalised by its largest magnitude)."""
        weight = cast(nn.Linear, self.mlp[0]).weight
        features = self.features.to(device=weight.device, dtype=weight.dtype)
        return self.mlp(features).transpose(0, 1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, features={self.num_features}"


class PairwiseBias(PairTableBias):
    """A free learned bias per ordered token pair — the non-invariant baseline.

    ``bias[h, i, j] = table[h, i·N + j]``: ``N²`` values per head. It can express any
    pairwise bias, including absolute position, so it is not constant on the orbitals
    of any group that moves a token.

    Contract: *breaks* under every group that moves a token ("a free bias per token
    pair is not constant on the orbitals"), with a witness pair; *invariant* only under
    a group acting trivially.

    Shapes: ``() → (heads, N, N)``.

    Parameters
    ----------
    num_points
        ``N``.
    num_heads
        Number of attention heads.
    init_std
        Standard deviation of the normal initialisation of the table.
    field_type
        The token layout stated in the contract when none is given
        (``SetField(num_points)`` by default).
    """

    @renamed_arguments(heads="num_heads")
    def __init__(
        self,
        num_points: int,
        num_heads: int,
        init_std: float = 0.02,
        field_type: FieldType | None = None,
    ) -> None:
        super().__init__(num_heads)
        from ..actions import SetField

        if num_points < 1:
            raise ConfigurationError(f"PairwiseBias: expected num_points >= 1, got {num_points}")
        self.num_points = num_points
        self.field = field_type or SetField(num_points)
        self._set_labels(torch.arange(num_points * num_points).reshape(num_points, num_points))
        self.table = nn.Parameter(torch.randn(num_heads, num_points * num_points) * init_std)

    def values(self) -> torch.Tensor:
        """The learned table ``(heads, N²)``."""
        return self.table

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks under every group that moves a token."""
        field = input_type if isinstance(input_type, FieldType) else self.field
        return labels_contract(
            self.pair_index,
            group,
            field,
            "PairwiseBias",
            "a free bias per token pair is not constant on the orbitals",
        )

    def extra_repr(self) -> str:
        return f"num_points={self.num_points}, num_heads={self.num_heads}"
