"""The checker's result: verdict, output type, first break, unverified nodes, and renderings."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from .._atomic import atomic_open, write_atomic
from ..actions import FieldType
from ..contracts import Status
from ..groups import Group, GroupElement
from ._propagate import NodeRecord

__all__ = ["EXIT_CODES", "BreakInfo", "Certificate", "VerificationReport"]

#: Exit codes of ``groupattn check`` by status (the JSON repeats them as ``"status"`` and
#: ``"exit_code"``). 1 is Python's code for an uncaught exception, so a crash is never
#: read as a verdict.
EXIT_CODES: dict[str, int] = {
    "certified": 0,
    "runtime_error": 1,
    "usage_error": 2,
    "broken": 3,
    "unverified": 4,
    "disagreement": 5,
}
"""Exit codes of ``groupattn check`` by status: 0 certified, 1 runtime error, 2 usage error,
3 broken, 4 unverified, 5 disagreement (certified, refuted numerically)."""


@dataclass
class BreakInfo:
    """Where equivariance breaks first.

    Attributes
    ----------
    node
        Where it breaks: the path of the innermost module that runs the operation
        (e.g. ``"blocks.0.attention"``), or the operation's graph node when it runs in
        the model's own ``forward``.
    target
        The operation (an ATen operator, or a leaf module and its class).
    reason
        Why, in plain words.
    path
        Graph nodes from the input to the breaking operation.
    operation
        The breaking operation's node in the exported graph.
    """

    node: str
    target: str
    reason: str
    path: list[str]
    operation: str = ""

    def to_json(self) -> dict[str, Any]:
        """The attributes as a JSON-serialisable dictionary (``"first_break"`` of a certificate's JSON)."""
        return {
            "node": self.node,
            "target": self.target,
            "reason": self.reason,
            "path": self.path,
            "operation": self.operation,
        }


@dataclass
class VerificationReport:
    """The numerical check of one network (see [`groupattn.check.verify`][groupattn.check.verify]).

    Attributes
    ----------
    errors
        Relative error per tested input-group element (worst sample of the batch).
    tolerance
        The tolerance the errors are compared with.
    dtype
        The dtype the network was evaluated in.
    up_to_frame
        Whether outputs were compared up to a frame (canonicalizing networks).
    ties
        Canonicalizer calls that met a tie (margin exactly 0), as ``"module: n samples"``;
        a tie makes the frame ambiguous, so a numerical mismatch there is not a defect.
    output_description
        The output field type and group used for the comparison.
    """

    errors: dict[GroupElement, float]
    tolerance: float
    dtype: Any
    up_to_frame: bool = False
    ties: list[str] = field(default_factory=list)
    output_description: str = ""

    @property
    def max_error(self) -> float:
        """The largest error over the tested elements."""
        return max(self.errors.values()) if self.errors else 0.0

    @property
    def worst_element(self) -> GroupElement | None:
        """The element with the largest error."""
        return max(self.errors, key=self.errors.__getitem__) if self.errors else None

    @property
    def equivariant(self) -> bool:
        """Whether every error is within tolerance."""
        return self.max_error <= self.tolerance

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable summary (``"verification"`` of a certificate's JSON).

        The largest error, the tolerance, the verdict, the worst element (its ``repr``),
        the number of elements tested, ``up_to_frame``, ``ties`` and the dtype.
        """
        return {
            "max_error": self.max_error,
            "tolerance": self.tolerance,
            "equivariant": self.equivariant,
            "worst_element": repr(self.worst_element) if self.worst_element is not None else None,
            "elements_tested": len(self.errors),
            "up_to_frame": self.up_to_frame,
            "ties": self.ties,
            "dtype": str(self.dtype),
        }


_COLOURS = {
    "input": "#9ecae1",
    "equivariant": "#a1d99b",
    "invariant": "#74c476",
    "canonicalizing": "#fdd0a2",
    "constant": "#d9d9d9",
    "static": "#f0f0f0",
    "frame": "#fdae6b",
    "broken": "#fb6a4a",
    "tainted": "#fcbba1",
    "unverified": "#fdd835",
    "unchecked": "#fff59d",
}


def _colour(status: str) -> str:
    if status.startswith("equivariant in"):
        return "#c7e9c0"
    return _COLOURS.get(status, "#ffffff")


@dataclass
class Certificate:
    """What [`groupattn.check.certify`][groupattn.check.certify] concludes about a network.

    Attributes
    ----------
    verdict
        See [`Status`][groupattn.check.Status].
    group
        The group acting on the input.
    input_type
        The input's field type.
    output_type
        The output's field type (``None`` when not tracked).
    output_group
        The group acting on the output (differs from ``group`` after strided layers).
    output_frame
        ``None``, or the frame the output is left in (it is equivariant only up to the
        element a canonicalizer chose).
    first_break
        Where equivariance breaks first on the way to the output (``None`` if nowhere).
    unverified
        ``(node, reason)`` for every node the checker could not verify.
    records
        What the checker concluded at each node, in graph order.
    graph
        The traced graph as a ``networkx.DiGraph`` (node attributes: ``status``, ``op``,
        ``target``, ``description``, ``reason``).
    reason
        Why the whole network is unverified, when it could not be traced at all.
    verification
        The numerical check, when ``certify(..., verify=True)``.
    disagreements
        Where certificate and numerical check disagree; a certified network that fails
        numerically is a defect of the checker.
    notes
        How the network was checked (e.g. by the declared contracts of modules whose
        bodies could not be verified) and how long it took.
    outputs
        One [`OutputInfo`][groupattn.check.OutputInfo] per tensor the model returns (in
        pytree order), and per in-place modification of its input or state: each has its
        own verdict, field type, frame and reason.
    """

    verdict: Status
    group: Group
    input_type: FieldType | None
    output_type: FieldType | None = None
    output_group: Group | None = None
    output_frame: str | None = None
    first_break: BreakInfo | None = None
    unverified: list[tuple[str, str]] = field(default_factory=list)
    records: list[NodeRecord] = field(default_factory=list)
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    reason: str | None = None
    verification: VerificationReport | None = None
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)

    @property
    def certified(self) -> bool:
        """Whether the verdict is equivariant or invariant."""
        return self.verdict.certified

    @property
    def status(self) -> str:
        """``certified``, ``broken``, ``unverified`` or ``disagreement`` (certified by the
        checker, refuted by the numerical check; the verdict is then ``unverified``)."""
        if self.disagreements:
            return "disagreement"
        if self.certified:
            return "certified"
        return "broken" if self.verdict == Status.BROKEN else "unverified"

    @property
    def exit_code(self) -> int:
        """The command line's exit code for this certificate (see [`EXIT_CODES`][groupattn.check.EXIT_CODES])."""
        return EXIT_CODES[self.status]

    # ------------------------------------------------------------------ text
    def summary(self) -> str:
        """One paragraph: the verdict and why."""
        lines = [f"verdict: {self.verdict.value} under {self.group.name}"]
        if self.output_type is not None:
            out = f"output: {self.output_type.describe()}"
            if self.output_group is not None and self.output_group != self.group:
                out += f" under {self.output_group.name}"
            if self.output_frame:
                out += f", up to {self.output_frame}"
            lines.append(out)
        if self.first_break is not None:
            lines.append(
                f"first break: {self.first_break.node} ({self.first_break.target}): {self.first_break.reason}"
            )
            lines.append("path: " + " -> ".join(self.first_break.path))
        if self.reason:
            lines.append(f"reason: {self.reason}")
        for note in self.notes:
            lines.append(f"note: {note}")
        for node, why in self.unverified:
            lines.append(f"unverified: {node}: {why}")
        if self.verification is not None:
            v = self.verification
            lines.append(
                f"numerical check: max relative error {v.max_error:.3e} over {len(v.errors)} elements "
                f"(tolerance {v.tolerance:.1e}, {v.dtype})"
                + (" up to frame" if v.up_to_frame else "")
            )
            for tie in v.ties:
                lines.append(f"canonicalizer tie: {tie}")
        for d in self.disagreements:
            lines.append(f"DISAGREEMENT: {d}")
        return "\n".join(lines)

    def to_text(self) -> str:
        """The summary followed by one line per node."""
        width = max((len(r.name) for r in self.records), default=4)
        rows = [self.summary(), ""]
        for r in self.records:
            line = f"{r.name.ljust(width)}  {r.status.value:<16} {r.target:<28} {r.description}"
            if r.reason:
                line += f"  <- {r.reason}"
            rows.append(line.rstrip())
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.to_text()

    def to_rich(self) -> Any:
        """A ``rich.table.Table`` of the nodes, coloured by status (needs ``rich``)."""
        from rich.table import Table

        styles = {
            "broken": "bold red",
            "tainted": "red",
            "unverified": "yellow",
            "unchecked": "yellow",
        }
        table = Table(title=f"{self.verdict.value} under {self.group.name}")
        for col in ("node", "status", "target", "output", "reason"):
            table.add_column(col)
        for r in self.records:
            style = styles.get(
                r.status, "green" if r.status.startswith(("equivariant", "invariant")) else ""
            )
            table.add_row(
                r.name, r.status.value, r.target, r.description, r.reason or "", style=style
            )
        return table

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dictionary (the command line's ``--json``)."""
        data: dict[str, Any] = {
            "verdict": self.verdict.value,
            "group": self.group.name,
            "input_type": self.input_type.describe() if self.input_type is not None else None,
            "output_type": self.output_type.describe() if self.output_type is not None else None,
            "output_group": self.output_group.name if self.output_group is not None else None,
            "output_frame": self.output_frame,
            "first_break": self.first_break.to_json() if self.first_break else None,
            "unverified": [{"node": n, "reason": r} for n, r in self.unverified],
            "reason": self.reason,
            "nodes": [
                {
                    "name": r.name,
                    "op": r.op,
                    "target": r.target,
                    "status": r.status.value,
                    "output": r.description,
                    "reason": r.reason,
                }
                for r in self.records
            ],
            "disagreements": self.disagreements,
            "notes": self.notes,
        }
        if self.verification is not None:
            data["max_error"] = self.verification.max_error
            data["verification"] = self.verification.to_json()
        return data

    def to_json_string(self) -> str:
        """[`to_json`][groupattn.check.Certificate.to_json] as indented JSON text."""
        return json.dumps(self.to_json(), indent=2)

    # ------------------------------------------------------------------ graph
    def to_dot(self) -> str:
        """The graph in Graphviz DOT, nodes filled by status."""

        def q(text: str) -> str:
            return '"' + text.replace('"', "'") + '"'

        lines = [
            "digraph certificate {",
            "  rankdir=TB;",
            '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
        ]
        for name, data in self.graph.nodes(data=True):
            status = data.get("status", "")
            parts = [name, str(data.get("target", "")), status]
            if data.get("description"):
                parts.append(str(data["description"]))
            label = "\\n".join(p.replace('"', "'") for p in parts)
            lines.append(f'  {q(name)} [label="{label}", fillcolor={q(_colour(status))}];')
        for a, b in self.graph.edges():
            lines.append(f"  {q(a)} -> {q(b)};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def save_graph(self, path: str | Path) -> Path:
        """Write the graph: ``.dot`` as DOT; ``.png``/``.svg``/``.pdf`` drawn with Graphviz's
        ``dot`` when it is installed, otherwise with matplotlib.
        """
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix in ("dot", "gv"):
            write_atomic(path, self.to_dot())
            return path
        if suffix not in ("png", "svg", "pdf"):
            raise ValueError(
                f"Certificate.save_graph: expected a .dot, .png, .svg or .pdf path, got {str(path)!r}"
            )
        dot = shutil.which("dot")
        if dot is not None:
            drawn = subprocess.run(
                [dot, f"-T{suffix}"], input=self.to_dot().encode(), check=True, capture_output=True
            )
            write_atomic(path, drawn.stdout)
            return path
        self._draw_matplotlib(path)
        return path

    def _draw_matplotlib(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        g = self.graph
        layers: dict[str, int] = {}
        for i, generation in enumerate(nx.topological_generations(g)):
            for n in generation:
                layers[n] = i
        pos: dict[str, tuple[float, float]] = {}
        by_layer: dict[int, list[str]] = {}
        for n, i in layers.items():
            by_layer.setdefault(i, []).append(n)
        for i, nodes in by_layer.items():
            for j, n in enumerate(sorted(nodes)):
                pos[n] = (j - (len(nodes) - 1) / 2, -i)
        depth = max(by_layer, default=0) + 1
        breadth = max((len(v) for v in by_layer.values()), default=1)
        fig, ax = plt.subplots(figsize=(max(4.0, 2.2 * breadth), max(3.0, 0.7 * depth)))
        colours = [_colour(g.nodes[n].get("status", "")) for n in g.nodes]
        nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowsize=8, edge_color="#888888")
        nx.draw_networkx_nodes(
            g, pos, ax=ax, node_color=colours, node_shape="s", node_size=500, edgecolors="#555555"
        )
        labels = {n: f"{n}\n{g.nodes[n].get('status', '')}" for n in g.nodes}
        nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=6)
        ax.set_title(f"{self.verdict.value} under {self.group.name}")
        ax.axis("off")
        fig.tight_layout()
        with atomic_open(path) as fh:
            fig.savefig(fh, format=path.suffix.lstrip(".").lower())
        plt.close(fig)
