"""Equivariance for any backbone: frame averaging and canonicalization wrappers.

[`FrameAveraging`][groupattn.nn.FrameAveraging] averages an arbitrary network over the
transformed copies of its input (exact over a whole finite group, approximate over a
subset), and [`Canonicalized`][groupattn.nn.Canonicalized] runs it on a canonical input
chosen by an arg-max canonicalizer — a fixed score ([`norm_score`][groupattn.nn.norm_score])
or a learned one ([`LearnedCanonicalizer`][groupattn.nn.LearnedCanonicalizer]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._errors import ConfigurationError, ShapeError
from ..actions import FieldType, GridField, InvariantField
from ..actions._spatial import embed_point_element
from ..canonical import ArgmaxCanonicalizer
from ..canonical import Canonicalized as CanonicalizedOutput
from ..contracts import Contract, Status, contract_of
from ..contracts._module import check_floating_input
from ..groups import FiniteGroup, Group, GroupElement, GroupError, PointGroup

__all__ = ["Canonicalized", "FrameAveraging", "LearnedCanonicalizer", "norm_score"]

_OUTPUTS = ("invariant", "equivariant")


def _acting_generators(acting: Group, group: FiniteGroup, module: str) -> list[GroupElement] | str:
    """The generators of ``acting`` as elements of ``group``, or why they are not."""
    if acting == group:
        return list(group.generators())
    if isinstance(acting, PointGroup) and isinstance(group, PointGroup):
        try:
            return [embed_point_element(h, group, module) for h in acting.generators()]
        except GroupError as err:
            return str(err)
    return (
        f"{module}: averages over {group.name}; expected {group.name} or a point group it "
        f"contains, got {acting.name}"
    )


def _main_tensor(y: Any, module: str, part: str) -> torch.Tensor:
    if not isinstance(y, torch.Tensor):
        raise ConfigurationError(
            f"{module}: expected the {part} to return a tensor, got {type(y).__name__}"
        )
    return y


class FrameAveraging(nn.Module):
    """Make any network exactly invariant or equivariant by averaging over a finite group.

    With the frame ``S`` (all elements of ``group`` by default) and the wrapped network
    ``φ``:

    - ``output="invariant"``: ``f(x) = 1/|S| Σ_{g∈S} φ(g⁻¹·x)``, so
      ``f(h·x) = f(x)``;
    - ``output="equivariant"``: ``f(x) = 1/|S| Σ_{g∈S} g·φ(g⁻¹·x)``, so
      ``f(h·x) = h·f(x)`` — for a network whose output is a field the group acts on
      (``output_type``, e.g. an image-to-image network with [`GridField`][groupattn.actions.GridField]).

    Guarantee: exact (up to the rounding of a sum taken in another order) under every
    ``h`` with ``h·S = S`` — with all elements, under ``group`` and every subgroup —
    whatever ``φ`` is, provided ``φ`` is deterministic (evaluation mode: active dropout,
    or batch statistics of calls split by ``chunk``, break exactness), with one backbone
    call per element (``chunk=1``, the default): the calls for ``h·x`` are those for
    ``x`` in another order, even for a backbone that mixes the samples of its batch.
    Several elements per call (``chunk > 1`` or ``None``) are exact only for a backbone
    that treats samples independently, which is not checked: the contract is then
    *unverified*. A frame of ``k`` of the ``|G|`` elements (``elements=``) is an
    approximation: *unverified* ("averages over k of |G| elements: approximate") unless
    ``h·S = S``.

    Cost: ``|S|`` times the backbone's work, in ``|S|`` calls of ``B`` samples (``chunk=1``)
    or in calls of ``chunk`` elements' copies (``None``: one call of ``|S|·B``).

    Shapes: ``x`` ``(B, ...)`` in ``field_type``'s layout (images ``(B, C, H, W)`` by
    default) → the backbone's output shape.

    Parameters
    ----------
    backbone
        Any module mapping ``(N, ...)`` inputs to a tensor ``(N, ...)``.
    group
        The finite group to average over (``CyclicGroup(4)``, ``DihedralGroup(4)``, a
        finite translation or roto-translation group, …).
    output
        ``"invariant"`` or ``"equivariant"``.
    field_type
        How the group acts on the input (default: images).
    output_type
        How the group acts on the backbone's output (``"equivariant"`` only; default:
        ``field_type``).
    elements
        The frame: elements (or raw values) of ``group``; ``None`` for all (exact).
        Repeated elements are counted once.
    chunk
        At most this many group elements per backbone call (default 1: the exact,
        certifiable form; ``None``: all at once, faster for small backbones, contract
        *unverified*).

    Raises
    ------
    ConfigurationError
        For a group that is not finite, an unknown ``output``, an ``output_type`` with
        ``output="invariant"``, a bad ``chunk``, an empty frame, or a field type that is
        not a [`FieldType`][groupattn.actions.FieldType].
    GroupError
        For an element that is not in ``group``.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from groupattn.groups import CyclicGroup
    >>> cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    >>> model = FrameAveraging(cnn, CyclicGroup(4))
    >>> x = torch.randn(2, 1, 8, 8)
    >>> torch.allclose(model(x), model(torch.rot90(x, 1, (-2, -1))), atol=1e-6)
    True
    """

    def __init__(
        self,
        backbone: nn.Module,
        group: FiniteGroup,
        output: str = "invariant",
        field_type: FieldType | None = None,
        output_type: FieldType | None = None,
        elements: Sequence[Any] | None = None,
        chunk: int | None = 1,
    ) -> None:
        super().__init__()
        name = "FrameAveraging"
        if not isinstance(backbone, nn.Module):
            raise ConfigurationError(
                f"{name}: expected an nn.Module as backbone, got {type(backbone).__name__}"
            )
        if not isinstance(group, FiniteGroup):
            raise ConfigurationError(f"{name}: expected a finite group, got {group!r}")
        if output not in _OUTPUTS:
            raise ConfigurationError(
                f"{name}: expected output 'invariant' or 'equivariant', got {output!r}"
            )
        field_type = GridField() if field_type is None else field_type
        if not isinstance(field_type, FieldType):
            raise ConfigurationError(f"{name}: expected a FieldType, got {field_type!r}")
        if output == "invariant":
            if output_type is not None and not output_type.is_invariant:
                raise ConfigurationError(
                    f"{name}: expected no output_type (or an invariant one) with "
                    f"output='invariant', got {output_type!r}"
                )
            output_type = InvariantField()
        elif output_type is None:
            output_type = field_type
        if not isinstance(output_type, FieldType):
            raise ConfigurationError(f"{name}: expected a FieldType, got {output_type!r}")
        if chunk is not None and (
            isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1
        ):
            raise ConfigurationError(
                f"{name}: expected chunk a positive int or None, got {chunk!r}"
            )
        frame: list[GroupElement] = []
        for e in group.elements() if elements is None else elements:
            g = group.element(e)
            if g not in frame:
                frame.append(g)
        if not frame:
            raise ConfigurationError(f"{name}: expected at least one element, got none")
        self.backbone = backbone
        self.group = group
        self.output = output
        self.field_type = field_type
        self.output_type = output_type
        self.elements: list[GroupElement] = frame
        self.chunk = chunk
        self._inverses = [g.inverse() for g in frame]

    @property
    def exact(self) -> bool:
        """Whether the frame is the whole group (the average is exact)."""
        return len(self.elements) == self.group.order()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Average the backbone over the frame.

        Parameters
        ----------
        x
            ``(B, ...)`` in ``field_type``'s layout.

        Returns
        -------
        torch.Tensor
            The backbone's output shape, ``(B, ...)``; invariant (or moving by
            ``output_type``) under the group.

        Raises
        ------
        ShapeError
            For an input that does not fit ``field_type``, or that the group does not
            map onto itself (C4 on a non-square image).
        DtypeError
            For an integer or bool input.
        """
        name = "FrameAveraging"
        if not isinstance(x, torch.Tensor):
            raise ShapeError(f"{name}: expected a tensor, got {type(x).__name__}")
        self.field_type.check(x, name)
        check_floating_input(x, name)
        moved = [self.field_type.act(self.group, g, x) for g in self._inverses]
        for g, m in zip(self._inverses, moved, strict=True):
            if m.shape != x.shape:
                raise ShapeError(
                    f"{name}: expected an input that {self.group.name} maps onto itself "
                    f"(e.g. a square image for rotations), got shape {tuple(x.shape)} "
                    f"(moved to {tuple(m.shape)} by {g})"
                )
        k, b = len(moved), x.shape[0]
        step = k if self.chunk is None else self.chunk
        parts = []
        for start in range(0, k, step):
            batch = torch.cat(moved[start : start + step])
            parts.append(_main_tensor(self.backbone(batch), name, "backbone"))
        y = torch.cat(parts) if len(parts) > 1 else parts[0]
        if y.dim() < 1 or y.shape[0] != k * b:
            raise ShapeError(
                f"{name}: expected the backbone to keep the batch axis ({k * b} copies), "
                f"got an output of shape {tuple(y.shape)}"
            )
        ys = y.reshape(k, b, *y.shape[1:])
        if self.output == "equivariant":
            ys = torch.stack(
                [self.output_type.act(self.group, g, ys[i]) for i, g in enumerate(self.elements)]
            )
        return ys.mean(dim=0)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant or equivariant under ``group`` when the frame is closed under it.

        Whatever the backbone declares: the average is exact under every ``h`` with
        ``h·S = S`` (all elements of the frame group, and its subgroups, for the whole
        group). A proper subset of the group is approximate: *unverified*.
        """
        name = "FrameAveraging"
        in_type = self.field_type if input_type is None else input_type
        if in_type != self.field_type:
            return Contract.unknown(
                f"{name}: expected input type {self.field_type.describe()}, got {in_type!r}",
                in_type,
            )
        gens = _acting_generators(group, self.group, name)
        if isinstance(gens, str):
            return Contract.unknown(gens, in_type)
        frame = set(self.elements)
        if not all({h * s for s in self.elements} == frame for h in gens):
            return Contract.unknown(
                f"{name}: averages over {len(self.elements)} of {self.group.order()} "
                f"elements: approximate",
                in_type,
            )
        # dropout draws differently for every copy; batch statistics computed per chunk
        # differ between an input and its transform (over the whole stacked batch they
        # are permutation-invariant): the average is exact only for a backbone that maps
        # each sample deterministically
        stochastic = [
            n or "backbone"
            for n, m in self.backbone.named_modules()
            if m.training and "Dropout" in type(m).__name__ and float(getattr(m, "p", 0.0)) > 0
        ]
        coupled = [
            n or "backbone"
            for n, m in self.backbone.named_modules()
            if m.training and isinstance(m, nn.modules.batchnorm._BatchNorm)
        ]
        if stochastic or (coupled and self.chunk is not None):
            where = (stochastic or coupled)[0]
            return Contract.unknown(
                f"{name}: expected a backbone that maps each sample deterministically, got "
                f"{'dropout' if stochastic else 'batch statistics per chunk'} in training mode at "
                f"{where!r}; call .eval()",
                in_type,
            )
        if self.chunk != 1:
            # copies of several group elements in one backbone call are exact only if the
            # backbone treats the samples of a batch independently, which nothing checks
            # (a batch-mixing backbone — cumsum over the batch, x - x[:1] — breaks it); one
            # call per element is exact for any deterministic backbone: the calls for h·x
            # are those for x, in another order
            return Contract.unknown(
                f"{name}: expected chunk=1 (one backbone call per group element) for an exact "
                f"average, got chunk={self.chunk}: a batched call is exact only for a backbone "
                "that treats samples independently, which is not checked",
                in_type,
            )
        if self.output == "invariant":
            return Contract.invariant(in_type)
        return Contract.equivariant(in_type, self.output_type)

    def extra_repr(self) -> str:
        return (
            f"group={self.group.name}, output={self.output!r}, "
            f"elements={len(self.elements)}/{self.group.order()}, chunk={self.chunk}"
        )


class _NormScore(nn.Module):
    """``score(z) = ‖w ⋆ z‖²`` per sample for a fixed seeded filter ``w`` (see ``norm_score``)."""

    weight: torch.Tensor

    def __init__(self, channels: int, kernel_size: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        weight = torch.randn(4, channels, kernel_size, kernel_size, generator=generator)
        self.register_buffer("weight", weight.double())
        self.channels = channels

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.dim() != 4 or z.shape[1] != self.channels:
            raise ShapeError(
                f"norm_score: expected an image batch (B, C={self.channels}, H, W), "
                f"got {tuple(z.shape)}"
            )
        response = F.conv2d(z, self.weight.to(z.dtype), padding=self.weight.shape[-1] // 2)
        return response.square().sum(dim=(1, 2, 3))


def norm_score(channels: int, kernel_size: int = 3, seed: int = 0) -> nn.Module:
    """A fixed orientation-sensitive score for [`ArgmaxCanonicalizer`][groupattn.canonical.ArgmaxCanonicalizer]: ``‖w ⋆ z‖²``.

    ``w`` is a fixed random (seeded) bank of 4 filters, ``k × k`` with ``k`` odd and
    zero "same" padding, so the score of a rotated or reflected image is the norm of
    the image filtered with the rotated filters: generically a different number for
    each candidate (that is what lets the arg-max pick an orientation), while the
    candidates' *set* of scores is the same for every image of an orbit, so the chosen
    canonical image is the same (up to ties). The score is the squared L2 norm of the
    response per sample, computed in the candidates' dtype (float64 in
    [`ArgmaxCanonicalizer`][groupattn.canonical.ArgmaxCanonicalizer] with
    ``fixed_precision=True``).

    Parameters
    ----------
    channels
        The input images' channel count ``C``.
    kernel_size
        Odd filter size ``k``.
    seed
        Seed of the filters.

    Returns
    -------
    nn.Module
        Maps ``(N, C, H, W)`` to scores ``(N,)``.

    Raises
    ------
    ConfigurationError
        For a non-positive ``channels`` or an even or non-positive ``kernel_size``.
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ConfigurationError(f"norm_score: expected channels a positive int, got {channels!r}")
    if (
        isinstance(kernel_size, bool)
        or not isinstance(kernel_size, int)
        or kernel_size < 1
        or kernel_size % 2 == 0
    ):
        raise ConfigurationError(
            f"norm_score: expected kernel_size an odd positive int, got {kernel_size!r}"
        )
    return _NormScore(channels, kernel_size, seed)


class LearnedCanonicalizer(nn.Module):
    """Learned canonicalization (Kaba et al., 2023): a small network scores each candidate.

    Every element ``g_k`` of the finite ``group`` is a candidate; ``scorer`` maps each
    transformed input ``g_k·x`` to one scalar, the best-scoring candidate is returned.
    The decision is an [`ArgmaxCanonicalizer`][groupattn.canonical.ArgmaxCanonicalizer]
    (kept as ``self.canonicalizer``) whose output group is trivial, since all the group's
    elements are candidates: the output is **invariant** — the same canonical image for
    every image of an orbit — except at ties (two candidates with equal float64 scores,
    reported with a margin of 0 and broken by the lowest index; see
    [`record_canonicalizations`][groupattn.canonical.record_canonicalizations]). Any
    scorer works: it needs no symmetry of its own.

    With ``fixed_precision=True`` (default) the scorer runs in float64 on float64
    candidates (its parameters are cast for the call), so the decision does not depend
    on the network's precision; ``fixed_precision=False`` scores in the input's dtype and
    the contract promises nothing (*unverified*), as for ``ArgmaxCanonicalizer``.

    Training: the arg-max has no gradient, so the scorer learns only through an
    auxiliary loss; [`prior_loss`][groupattn.nn.LearnedCanonicalizer.prior_loss] is
    Kaba et al.'s canonicalization prior (cross-entropy of the candidates' scores
    towards the identity, so that upright inputs stay upright).

    Shapes: ``(B, ...)`` in ``field_type``'s layout →
    [`groupattn.canonical.Canonicalized`][groupattn.canonical.Canonicalized] with
    ``output`` of the same shape, ``frame`` ``(B,)`` and ``margin`` ``(B,)``.

    Parameters
    ----------
    group
        The finite group whose elements are the candidates.
    scorer
        A module mapping ``(N, ...)`` to ``(N,)`` or ``(N, 1)`` scores; it must treat
        samples independently (eval-mode batch norm).
    field_type
        How the group acts on the input (default: images).
    fixed_precision
        Score in float64 (default); ``False`` gives up the contract.

    Raises
    ------
    ConfigurationError
        For a group that is not finite or a scorer that is not a module.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from groupattn.groups import CyclicGroup
    >>> scorer = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.LazyLinear(1))
    >>> canon = LearnedCanonicalizer(CyclicGroup(4), scorer)
    >>> canon(torch.randn(3, 1, 6, 6)).frame.shape
    torch.Size([3])
    """

    def __init__(
        self,
        group: FiniteGroup,
        scorer: nn.Module,
        field_type: FieldType | None = None,
        fixed_precision: bool = True,
    ) -> None:
        super().__init__()
        name = "LearnedCanonicalizer"
        if not isinstance(group, FiniteGroup):
            raise ConfigurationError(f"{name}: expected a finite group, got {group!r}")
        if not isinstance(scorer, nn.Module):
            raise ConfigurationError(
                f"{name}: expected an nn.Module as scorer, got {type(scorer).__name__}"
            )
        self.scorer = scorer
        self.group = group
        # The canonicalizer holds the score as a plain function (not a submodule): the
        # scorer's parameters belong to this module once.
        self.canonicalizer = ArgmaxCanonicalizer(
            group,
            self._score,
            field_type=field_type,
            output_group=_trivial(),
            fixed_precision=fixed_precision,
        )

    @property
    def field_type(self) -> FieldType:
        """How the group acts on the input."""
        return self.canonicalizer.field_type

    @property
    def fixed_precision(self) -> bool:
        """Whether candidates are scored in float64."""
        return self.canonicalizer.fixed_precision

    @property
    def candidates(self) -> list[GroupElement]:
        """The candidate elements: all elements of ``group``."""
        return self.canonicalizer.candidates

    def _score(self, z: torch.Tensor) -> torch.Tensor:
        params = {
            n: (t.to(z.dtype) if t.is_floating_point() else t)
            for n, t in [*self.scorer.named_parameters(), *self.scorer.named_buffers()]
        }
        s = torch.func.functional_call(self.scorer, params, (z,))
        s = _main_tensor(s, "LearnedCanonicalizer", "scorer")
        if s.dim() == 2 and s.shape[1] == 1:
            s = s[:, 0]
        return s

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The scorer's score of every candidate, differentiable (in the scorer's dtype).

        Parameters
        ----------
        x
            ``(B, ...)`` in ``field_type``'s layout.

        Returns
        -------
        torch.Tensor
            ``(B, K)``, column ``k`` for ``candidates[k]``.
        """
        self.field_type.check(x, "LearnedCanonicalizer")
        moved = torch.cat([self.field_type.act(self.group, g, x) for g in self.candidates])
        s = _main_tensor(self.scorer(moved), "LearnedCanonicalizer", "scorer")
        return s.reshape(len(self.candidates), x.shape[0]).transpose(0, 1)

    def prior_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Canonicalization prior: cross-entropy of the scores towards the identity.

        Parameters
        ----------
        x
            ``(B, ...)`` training inputs (assumed mostly in their upright pose).

        Returns
        -------
        torch.Tensor
            A scalar loss; add it (weighted) to the task loss to train the scorer.
        """
        scores = self.scores(x)
        target = self.candidates.index(self.group.identity())
        labels = torch.full((x.shape[0],), target, dtype=torch.long, device=x.device)
        return F.cross_entropy(scores, labels)

    def forward(self, x: torch.Tensor) -> CanonicalizedOutput:
        """Canonicalize ``x`` (see the class docstring).

        Parameters
        ----------
        x
            ``(B, ...)`` in ``field_type``'s layout.

        Returns
        -------
        groupattn.canonical.Canonicalized
            ``output`` as ``x``; ``frame`` long ``(B,)``; ``margin`` float64 ``(B,)``.
        """
        if isinstance(x, torch.Tensor):
            check_floating_input(x, "LearnedCanonicalizer")
        # ``forward`` called directly, not through the module: the checker keeps an
        # ArgmaxCanonicalizer *module call* whole and trusts its score, which here is a
        # user network it has not checked; traced, the arg-max stays untracked (unverified)
        out: CanonicalizedOutput = ArgmaxCanonicalizer.forward(self.canonicalizer, x)
        return out

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """*Unverified*: the arg-max is exact only when the scorer maps each sample on its
        own (a scorer that reads a sample's place in the batch, or mixes samples, breaks
        it), and a user's network is not checked for that."""
        inner = self.canonicalizer.contract(group, input_type)
        return Contract.unknown(
            "LearnedCanonicalizer: its scorer is a user network whose per-sample evaluation is not "
            f"checked (a scorer that mixes samples breaks the arg-max); the arg-max itself: {inner.describe()}",
            inner.input_type,
        )


def _trivial() -> FiniteGroup:
    from ..groups import CyclicGroup

    return CyclicGroup(1)


def _is_trivial(group: Group | None) -> bool:
    return isinstance(group, FiniteGroup) and group.order() == 1


class Canonicalized(nn.Module):
    """Run any network on a canonical input: invariance by canonicalization.

    ``f(x) = φ(c(x).output)`` for a canonicalizer ``c`` (an
    [`ArgmaxCanonicalizer`][groupattn.canonical.ArgmaxCanonicalizer] over all elements of
    C4 / D4 with ``output_group=CyclicGroup(1)``, a
    [`LearnedCanonicalizer`][groupattn.nn.LearnedCanonicalizer], …) and any backbone ``φ``.

    Guarantee: when the canonicalizer's contract is *canonicalizing* with a trivial
    output group (every element of the group scored), ``f(h·x) = f(x)`` exactly for
    every ``h`` of the group — except at **ties**, samples whose two best candidate
    scores are equal in float64 (margin 0, broken by the lowest index, which does not
    move with the input; measure them with
    [`record_canonicalizations`][groupattn.canonical.record_canonicalizations] or the
    returned margins of ``canonicalizer``). A canonicalizer that scores in the input's
    dtype (``fixed_precision=False``) promises nothing: the contract is *unverified*.
    With a non-trivial output group (e.g. polyphase anchoring, which leaves the shifts
    by the stride), ``f`` is invariant only if the backbone is invariant under that
    group by its own contract.

    Cost: the canonicalizer's scoring (``|G|`` candidates) plus one backbone call.

    Shapes: ``(B, ...)`` in the canonicalizer's layout → the backbone's output.

    Parameters
    ----------
    backbone
        Any module mapping the canonical input to a tensor.
    canonicalizer
        A module returning [`groupattn.canonical.Canonicalized`][groupattn.canonical.Canonicalized].

    Raises
    ------
    ConfigurationError
        For a backbone or canonicalizer that is not a module, or a canonicalizer
        without a ``contract`` method.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from groupattn.canonical import ArgmaxCanonicalizer
    >>> from groupattn.groups import CyclicGroup
    >>> canon = ArgmaxCanonicalizer(CyclicGroup(4), norm_score(1), output_group=CyclicGroup(1))
    >>> model = Canonicalized(nn.Sequential(nn.Flatten(), nn.Linear(36, 2)), canon)
    >>> model(torch.randn(2, 1, 6, 6)).shape
    torch.Size([2, 2])
    """

    def __init__(self, backbone: nn.Module, canonicalizer: nn.Module) -> None:
        super().__init__()
        name = "Canonicalized"
        if not isinstance(backbone, nn.Module):
            raise ConfigurationError(
                f"{name}: expected an nn.Module as backbone, got {type(backbone).__name__}"
            )
        if not isinstance(canonicalizer, nn.Module) or not callable(
            getattr(canonicalizer, "contract", None)
        ):
            raise ConfigurationError(
                f"{name}: expected a canonicalizer module with a contract (ArgmaxCanonicalizer, "
                f"LearnedCanonicalizer, PolyphaseAnchor), got {type(canonicalizer).__name__}"
            )
        self.backbone = backbone
        self.canonicalizer = canonicalizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Canonicalize ``x``, then run the backbone.

        Parameters
        ----------
        x
            ``(B, ...)`` in the canonicalizer's layout.

        Returns
        -------
        torch.Tensor
            The backbone's output for the canonical input.

        Raises
        ------
        DtypeError
            For an integer or bool input.
        """
        if isinstance(x, torch.Tensor):
            check_floating_input(x, "Canonicalized")
        canonical = self.canonicalizer(x)
        output = getattr(canonical, "output", None)
        if not isinstance(output, torch.Tensor):
            raise ConfigurationError(
                f"Canonicalized: expected the canonicalizer to return a Canonicalized "
                f"(output, frame, margin), got {type(canonical).__name__}"
            )
        return _main_tensor(self.backbone(output), "Canonicalized", "backbone")

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant (up to ties) when the canonicalizer leaves no group acting.

        *Invariant* if the canonicalizer's contract under ``group`` is *canonicalizing*
        with a trivial output group, or with an output group under which the backbone's
        own contract is invariant; otherwise *unverified* with the reason.
        """
        name = "Canonicalized"
        inner = contract_of(self.canonicalizer, group, input_type)
        in_type = inner.input_type if input_type is None else input_type
        if inner.kind != Status.CANONICALIZING:
            why = inner.reason or inner.describe()
            return Contract.unknown(
                f"{name}: its canonicalizer is not canonicalizing: {why}", in_type
            )
        out_group = inner.output_group if inner.output_group is not None else group
        if _is_trivial(out_group):
            return Contract.invariant(in_type)
        rest = contract_of(self.backbone, out_group, inner.output_type)
        if rest.kind == Status.INVARIANT:
            return Contract.invariant(in_type)
        return Contract.unknown(
            f"{name}: the canonicalizer leaves {out_group.name} acting on its output and the "
            f"backbone is not invariant under it ({rest.describe()}); expected a canonicalizer "
            f"over all elements with a trivial output group (output_group=CyclicGroup(1))",
            in_type,
        )
