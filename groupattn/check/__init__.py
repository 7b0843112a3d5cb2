"""The composition checker: certify whole networks from declared contracts, and verify them.

:func:`certify` traces a model with torch.fx, propagates field layouts, acting groups
and canonicalizer frames through the contracts of its parts, and returns a
:class:`Certificate` (verdict, output type, first break with its reason and path,
unverified nodes; renderable as text, a rich table, DOT or a picture).
:func:`verify` measures equivariance numerically in float64.
Contracts and layout rules for common PyTorch modules and functions are registered on
import (see ``groupattn/check/_torch_contracts.py``); register your own with
:func:`groupattn.contracts.register_contract` or a ``contract`` method.
"""

from ..groups import GROUP_NAMES, group_from_name
from ._certificate import BreakInfo, Certificate, Verdict, VerificationReport
from ._certify import certify, default_input_type, verify
from ._layout import Atom, LayoutField, describe_layout
from ._symbols import Frame

__all__ = [
    "GROUP_NAMES",
    "Atom",
    "BreakInfo",
    "Certificate",
    "Frame",
    "LayoutField",
    "Verdict",
    "VerificationReport",
    "certify",
    "default_input_type",
    "describe_layout",
    "group_from_name",
    "verify",
]
