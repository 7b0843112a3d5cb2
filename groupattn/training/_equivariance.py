"""The final equivariance check of a trained classifier."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..actions import GridField, InvariantField
from ..groups import Group
from ..testing import representative_elements

__all__ = ["EquivarianceCheck", "check_classifier"]


@dataclass
class EquivarianceCheck:
    """Measured invariance of a classifier's logits under a group.

    Attributes
    ----------
    group
        Name of the group.
    max_error
        Largest relative error ``‖f(g·x) − f(x)‖ / ‖f(x)‖`` over the tested elements.
    worst_element
        The element with that error (as text).
    num_elements
        How many elements were tested.
    method
        What measured it (``"groupattn.check.verify"``).
    """

    group: str
    max_error: float
    worst_element: str
    num_elements: int
    method: str


def check_classifier(
    model: nn.Module,
    images: torch.Tensor,
    group: Group,
    count: int = 8,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> EquivarianceCheck:
    """Measure how far ``model``'s logits are from invariant under ``group``.

    The logits of a classifier should not move when the image does, so the input is
    treated as a [`GridField`][groupattn.actions.GridField] and the output as an
    [`InvariantField`][groupattn.actions.InvariantField]. The checker's
    [`groupattn.check.verify`][groupattn.check.verify] runs a copy of the model in ``dtype`` (float64 by
    default, so an exactly invariant model shows rounding-level errors, ~1e-15) with
    the group acting by exact permutations. The elements tested are
    [`groupattn.testing.representative_elements`][groupattn.testing.representative_elements].

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)``.
    images
        A few test images ``(B, C, H, W)``.
    group
        The acting group (e.g. from [`groupattn.groups.group_from_name`][groupattn.check.group_from_name]).
    count, seed
        How many elements to sample (see [`groupattn.testing.representative_elements`][groupattn.testing.representative_elements]), and the seed.
    dtype
        Evaluation dtype of the checker's copy of the model.
    """
    from ..check import verify

    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    elements = representative_elements(group, max_all=count, samples=count, seed=seed)
    was_training = model.training
    model.eval()
    try:
        report = verify(
            model,
            images.to(device),
            group,
            elements,
            input_type=GridField(),
            output_type=InvariantField(),
            dtype=dtype,
        )
    finally:
        model.train(was_training)
    return EquivarianceCheck(
        group=group.name,
        max_error=float(report.max_error),
        worst_element=repr(report.worst_element),
        num_elements=len(elements),
        method="groupattn.check.verify",
    )
