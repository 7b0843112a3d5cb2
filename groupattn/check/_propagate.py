"""Propagation: read the exported graph node by node and derive every value's claim.

See ``._values`` for what a claim is. Nodes whose value cannot be derived are
*broken* (no map exists) or *unverified* (the checker cannot tell); values computed
from them inherit that status. Parameters are drawn at random twice (see
``._values.Constant``), so a certificate holds for every value of the
parameters, not only the current ones.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn

from ..actions import FieldType
from ..contracts import Status
from ..groups import Group, GroupError
from ._aten import RANDOM_OPS_WITH_RULES, Args, OpCall, Poison, rule_for
from ._export import Exported, LeafCall
from ._leaf_rules import leaf_rule
from ._relations import Relations
from ._rules_movement import MOVEMENT_OPS
from ._semantics import movement
from ._values import Breaks, Constant, Frame, FrameValue, Moving, SampleGenerator, Unverifiable

#: Operators that only check shapes or values at run time and produce nothing.
ASSERTION_OPS = frozenset(
    {
        "aten::_assert_tensor_metadata",
        "aten::_assert_scalar",
        "aten::_assert_async",
        "aten::sym_constrain_range",
        "aten::sym_constrain_range_for_size",
    }
)

__all__ = ["Failed", "NodeRecord", "Propagation", "input_maps", "propagate_graph"]


@dataclass(eq=False)
class Failed:
    """A value that could not be derived: ``status`` is ``"broken"`` or ``"unverified"``."""

    status: str
    reason: str
    origin: str

    def describe(self) -> str:
        return self.status


@dataclass
class NodeRecord:
    """What the checker concluded at one node of the graph.

    Attributes
    ----------
    name
        Node name in the exported graph.
    op, target
        The graph op and a readable callee (ATen operator, or the leaf module's path).
    status
        A [`Status`][groupattn.check.Status]: ``equivariant``, ``invariant``,
        ``broken`` or ``unverified``; or ``input``, ``constant``, ``canonicalizing`` /
        ``frame`` (a canonicalizer's output and its frame) and ``static`` (Python values).
    description
        The value's shape and how it moves.
    reason
        Why it breaks or is unverified.
    inherited
        True when the status comes from an input (``reason`` names the origin).
    module
        The path of the innermost module that runs the operation ("" in the model's own
        ``forward``).
    group
        The group whose generators the claim is made for.
    """

    name: str
    op: str
    target: str
    status: Status
    description: str = ""
    reason: str | None = None
    group: str | None = None
    inherited: bool = False
    module: str = ""

    def __post_init__(self) -> None:
        self.status = Status(self.status)


@dataclass
class Propagation:
    """The outcome of propagating through one exported graph."""

    graph: nx.DiGraph
    records: dict[str, NodeRecord]
    order: list[str]
    outputs: list[tuple[str, Any, Any]]
    input_node: str
    notes: list[str] = field(default_factory=list)
    side_effects: list[tuple[str, str]] = field(default_factory=list)


# ----------------------------------------------------------------------------- input and constants


def input_maps(
    input_type: FieldType, group: Group, generators: list[Any], shape: tuple[int, ...]
) -> list[torch.Tensor] | None:
    """Gather maps of the input field type's action, one per generator (``None``: invariant).

    Raises
    ------
    Unverifiable
        When the action is not a permutation of entries (e.g. channels carrying a
        rotation matrix representation).
    """
    n = math.prod(shape)
    probe = torch.arange(n, dtype=torch.float64).reshape(shape)
    maps = []
    for g in generators:
        try:
            moved = input_type.act(group, g, probe)
        except GroupError:
            raise
        except Exception as err:
            raise Unverifiable(
                f"the input type {input_type.describe()} cannot act on shape {shape} ({err})"
            ) from err
        flat = moved.reshape(-1)
        if moved.shape != probe.shape or not bool((flat == flat.round()).all()):
            raise Unverifiable(
                f"the input type {input_type.describe()} does not act by permuting entries; the checker handles "
                "permutation actions (trivial, regular and permutation representations)"
            )
        m = flat.long()
        if not bool((torch.sort(m).values == torch.arange(n)).all()):
            raise Unverifiable(
                f"the input type {input_type.describe()} does not act by a permutation"
            )
        maps.append(m)
    if all(bool(torch.equal(m, torch.arange(n))) for m in maps):
        return None
    return maps


def _draw(t: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    magnitude = torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.5
    sign = torch.randint(0, 2, t.shape, generator=gen).to(torch.float64) * 2 - 1
    return (
        magnitude * sign
    )  # float64: sums taken in another order then differ only by float64 rounding


def _wide(t: torch.Tensor) -> torch.Tensor:
    """Floating-point constants are carried in float64."""
    t = t.detach()
    return t.to(torch.float64) if t.is_floating_point() else t


def _free(t: torch.Tensor, seed: int) -> Constant:
    """Two random draws, and the current value (see ``._values.Constant``)."""
    return Constant(_draw(t, seed), _draw(t, seed + 1), _wide(t))


def _graph_input_values(exported: Exported, model: nn.Module) -> dict[str, Any]:
    """Constants for the graph's inputs other than the model's input.

    Floating-point parameters (trainable or frozen — fine-tuning unfreezes them), buffers
    that a training-mode forward pass changes (running statistics, moving averages),
    buffers sharing storage with a parameter, and lifted tensors that require gradients
    are *free*: two independent random draws. Other buffers and constants keep their
    values (index tables, fixed encodings).
    """
    program = exported.program
    params = dict(model.named_parameters(remove_duplicate=False))
    storages = {p.untyped_storage().data_ptr() for p in params.values() if p.numel()}
    values: dict[str, Any] = {}
    for i, spec in enumerate(program.graph_signature.input_specs):
        kind = spec.kind.name
        name = spec.arg.name
        target = spec.target
        seed = 1000 + 2 * i
        if kind == "PARAMETER":
            p = params.get(target)
            t = (p if p is not None else program.state_dict[target]).detach()
            values[name] = _free(t, seed) if t.is_floating_point() else Constant(t, t)
        elif kind == "BUFFER":
            t = (
                program.state_dict[target]
                if target in program.state_dict
                else program.constants[target]
            ).detach()
            aliased = t.numel() > 0 and t.untyped_storage().data_ptr() in storages
            if t.is_floating_point() and (target in exported.state_buffers or aliased):
                values[name] = _free(t, seed)
            else:
                values[name] = Constant(_wide(t), _wide(t))
        elif kind == "CONSTANT_TENSOR":
            t = program.constants[target]
            if t.is_floating_point() and t.requires_grad:
                values[name] = _free(t.detach(), seed)
            else:
                values[name] = Constant(_wide(t), _wide(t))
        elif kind == "USER_INPUT":
            continue
        else:
            values[name] = Failed("unverified", f"an input of kind {kind} is not supported", name)
    return values


# ----------------------------------------------------------------------------- propagation


def _status_of(value: Any) -> str:
    if isinstance(value, Failed):
        return value.status
    if isinstance(value, Moving):
        return "invariant" if value.invariant else "equivariant"
    if isinstance(value, Constant):
        return "constant" if isinstance(value.first, torch.Tensor) else "static"
    if isinstance(value, FrameValue):
        return "frame"
    if isinstance(value, Poison):
        return "unverified"
    if isinstance(value, list | tuple):
        parts = [_status_of(v) for v in value]
        for s in ("broken", "unverified", "equivariant", "invariant", "constant", "frame"):
            if s in parts:
                return s
        return "static"
    return "static"


def _describe(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    d = getattr(value, "describe", None)
    return d() if callable(d) else ("" if value is None else repr(value)[:30])


def _failures(values: Any) -> list[Failed]:
    found: list[Failed] = []

    def walk(v: Any) -> None:
        if isinstance(v, Failed):
            found.append(v)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(values)
    return found


def _to_plain(value: Any, draw: int) -> Any:
    if isinstance(value, Constant):
        return (value.first, value.second, value.current)[draw]
    if isinstance(value, list):
        return [_to_plain(v, draw) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_plain(v, draw) for v in value)
    return value


def _wide_all(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _wide(value)
    if isinstance(value, list):
        return [_wide_all(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_wide_all(v) for v in value)
    return value


def _has_input_value(value: Any) -> bool:
    if isinstance(value, Moving | FrameValue | Poison):
        return True
    if isinstance(value, list | tuple):
        return any(_has_input_value(v) for v in value)
    return False


def _poisoned(value: Any) -> Poison | None:
    if isinstance(value, Poison):
        return value
    if isinstance(value, list | tuple):
        for v in value:
            p = _poisoned(v)
            if p is not None:
                return p
    return None


def _target_name(node: Any, leaf: LeafCall | None) -> str:
    if leaf is not None:
        return f"{leaf.path} ({type(leaf.module).__name__})"
    t = node.target
    if hasattr(t, "name") and callable(t.name):
        return t.name()
    if t is operator.getitem:
        return "getitem"
    return getattr(t, "__name__", str(t))


def propagate_graph(
    exported: Exported,
    model: nn.Module,
    input_value: Moving,
    frame_counter: list[int],
) -> Propagation:
    """Derive the claim of every node; returns records, the graph and the output values."""
    program = exported.program
    gm = program.graph_module
    values: dict[str, Any] = _graph_input_values(exported, model)
    records: dict[str, NodeRecord] = {}
    graph = nx.DiGraph()
    order: list[str] = []
    input_node = ""
    user_inputs = [
        s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"
    ]
    relations = Relations(values, input_value.frame, graph)
    for node in gm.graph.nodes:
        name = node.name
        order.append(name)
        graph.add_node(name)
        relations.add_node(node)
        for src in node.all_input_nodes:
            graph.add_edge(src.name, name)
        if node.op == "placeholder":
            if name in user_inputs:
                if input_node:
                    values[name] = Failed("unverified", "the model takes more than one input", name)
                else:
                    values[name] = input_value
                    input_node = name
                records[name] = NodeRecord(
                    name, "placeholder", "input", Status.INPUT, input_value.describe()
                )
            else:
                v = values.get(name, Failed("unverified", "unknown graph input", name))
                values[name] = v
                kind = "constant" if isinstance(v, Constant) else _status_of(v)
                records[name] = NodeRecord(name, "placeholder", name, Status(kind), _describe(v))
            _annotate(graph, records[name])
            continue
        if node.op == "output":
            continue
        if node.op == "get_attr":
            attr = getattr(gm, str(node.target))
            if isinstance(attr, torch.Tensor):
                values[name] = Constant(_wide(attr), _wide(attr))
            else:
                values[name] = Failed(
                    "unverified",
                    f"a graph attribute of type {type(attr).__name__} (a higher-order operator's body)",
                    name,
                )
            records[name] = NodeRecord(
                name,
                "get_attr",
                str(node.target),
                Status(_status_of(values[name])),
                _describe(values[name]),
            )
            _annotate(graph, records[name])
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: values[n.name])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n.name])
        leaf = None
        if (
            getattr(node.target, "name", None)
            and callable(node.target.name)
            and node.target.name() == "groupattn_check::leaf"
        ):
            leaf = exported.leaf_calls.get(int(args[0]))
        target = _target_name(node, leaf)
        failures = _failures((args, kwargs))
        if failures:
            repaired, how = _repair(relations, node, values) if leaf is None else (None, "")
            if repaired is not None:
                _record_repair(graph, records, values, node, target, repaired, how)
                continue
            worst = next((f for f in failures if f.status == "broken"), failures[0])
            values[name] = Failed(worst.status, worst.reason, worst.origin)
            records[name] = NodeRecord(
                name, node.op, target, Status(worst.status), "", f"from {worst.origin}", None, True
            )
            _annotate(graph, records[name])
            continue
        try:
            value = _evaluate(node, name, args, kwargs, leaf, frame_counter, records)
            reason = None
            status = None
        except Breaks as err:
            value, status, reason = Failed("broken", str(err), name), "broken", str(err)
        except Unverifiable as err:
            value, status, reason = Failed("unverified", str(err), name), "unverified", str(err)
        except GroupError as err:
            value, status, reason = (
                Failed("unverified", f"{target}: {err}", name),
                "unverified",
                f"{target}: {err}",
            )
        except Exception as err:  # a defect of a rule must never certify
            msg = f"{target}: the checker failed on it ({type(err).__name__}: {err})"
            value, status, reason = Failed("unverified", msg, name), "unverified", msg
        if status is not None and leaf is None:
            repaired, how = _repair(relations, node, values)
            if repaired is not None:
                _record_repair(graph, records, values, node, target, repaired, how)
                continue
        values[name] = value
        if status is None:
            status = _status_of(value)
            if isinstance(value, list | tuple) and any(isinstance(v, FrameValue) for v in value):
                status = "canonicalizing"
        group = None
        first_moving = (
            value
            if isinstance(value, Moving)
            else next((v for v in value if isinstance(v, Moving)), None)
            if isinstance(value, list | tuple)
            else None
        )
        if isinstance(first_moving, Moving):
            group = first_moving.frame.group.name
        records[name] = NodeRecord(
            name,
            node.op,
            target,
            Status(status),
            _describe(value),
            reason,
            group,
            False,
            leaf.path if leaf is not None else _module_path(node),
        )
        _annotate(graph, records[name])
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat_outputs = list(output_node.args[0])
    outputs: list[tuple[str, Any, Any]] = []
    side_effects: list[tuple[str, str]] = []
    user_index = 0
    for spec, out in zip(program.graph_signature.output_specs, flat_outputs):
        kind = spec.kind.name
        value = values[out.name] if hasattr(out, "name") else Constant(out, out)
        if kind == "USER_OUTPUT":
            path = (
                exported.output_paths[user_index]
                if user_index < len(exported.output_paths)
                else f"[{user_index}]"
            )
            user_index += 1
            outputs.append((path or "output", value, out.name if hasattr(out, "name") else None))
        elif kind == "USER_INPUT_MUTATION":
            outputs.append(
                ("the input, modified in place", value, out.name if hasattr(out, "name") else None)
            )
        else:
            side_effects.append((str(spec.target), kind.lower().replace("_", " ")))
    return Propagation(graph, records, order, outputs, input_node, [], side_effects)


#: Data movements composed into one when the steps fail one by one.
MAX_CHAIN = 32


def _movement_chain(node: Any, values: dict[str, Any]) -> Moving | None:
    """A chain of data movements checked as one movement from its first moving source.

    ``x[..., 1:-1, :][..., 1:-1]`` crops the centre of a grid, which a quarter turn
    maps onto itself, but the first slice alone does not move with the input. When a
    copy fails step by step, the steps back to a value with a claim are composed and
    the composition is checked by the movement rule (which reads every entry).
    """
    chain: list[tuple[Any, Any]] = []
    current = node
    while len(chain) < MAX_CHAIN:
        if (
            current.op != "call_function"
            or not hasattr(current.target, "_schema")
            or current.target._schema.name not in MOVEMENT_OPS
        ):
            return None
        sources = [
            a
            for a in _flat((current.args, current.kwargs))
            if hasattr(a, "name") and not isinstance(values.get(a.name), Constant)
        ]
        if len(sources) != 1 or any(
            isinstance(values.get(a.name), Constant) and not values[a.name].structural
            for a in _flat((current.args, current.kwargs))
            if hasattr(a, "name")
        ):
            return None
        chain.append((current, sources[0]))
        root = values.get(sources[0].name)
        if isinstance(root, Moving):
            break
        if not isinstance(root, Failed):
            return None
        current = sources[0]
    else:
        return None
    if len(chain) < 2:
        return None  # one step: the ordinary rule already decided
    steps = list(reversed(chain))

    def composed(data: list[torch.Tensor]) -> Any:
        out = data[0]
        for step, source in steps:

            def fill(v: Any, out: torch.Tensor = out, source: Any = source) -> Any:
                if hasattr(v, "name") and hasattr(v, "op"):
                    return out if v.name == source.name else values[v.name].first
                if isinstance(v, list | tuple):
                    return type(v)(fill(x) for x in v)
                return v

            out = step.target(*fill(step.args), **{k: fill(v) for k, v in step.kwargs.items()})
        return out

    try:
        result = movement(
            composed, [values[steps[0][1].name]], f"{node.name} (a chain of {len(steps)} copies)"
        )
    except (Breaks, Unverifiable):
        return None
    meta = node.meta.get("val")
    try:  # a data-dependent (unbacked) size has no int: no claim
        shape = tuple(int(s) for s in meta.shape) if meta is not None else None
    except Exception:
        return None
    if len(result) != 1 or not isinstance(result[0], Moving) or shape != result[0].shape:
        return None
    return result[0]


def _repair(relations: Relations, node: Any, values: dict[str, Any]) -> tuple[Moving | None, str]:
    """A claim for a node whose operands (or itself) failed, from relations or a chain of copies."""
    value = relations.repair(node)
    if value is not None:
        return value, "its operands permuted by the group (an orbit)"
    value = _movement_chain(node, values)
    if value is not None:
        return value, "a chain of copies checked as one"
    return None, ""


def _record_repair(
    graph: nx.DiGraph,
    records: dict[str, NodeRecord],
    values: dict[str, Any],
    node: Any,
    target: str,
    value: Moving,
    how: str,
) -> None:
    """Record a node whose claim came from ``_repair``."""
    values[node.name] = value
    records[node.name] = NodeRecord(
        node.name,
        node.op,
        target,
        Status(_status_of(value)),
        _describe(value) + ", " + how,
        None,
        value.frame.group.name,
        False,
        _module_path(node),
    )
    _annotate(graph, records[node.name])


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path).replace("L['self'].", "").replace("L__self__.", "")


def _annotate(graph: nx.DiGraph, r: NodeRecord) -> None:
    graph.nodes[r.name].update(
        status=r.status.value,
        op=r.op,
        target=r.target,
        description=r.description,
        reason=r.reason or "",
    )


def _evaluate(
    node: Any,
    name: str,
    args: Any,
    kwargs: Any,
    leaf: LeafCall | None,
    frame_counter: list[int],
    records: dict[str, NodeRecord],
) -> Any:
    if node.op != "call_function":
        raise Unverifiable(f"{name}: graph op {node.op} is not supported")
    target = node.target
    if target is operator.getitem:
        base, key = args
        if isinstance(base, list | tuple):
            return base[key]
        raise Unverifiable(f"{name}: indexing a value that is not a tuple")
    if leaf is not None:
        return leaf_rule(name, leaf, list(args[1]), node.meta.get("val"), frame_counter)
    if not hasattr(target, "_schema"):
        raise Unverifiable(
            f"{name}: {getattr(target, '__name__', target)} is not an ATen operator (a higher-order operator or Python function)"
        )
    if target._schema.name in ASSERTION_OPS:
        return None
    if target._schema.name in (
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::empty_permuted",
    ):
        raise Unverifiable(f"{name} ({target.name()}): uninitialised memory")
    tags = getattr(target, "tags", ())
    if (
        torch.Tag.nondeterministic_seeded in tags
        and target._schema.name not in RANDOM_OPS_WITH_RULES
    ):
        raise Unverifiable(f"{name} ({target.name()}): draws random numbers")
    poison = _poisoned((args, kwargs))
    if poison is not None:
        raise Unverifiable(
            f"{name} ({target.name()}): uses {poison.reason}, which the checker does not track"
        )
    if not _has_input_value((args, kwargs)):
        constants = [v for v in _flat((args, kwargs)) if isinstance(v, Constant)]
        draws = 3 if any(c.third is not None for c in constants) else 2
        results = []
        with torch.no_grad():
            for draw in range(draws):
                try:
                    results.append(
                        target(
                            *_to_plain(args, draw),
                            **{k: _to_plain(v, draw) for k, v in kwargs.items()},
                        )
                    )
                except RuntimeError:
                    # constants are carried in float64; a float32 tensor made in forward may not mix
                    results.append(
                        target(
                            *_wide_all(_to_plain(args, draw)),
                            **{k: _wide_all(_to_plain(v, draw)) for k, v in kwargs.items()},
                        )
                    )
        first, second = results[0], results[1]
        third = results[2] if draws == 3 else None
        # elementwise operations and copies give equal outputs for equal inputs, bit for bit
        exact = all(c.exact for c in constants) and (
            torch.Tag.pointwise in tags or target._schema.name in MOVEMENT_OPS
        )
        if isinstance(first, list | tuple):
            thirds = third if third is not None else [None] * len(first)
            return type(first)(Constant(a, b, c, exact) for a, b, c in zip(first, second, thirds))
        return Constant(first, second, third, exact)
    for v in _flat((args, kwargs)):
        if isinstance(v, FrameValue):
            raise Unverifiable(f"{name} ({target.name()}): uses a canonicalizer's frame as data")
    rule = rule_for(target)
    if rule is None:
        raise Unverifiable(f"{name}: no rule for {target.name()}")
    bound = Args(target, tuple(args), dict(kwargs))
    call = OpCall(name, target, bound, tuple(args), dict(kwargs), node.meta.get("val"))
    value = rule(call)
    unread = bound.unread()
    if unread:
        raise Unverifiable(
            f"{call.label}: the checker does not read its argument(s) {', '.join(unread)}"
        )
    _check_shapes(call, value, node.meta.get("val"))
    return value


def _flat(v: Any) -> list[Any]:
    if isinstance(v, list | tuple):
        return [x for item in v for x in _flat(item)]
    if isinstance(v, dict):
        return [x for item in v.values() for x in _flat(item)]
    return [v]


def _check_shapes(call: OpCall, value: Any, meta: Any) -> None:
    """A safety net: every derived value must have the shape the exporter recorded."""
    if isinstance(value, Moving):
        if (
            meta is None
            or not hasattr(meta, "shape")
            or tuple(int(s) for s in meta.shape) != value.shape
        ):
            raise Unverifiable(
                f"{call.label}: derived shape {value.shape} does not match the traced one"
            )
        if value.moves is not None and any(m.numel() != value.numel for m in value.moves):
            raise Unverifiable(f"{call.label}: derived maps do not fit the shape {value.shape}")
    elif isinstance(value, list | tuple) and isinstance(meta, list | tuple):
        if len(value) != len(meta):
            raise Unverifiable(f"{call.label}: derived {len(value)} outputs, traced {len(meta)}")
        for v, m in zip(value, meta):
            if isinstance(v, Moving | Constant | Poison | Failed) or v is None:
                _check_shapes(call, v, m)


def new_frame(
    frame_counter: list[int], group: Group, node: str, parent: Frame, batch: int
) -> Frame:
    """A fresh canonicalizer frame ``F1``, ``F2``, … for ``group``, one generator per sample."""
    frame_counter[0] += 1
    gens = [SampleGenerator(g, b) for b in range(max(int(batch), 1)) for g in group.generators()]
    return Frame(f"F{frame_counter[0]}", group, gens, node, parent)
