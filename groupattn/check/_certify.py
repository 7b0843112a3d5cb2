"""``certify`` (compose declared contracts); ``verify`` lives in ``_verify.py`` and is re-exported."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ..actions import FieldType, GridField, InvariantField, LiftedField, TokenField, point_group_of
from ..groups import (
    Group,
    GroupError,
    group_from_name,
)
from ._certificate import Certificate
from ._checker import certify_network
from ._verify import attach_verification, verify

__all__ = ["certify", "default_input_type", "verify"]


def default_input_type(example_input: torch.Tensor, group: Group) -> FieldType:
    """The field type ``certify`` assumes for an input of this shape.

    ``(B, C, H, W)`` → [`GridField`][groupattn.actions.GridField]; ``(B, C, |H|, H, W)`` → [`LiftedField`][groupattn.actions.LiftedField]
    of the group's point group; ``(B, N, C)`` → [`TokenField`][groupattn.actions.TokenField] over a square grid;
    ``(B, C)`` → [`InvariantField`][groupattn.actions.InvariantField].

    Raises
    ------
    GroupError
        For any other rank, or tokens that do not form a square grid.
    """
    shape = tuple(example_input.shape)
    if len(shape) == 4:
        return GridField()
    if len(shape) == 5:
        pg = point_group_of(group)
        if pg is None:
            raise GroupError(
                f"certify: expected a group with a point group for a lifted input, got {group.name}"
            )
        return LiftedField(pg)
    if len(shape) == 3:
        side = math.isqrt(shape[1])
        if side * side != shape[1]:
            raise GroupError(
                f"certify: expected a square number of tokens (B, N, C), got N={shape[1]}; pass input_type"
            )
        return TokenField((side, side))
    if len(shape) == 2:
        return InvariantField()
    raise GroupError(f"certify: expected an input of rank 2 to 5, got shape {shape}")


def _resolve_group(group: Group | str, x: torch.Tensor) -> Group:
    """A group name is resolved against the input's grid (a square grid for tokens ``(B, N, C)``)."""
    if not isinstance(group, str):
        return group
    shape = tuple(x.shape)
    if len(shape) == 3:
        side = math.isqrt(shape[1])
        shape = (side, side)
    return group_from_name(group, shape)


def _check_argument_types(model: Any, example_input: Any, group: Any, input_type: Any) -> None:
    """One clear ``TypeError`` per mistyped argument, before any work."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"certify: expected the model as a torch.nn.Module, got {type(model).__name__} "
            "(wrap a function in an nn.Module whose forward calls it)"
        )
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(
            f"certify: expected the example input as one torch.Tensor, got {type(example_input).__name__}"
        )
    if example_input.layout != torch.strided:
        raise TypeError(
            f"certify: expected a dense (strided) example input, got layout {example_input.layout} "
            "(convert it with .to_dense())"
        )
    if example_input.device.type == "meta":
        raise TypeError(
            "certify: expected an example input with values, got a tensor on the meta device "
            "(the checker runs the model on it)"
        )
    if not isinstance(group, Group | str):
        raise TypeError(
            f"certify: expected the group as a groupattn.groups.Group or a group name, got "
            f"{type(group).__name__} {group!r}"
        )
    if input_type is not None and not isinstance(input_type, FieldType):
        raise TypeError(
            f"certify: expected input_type as a groupattn.actions field type, got {type(input_type).__name__}"
        )


def certify(
    model: nn.Module,
    example_input: torch.Tensor,
    group: Group | str,
    input_type: FieldType | None = None,
    verify: bool = False,
    elements: Iterable[Any] | None = None,
    output_type: FieldType | None = None,
) -> Certificate:
    """Certify a whole network: prove that its outputs move with its input, or say why not.

    The model is exported with ``torch.export`` to functional ATen operators (in-place
    operations become explicit; every argument is normalised to the operator's schema),
    with canonicalizers and the few library layers that cannot be traced kept whole and
    checked by their declared contracts. Every operator's rule derives, for each
    generator of the group, how its output moves from how its inputs move — an exact
    permutation of entries (see the concepts page), so rotations and reflections move
    all the axes they act on together, and a group acting on any G-set of tokens is
    handled the same way as a grid. Parameters are treated as free: a certificate holds
    for every value of the weights, not only the current ones.

    Deny by default: an operator without a rule, an argument the rule does not read, a
    data-dependent index, randomness or state kept between calls makes the verdict
    ``unverified``, never a certificate. Every output (any pytree of tensors) and every
    in-place modification of the input is checked. A module whose own class declares
    ``contract`` is checked by its body first, and by its contract only if its body
    cannot be verified (the certificate's notes say so).

    Parameters
    ----------
    model
        The network (evaluated in ``eval`` mode; its modes are restored afterwards).
    example_input
        An input batch; its shape fixes the concrete field types and groups.
    group
        The group acting on the input, or a name for [`group_from_name`][groupattn.check.group_from_name].
    input_type
        The input's field type; see [`default_input_type`][groupattn.check.default_input_type] for the default.
    verify
        Also run [`verify`][groupattn.check.verify]; a certificate the numerical check refutes becomes
        ``unverified`` with the disagreement listed.
    elements
        Elements for the numerical check (see [`verify`][groupattn.check.verify]).
    output_type
        The field type the output must have; by default the input's type for an output of
        the same shape, otherwise any standard type the checker recognises.

    Returns
    -------
    Certificate

    Raises
    ------
    GroupError
        When the input does not fit ``input_type``.
    TypeError
        When ``model`` is not an ``nn.Module``, ``example_input`` not a tensor, or ``group``
        neither a [`Group`][groupattn.groups.Group] nor a name.
    """
    _check_argument_types(model, example_input, group, input_type)
    group = _resolve_group(group, example_input)
    input_type = input_type or default_input_type(example_input, group)
    input_type.check(example_input, "certify")
    cert = certify_network(model, example_input, group, input_type, output_type)
    if verify:
        cert = attach_verification(cert, model, example_input, elements)
    return cert
