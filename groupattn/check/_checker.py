"""``certify``: export the network, derive every value's claim, and state the verdict."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
from torch import nn

from ..actions import FieldType, InvariantField
from ..groups import Group, GroupError
from ._certificate import BreakInfo, Certificate, Verdict
from ._export import export_for_check, is_trusted_leaf
from ._leaf_rules import recognise
from ._propagate import Failed, Propagation, input_maps, propagate_graph
from ._values import Constant, Frame, FrameValue, Moving, Unverifiable

__all__ = ["OutputInfo", "certify_network"]


@dataclass
class OutputInfo:
    """The checker's conclusion about one output of the network.

    Attributes
    ----------
    path
        Where the output sits in the model's return value (``""`` for a lone tensor,
        ``"[1]"``, ``"['logits']"``, …), or ``"the input, modified in place"``.
    verdict
        Its :class:`Verdict`.
    field_type
        How it moves (``InvariantField`` when invariant; ``None`` when unknown).
    output_group
        The group acting on it when it differs from the input's group.
    frame
        ``None``, or the canonicalizer frame it is left in.
    reason
        Why it is broken or unverified.
    node
        The graph node that produced it.
    """

    path: str
    verdict: Verdict
    field_type: FieldType | None = None
    output_group: Group | None = None
    frame: str | None = None
    reason: str | None = None
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "verdict": self.verdict.value,
            "field_type": self.field_type.describe() if self.field_type is not None else None,
            "output_group": self.output_group.name if self.output_group is not None else None,
            "frame": self.frame,
            "reason": self.reason,
            "node": self.node,
        }


@contextlib.contextmanager
def _evaluation(model: nn.Module) -> Iterator[None]:
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.train(mode)


def _leaves(model: nn.Module, user_contracts: bool) -> dict[nn.Module, str]:
    """Modules checked by their declared contract (outermost first; nothing inside a leaf)."""
    leaves: dict[nn.Module, str] = {}
    taken: list[str] = []
    for path, m in model.named_modules():
        if any(path == p or path.startswith(p + ".") or p == "" for p in taken):
            continue
        if is_trusted_leaf(m, user_contracts):
            leaves[m] = path or type(m).__name__
            taken.append(path)
    return leaves


def certify_network(
    model: nn.Module,
    example_input: torch.Tensor,
    group: Group,
    input_type: FieldType,
    output_type: FieldType | None = None,
) -> Certificate:
    """Certify ``model`` on ``example_input`` (see :func:`groupattn.check.certify`)."""
    shape = tuple(int(s) for s in example_input.shape)
    cert = Certificate(Verdict.UNVERIFIED, group, input_type)
    try:
        generators = list(group.generators())
        maps = input_maps(input_type, group, generators, shape)
    except (Unverifiable, GroupError) as err:
        cert.reason = str(err)
        return cert
    frame0 = Frame("", group, generators)
    x_value = Moving(shape, example_input.dtype, frame0, maps, group, generators)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the checker's tensors are small: threads only cost synchronisation
    try:
        return _certify(model, example_input, x_value, input_type, output_type, started)
    finally:
        torch.set_num_threads(threads)


def _certify(
    model: nn.Module, example_input: torch.Tensor, x_value: Moving, input_type: FieldType, output_type: FieldType | None, started: float
) -> Certificate:
    with _evaluation(model):
        first = _run_pass(model, example_input, x_value, input_type, output_type, user_contracts=False)
        result = first
        if first.verdict == Verdict.UNVERIFIED and _leaves(model, True).keys() - _leaves(model, False).keys():
            second = _run_pass(model, example_input, x_value, input_type, output_type, user_contracts=True)
            if second.verdict != Verdict.UNVERIFIED:
                names = sorted(p for m, p in _leaves(model, True).items() if m not in _leaves(model, False))
                second.notes.append(
                    "checked by the declared contracts of " + ", ".join(names) + " (their bodies could not be verified: "
                    + (first.reason or "see the first pass") + ")"
                )
                result = second
        if result.certified:
            with torch.no_grad():
                a, b = model(example_input.clone()), model(example_input.clone())
            if not _same_outputs(a, b):
                result.verdict = Verdict.UNVERIFIED
                result.reason = (
                    "the model's output differs between two evaluations on the same input: it draws random numbers "
                    "or keeps state between calls"
                )
                result.output_type = None
    result.notes.append(f"checked in {time.perf_counter() - started:.2f} s")
    return result


def _run_pass(
    model: nn.Module,
    example: torch.Tensor,
    x_value: Moving,
    input_type: FieldType,
    output_type: FieldType | None,
    user_contracts: bool,
) -> Certificate:
    group = x_value.frame.group
    cert = Certificate(Verdict.UNVERIFIED, group, input_type)
    leaves = _leaves(model, user_contracts)
    try:
        exported = export_for_check(model, example, leaves)
    except Unverifiable as err:
        cert.reason = str(err)
        cert.unverified.append((type(model).__name__, str(err)))
        return cert
    prop = propagate_graph(exported, model, x_value, [0])
    return _verdict(prop, cert, x_value, input_type, output_type)


def _path(prop: Propagation, node: str) -> list[str]:
    try:
        return list(nx.shortest_path(prop.graph, prop.input_node, node))
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return [node]


def _output_info(path: str, value: Any, node: str | None, x_value: Moving, input_type: FieldType, output_type: FieldType | None) -> OutputInfo:
    if isinstance(value, Failed):
        verdict = Verdict.BROKEN if value.status == "broken" else Verdict.UNVERIFIED
        return OutputInfo(path, verdict, reason=value.reason, node=value.origin)
    if isinstance(value, Constant):
        if not isinstance(value.first, torch.Tensor):
            return OutputInfo(path, Verdict.INVARIANT, InvariantField(), node=node, reason="not a tensor")
        return OutputInfo(path, Verdict.INVARIANT, InvariantField(), node=node, reason="does not depend on the input")
    if isinstance(value, FrameValue):
        return OutputInfo(path, Verdict.UNVERIFIED, reason="returns a canonicalizer's frame", node=node)
    if not isinstance(value, Moving):
        reason = getattr(value, "reason", None)
        if value is None or isinstance(value, int | float | bool | str):
            return OutputInfo(path, Verdict.INVARIANT, InvariantField(), node=node, reason="not a tensor")
        return OutputInfo(path, Verdict.UNVERIFIED, reason=f"an untracked value ({reason})" if reason else "an untracked value", node=node)
    frame = value.frame
    frame_text = frame.describe() if frame.tag else None
    if value.invariant:
        return OutputInfo(path, Verdict.INVARIANT, InvariantField(), node=node)
    preferred: list[tuple[FieldType, Group]] = []
    if output_type is not None:
        preferred.append((output_type, frame.group))
    elif value.shape == x_value.shape and not frame.tag:
        preferred.append((input_type, frame.group))
    found = recognise(value, preferred)
    if found is None or (output_type is not None and found[0] != output_type):
        what = f"the requested {output_type.describe()}" if output_type is not None else "a field type the checker knows"
        return OutputInfo(
            path,
            Verdict.UNVERIFIED,
            reason=f"it moves with the input, but not as {what} (shape {value.shape}); pass output_type to certify",
            node=node,
            frame=frame_text,
        )
    field, group, _ = found
    out_group = group if group != x_value.frame.group else None
    return OutputInfo(path, Verdict.EQUIVARIANT, field, out_group, frame_text, None, node)


def _verdict(prop: Propagation, cert: Certificate, x_value: Moving, input_type: FieldType, output_type: FieldType | None) -> Certificate:
    cert.records = [prop.records[n] for n in prop.order if n in prop.records]  # type: ignore[misc]
    cert.graph = prop.graph
    cert.unverified = [(r.name, r.reason or "") for r in cert.records if r.status == "unverified" and not r.inherited]
    infos = [_output_info(p, v, n, x_value, input_type, output_type) for p, v, n in prop.outputs]
    for target, kind in prop.side_effects:
        infos.append(OutputInfo(f"state {target}", Verdict.UNVERIFIED, reason=f"the model performs a {kind} of {target}: it keeps state between calls"))
    cert.outputs = infos  # type: ignore[attr-defined]
    tensor_infos = [i for i in infos if i.reason != "not a tensor"]
    if not tensor_infos:
        cert.reason = "the model returns no tensor"
        return cert
    broken = [i for i in tensor_infos if i.verdict == Verdict.BROKEN]
    unverified = [i for i in tensor_infos if i.verdict == Verdict.UNVERIFIED]
    if broken:
        cert.verdict = Verdict.BROKEN
        info = broken[0]
        rec = prop.records.get(info.node or "")
        where = (rec.module if rec is not None and rec.module else None) or info.node or "?"
        cert.first_break = BreakInfo(where, rec.target if rec else "?", info.reason or "", _path(prop, info.node or ""), info.node or "")
        if len(tensor_infos) > 1:
            cert.reason = f"output {info.path or 'output'} is broken"
        return cert
    if unverified:
        info = unverified[0]
        where = f"output {info.path}: " if len(tensor_infos) > 1 and info.path else ""
        cert.reason = where + (f"{info.node}: " if info.node and info.reason and not info.reason.startswith(info.node) else "") + (info.reason or "")
        return cert
    main = tensor_infos[0]
    if all(i.verdict == Verdict.INVARIANT for i in tensor_infos):
        cert.verdict = Verdict.INVARIANT
        cert.output_type = InvariantField()
        return cert
    cert.verdict = Verdict.EQUIVARIANT
    cert.output_type = main.field_type
    cert.output_group = main.output_group
    cert.output_frame = main.frame
    return cert


def _same_outputs(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        return all(_same_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return all(_same_outputs(a[k], b[k]) for k in a)
    return True
