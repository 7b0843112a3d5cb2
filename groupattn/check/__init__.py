"""The composition checker: certify whole networks, and verify them.

[`certify`][groupattn.check.certify] exports a model to functional ATen operators with ``torch.export``,
derives for every value how it moves when the input moves (an exact permutation of
entries for each generator of the group, any finite group acting on any G-set), keeps
canonicalizers whole and checks them by their contracts, and returns a
[`Certificate`][groupattn.check.Certificate] (verdict per output, output type, first break with its reason and
path, unverified nodes; renderable as text, a rich table, DOT or a picture).
[`verify`][groupattn.check.verify] measures equivariance numerically in float64, on every output, for any
finite group, telling canonicalizer ties and non-finite input apart from real errors.
Operators without a rule, and modules the exporter cannot trace, are *unverified*;
a module of your own is checked through its body, or through its ``contract`` method
when its body cannot be verified.
"""

import warnings
from typing import Any

from ..contracts import Status
from ..groups import GROUP_NAMES, group_from_name
from ._certificate import EXIT_CODES, BreakInfo, Certificate, VerificationReport
from ._certify import certify, default_input_type
from ._checker import OutputInfo
from ._layout import Atom, LayoutField, describe_layout
from ._propagate import NodeRecord
from ._values import Frame
from ._verify import (
    DetailedVerificationReport,
    OutputCheck,
    VerificationBudgetError,
    VerificationCost,
    attach_verification,
    estimate_verification,
    verify,
)

__all__ = [
    "EXIT_CODES",
    "GROUP_NAMES",
    "Atom",
    "BreakInfo",
    "Certificate",
    "DetailedVerificationReport",
    "Frame",
    "LayoutField",
    "NodeRecord",
    "OutputCheck",
    "OutputInfo",
    "Status",
    "VerificationBudgetError",
    "VerificationCost",
    "VerificationReport",
    "attach_verification",
    "certify",
    "default_input_type",
    "describe_layout",
    "estimate_verification",
    "group_from_name",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name == "Verdict":
        warnings.warn(
            "groupattn.check.Verdict is deprecated: use groupattn.check.Status (the same class, also "
            "groupattn.contracts.Status)",
            DeprecationWarning,
            stacklevel=2,
        )
        return Status
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
