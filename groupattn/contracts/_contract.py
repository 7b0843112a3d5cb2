"""Contracts: what a module promises about how its output moves when its input moves."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from .._errors import ContractError
from ..actions import FieldType
from ..groups import Group

__all__ = [
    "Contract",
    "ContractError",
    "DeclaresContract",
    "Status",
    "contract_of",
    "register_contract",
    "registered_contract",
]


class Status(str, Enum):
    """One vocabulary for what a module promises, what the checker concludes about a
    network, and what it concludes about each value of the network's graph.

    Promises and verdicts:

    - ``EQUIVARIANT``: ``f(g·x) = g·f(x)`` with the declared input and output types.
    - ``INVARIANT``: ``f(g·x) = f(x)``.
    - ``CANONICALIZING``: ``f(g·x) = g'·f(x)`` for a data-dependent ``g'`` (the
      *frame*); the output is in a new frame.
    - ``FRAME_RESTORING``: undoes a canonicalization, returning to the input's frame.
    - ``BROKEN``: not equivariant; the reason says why.
    - ``UNVERIFIED``: nothing is promised, or the checker cannot tell.

    Only on the values of a checked graph ([`groupattn.check.NodeRecord`][groupattn.check.NodeRecord]):
    ``INPUT`` (the network's input), ``CONSTANT`` (does not depend on the input),
    ``FRAME`` (a canonicalizer's frame) and ``STATIC`` (a Python value).

    ``Status.BREAKS`` and ``Status.UNKNOWN`` are the names of earlier releases for
    ``BROKEN`` and ``UNVERIFIED`` (the same members); ``Status("breaks")`` and
    ``Status("unknown")`` still work, with a ``DeprecationWarning``. ``Status`` and
    ``groupattn.check.Verdict`` are deprecated names of this class.
    """

    EQUIVARIANT = "equivariant"
    INVARIANT = "invariant"
    CANONICALIZING = "canonicalizing"
    FRAME_RESTORING = "frame-restoring"
    BROKEN = "broken"
    UNVERIFIED = "unverified"
    INPUT = "input"
    CONSTANT = "constant"
    FRAME = "frame"
    STATIC = "static"
    BREAKS = "broken"  # the contract word of earlier releases (an alias of BROKEN)
    UNKNOWN = "unverified"  # the contract word of earlier releases (an alias of UNVERIFIED)

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        old = {"breaks": "broken", "unknown": "unverified"}.get(str(value))
        if old is None:
            return None
        warnings.warn(
            f"Status({value!r}) is deprecated: use Status({old!r})",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls(old)

    @property
    def certified(self) -> bool:
        """Whether this is a certificate (``EQUIVARIANT`` or ``INVARIANT``)."""
        return self in (Status.EQUIVARIANT, Status.INVARIANT)


@dataclass(frozen=True)
class Contract:
    """A module's declared behaviour under a group.

    Attributes
    ----------
    kind
        See [`Status`][groupattn.check.Status].
    input_type
        The field type the module expects (a tuple for several inputs).
    output_type
        The field type it returns (``None`` if unknown).
    reason
        Why it breaks equivariance (``BREAKS``) or why nothing is known (``UNKNOWN``).
    output_group
        The group acting on the output when it differs from the acting group: e.g. a
        stride-``s`` patch embedding maps translations by multiples of ``s`` of the
        image (``TorusTranslations(h, w, stride=s)``) onto the translations
        ``TorusTranslations(h, w)`` of its token grid; polyphase anchoring turns the
        translations of an image into that strided subgroup, up to the frame.
        ``None`` means the same group acts on input and output.
    """

    kind: Status
    input_type: FieldType | tuple[FieldType, ...] | None = None
    output_type: FieldType | None = None
    reason: str | None = None
    output_group: Group | None = None

    @classmethod
    def equivariant(
        cls, input_type: Any, output_type: FieldType, output_group: Group | None = None
    ) -> Contract:
        """``f(g·x) = g·f(x)``."""
        return cls(Status.EQUIVARIANT, input_type, output_type, None, output_group)

    @classmethod
    def invariant(cls, input_type: Any, output_type: FieldType | None = None) -> Contract:
        """``f(g·x) = f(x)``; the output type defaults to [`InvariantField`][groupattn.actions.InvariantField]."""
        from ..actions import InvariantField

        return cls(Status.INVARIANT, input_type, output_type or InvariantField())

    @classmethod
    def canonicalizing(
        cls, input_type: Any, output_type: FieldType, output_group: Group | None = None
    ) -> Contract:
        """Output moves with the input up to a data-dependent group element (a new frame)."""
        return cls(Status.CANONICALIZING, input_type, output_type, None, output_group)

    @classmethod
    def frame_restoring(
        cls, input_type: Any, output_type: FieldType, output_group: Group | None = None
    ) -> Contract:
        """Undoes a canonicalization (its second input is the frame)."""
        return cls(Status.FRAME_RESTORING, input_type, output_type, None, output_group)

    @classmethod
    def breaks(
        cls, reason: str, input_type: Any = None, output_type: FieldType | None = None
    ) -> Contract:
        """Not equivariant, with the reason in plain words."""
        return cls(Status.BROKEN, input_type, output_type, reason)

    @classmethod
    def unknown(cls, reason: str, input_type: Any = None) -> Contract:
        """Nothing is promised."""
        return cls(Status.UNVERIFIED, input_type, None, reason)

    @property
    def preserves_symmetry(self) -> bool:
        """Whether the module keeps equivariance (equivariant, invariant, or a frame change)."""
        return self.kind in (
            Status.EQUIVARIANT,
            Status.INVARIANT,
            Status.CANONICALIZING,
            Status.FRAME_RESTORING,
        )

    def describe(self) -> str:
        """One line: kind, types and reason."""

        def fmt(t: Any) -> str:
            if t is None:
                return "?"
            if isinstance(t, tuple):
                return "(" + ", ".join(fmt(s) for s in t) + ")"
            return t.describe()

        text = f"{self.kind.value}: {fmt(self.input_type)} -> {fmt(self.output_type)}"
        return text + (f" ({self.reason})" if self.reason else "")


@runtime_checkable
class DeclaresContract(Protocol):
    """Protocol of modules that declare their contract.

    ``contract(group, input_type=None)`` returns the [`Contract`][groupattn.contracts.Contract] for the acting
    ``group``; with ``input_type=None`` the module states the input type it expects.
    It raises [`ContractError`][groupattn.contracts.ContractError] (or returns ``BREAKS``/``UNKNOWN``) for groups or
    inputs it cannot promise anything about.
    """

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """What the module promises under ``group`` for inputs of type ``input_type``.

        With ``input_type=None`` the module states the input type it expects.
        """
        ...


ContractFn = Callable[[Any, Group, Any], Contract]
_REGISTRY: dict[Any, ContractFn] = {}


def register_contract(target: Any) -> Callable[[ContractFn], ContractFn]:
    """Register a contract for a module class or a function you cannot edit.

    The decorated function receives ``(module_or_function, group, input_type)`` and
    returns a [`Contract`][groupattn.contracts.Contract]. Registrations for a class apply to its subclasses.

    Examples
    --------
    >>> import torch
    >>> from groupattn.actions import GridField
    >>> @register_contract(torch.nn.Hardtanh)
    ... def _(module, group, input_type):
    ...     return Contract.equivariant(input_type, input_type)
    """

    def deco(fn: ContractFn) -> ContractFn:
        _REGISTRY[target] = fn
        return fn

    return deco


def registered_contract(target: Any) -> ContractFn | None:
    """The registered contract function for a module's class (or a function), if any."""
    if target in _REGISTRY:
        return _REGISTRY[target]
    cls = target if isinstance(target, type) else type(target)
    for base in getattr(cls, "__mro__", ()):
        if base in _REGISTRY:
            return _REGISTRY[base]
    return None


def contract_of(module: Any, group: Group, input_type: Any = None) -> Contract:
    """The contract of ``module`` under ``group``: declared, registered, or ``UNKNOWN``."""
    if hasattr(module, "contract") and callable(module.contract):
        return module.contract(group, input_type)
    fn = registered_contract(module)
    if fn is not None:
        return fn(module, group, input_type)
    name = getattr(module, "__name__", type(module).__name__)
    return Contract.unknown(f"{name} declares no contract and none is registered", input_type)
