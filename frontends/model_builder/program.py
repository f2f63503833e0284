"""One bucket's executable: the traced graph split at its collectives, each part between
collectives compiled with ``torch.compile(backend="nki")`` (its ATen ops run as NKI kernels
on the simulator, the rest on the CPU), each collective run across the ranks by
:mod:`.collectives`.

The graph is the same on every rank (SPMD). A run steps through the parts in order: a compute
part runs once per local rank (each rank a simulated NeuronCore with its own weights and
states), a collective once over all ranks' values. The graph's inputs are the weights, the
state buffers and the user's inputs in the exported program's order; its outputs are the new
values of the root module's state buffers, the user's outputs, then the new values of the
submodules' state buffers (see ``tracing``)."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.passes.split_module import split_module

from .. import torch_backend as tb
from ..device_time import launched_us
from .collectives import COLLECTIVES, Collective, RankGroup

# the exported program's input kinds that hold weights (the same value on each call)
WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _op_name(node: torch.fx.Node) -> str | None:
    schema = getattr(node.target, "_schema", None)
    return schema.name if node.op == "call_function" and schema is not None else None


@dataclass
class Step:
    """A part of the graph: a compiled compute part, or one collective."""

    name: str
    fn: Any = None
    collective: Collective | None = None
    static: tuple = ()
    reports: list[tb.GraphReport] = field(default_factory=list)


@contextlib.contextmanager
def simulated_target(target: str | None) -> Iterator[None]:
    """Run the torch backend's kernels on ``target`` (trn1 / trn2 / trn3) inside the block."""
    saved = tb.OPTIONS.target
    if target is not None:
        tb.OPTIONS.target = target
    try:
        yield
    finally:
        tb.OPTIONS.target = saved


class Program:
    """An exported program ready to run over ranks (see the module docstring)."""

    def __init__(
        self, program: ExportedProgram, target: str | None = None, state_outputs: tuple = ()
    ) -> None:
        self.program = program
        self.target = target
        sig = program.graph_signature
        self.inputs = [(s.kind, s.target, s.arg.name) for s in sig.input_specs]
        # each output: ("state", buffer name) written back, or ("user", None)
        users = [i for i, s in enumerate(sig.output_specs) if s.kind == OutputKind.USER_OUTPUT]
        written = dict(zip(users[len(users) - len(state_outputs) :], state_outputs))
        self.outputs = [
            ("state", s.target)
            if s.kind == OutputKind.BUFFER_MUTATION
            else ("state", written[i])
            if i in written
            else ("user", None)
            for i, s in enumerate(sig.output_specs)
        ]
        gm = program.graph_module
        part = [0]

        def partition(node: torch.fx.Node) -> int:
            if _op_name(node) in COLLECTIVES:
                part[0] += 2  # a part of its own, then a new compute part
                return part[0] - 1
            return part[0]

        self.top = split_module(gm, gm, partition, keep_original_order=True)
        self.steps: dict[str, Step] = {}
        for name, sub in self.top.named_children():
            calls = [n for n in sub.graph.nodes if n.op == "call_function"]
            coll = [n for n in calls if _op_name(n) in COLLECTIVES]
            if coll:
                node = coll[0]
                self.steps[name] = Step(
                    name, collective=COLLECTIVES[_op_name(node)], static=tuple(node.args[1:])
                )
            else:
                fn = torch.compile(sub, backend="nki", fullgraph=True, dynamic=False)
                self.steps[name] = Step(name, fn=fn)

    @property
    def reports(self) -> list[tb.GraphReport]:
        """The torch backend's reports of the compiled parts (which ops ran as kernels)."""
        return [r for s in self.steps.values() for r in s.reports]

    def _compute(self, step: Step, args: list) -> Any:
        before = len(tb.reports())
        with torch.no_grad():
            out = step.fn(*args)
        step.reports.extend(tb.reports()[before:])
        return out

    def run(self, inputs: list[list[torch.Tensor]], group: RankGroup) -> tuple[list[list], list]:
        """Run the graph for the group's local ranks. ``inputs[k]``: rank k's flat graph
        inputs. Returns each local rank's flat outputs and estimated device microseconds."""
        local = len(inputs)
        env: dict[str, list] = {}
        device_us = [0.0] * local
        placeholders = iter(range(len(self.inputs)))

        def fetch(a: Any, k: int) -> Any:
            if isinstance(a, torch.fx.Node):
                return env[a.name][k]
            if isinstance(a, (tuple, list)):
                return type(a)(fetch(x, k) for x in a)
            return a

        with simulated_target(self.target):
            for node in self.top.graph.nodes:
                if node.op == "placeholder":
                    i = next(placeholders)
                    env[node.name] = [inputs[k][i] for k in range(local)]
                elif node.op == "call_module":
                    step = self.steps[node.target]
                    args = [[fetch(a, k) for a in node.args] for k in range(local)]
                    if step.collective is not None:
                        env[node.name] = group.run(
                            step.collective, [a[0] for a in args], step.static
                        )
                        continue
                    vals = []
                    for k in range(local):
                        us0 = launched_us()
                        vals.append(self._compute(step, args[k]))
                        device_us[k] += launched_us() - us0
                    env[node.name] = vals
                elif node.op == "call_function" and node.target is operator.getitem:
                    src, idx = node.args
                    env[node.name] = [v[idx] for v in env[src.name]]
                elif node.op == "output":
                    outs = node.args[0]
                    flat = [list(fetch(tuple(outs), k)) for k in range(local)]
                    return flat, device_us
                else:  # split_module's top graph holds only the nodes above
                    raise AssertionError(f"unexpected node {node.op} {node.target}")
        raise AssertionError("graph without an output node")

    def describe(self) -> str:
        """The split graph: each part's ops (compute parts) or collective."""
        lines = []
        for name, step in self.steps.items():
            if step.collective is not None:
                lines.append(f"{name}: collective {step.collective.name}{step.static}")
            else:
                sub = getattr(self.top, name)
                ops = [
                    _op_name(n) or str(n.target) for n in sub.graph.nodes if n.op == "call_function"
                ]
                lines.append(f"{name}: compute ({', '.join(ops)})")
        return "\n".join(lines)
