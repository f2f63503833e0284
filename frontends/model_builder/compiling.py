"""``compile()``: turn one bucket's traced graph into its compiled artifact (the stand-in for
a NEFF).

There is no Neuron compiler here. Compiling splits the graph at its collectives, compiles the
parts with ``torch.compile(backend="nki")`` and runs rank 0 once on the example inputs (every
collective over copies of rank 0's value), which traces every NKI kernel the bucket launches.
The artifact (``graph.neff``, an archive of :mod:`.artifacts`) holds the graph, the kernels'
IR, the backend's report (which ops run as kernels) and the cost model's estimate of the
bucket's device time; ``NxDModel.add`` runs the bucket from it."""

from __future__ import annotations

import datetime
import io
import os
import shlex
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from nki.estimates import record_launches
from simulator.cost import estimate_ir

from ..api_errors import invalid, invalid_type, not_applicable
from . import artifacts
from .collectives import Collective, WarmupGroup
from .program import WEIGHT_KINDS, Program
from .tracing import Metaneff, TracedGraph, quiet_export

__all__ = ["CompilationArtifacts", "DEFAULT_COMPILER_ARGS", "compile"]

DEFAULT_COMPILER_ARGS = "--enable-saturate-infinity --auto-cast=none --model-type=transformer -O1"
DEFAULT_WORKDIR = os.path.join(tempfile.gettempdir(), "nxd_model")

# neuronx-cc flags: (takes a value, what it means here). Only --target and --auto-cast change
# the simulation; the others name compiler passes that do not exist here (recorded, warned).
COMPILER_FLAGS: dict[str, tuple[bool, str]] = {
    "--target": (True, "the simulated NeuronCore generation (trn1, trn2, trn3)"),
    "--auto-cast": (True, "only 'none': the model's dtypes run as they are"),
    "-O1": (False, "optimisation level: recorded only"),
    "-O2": (False, "optimisation level: recorded only"),
    "-O3": (False, "optimisation level: recorded only"),
    "--optlevel": (True, "optimisation level: recorded only"),
    "--model-type": (True, "model-type tuning: recorded only"),
    "--enable-saturate-infinity": (False, "recorded only"),
    "--enable-mixed-precision-accumulation": (False, "recorded only"),
    "--lnc": (True, "logical NeuronCore config: recorded only (kernels choose their launch)"),
    "--logical-nc-config": (True, "as --lnc: recorded only"),
    "--verbose": (True, "recorded only"),
    "--logfile": (True, "recorded only"),
}
APPLIED = ("--target", "--auto-cast")


@dataclass(frozen=True)
class CompilationArtifacts:
    """What ``compile`` produces: the path of the bucket's compiled artifact."""

    neff_filepath: str


@dataclass(frozen=True)
class CompilerOptions:
    """Parsed compiler flags: the simulated target, and the flags recorded without effect."""

    target: str | None
    recorded: tuple[str, ...]
    command: str


def parse_compiler_args(compiler_args: str | None, *, explicit: bool) -> CompilerOptions:
    """Read neuronx-cc style flags. Unknown flags, and values the simulator cannot honour, are
    an ``err_not_applicable`` error naming the flag."""
    text = DEFAULT_COMPILER_ARGS if compiler_args is None else compiler_args
    if not isinstance(text, str):
        raise invalid_type(
            f"compile: compiler_args must be a string of flags, got {type(compiler_args).__name__}"
        )
    tokens = shlex.split(text)
    target, recorded = None, []
    i = 0
    while i < len(tokens):
        flag, _, value = tokens[i].partition("=")
        if flag not in COMPILER_FLAGS:
            raise not_applicable(
                f"compiler flag {tokens[i]!r}", f"the simulator knows {', '.join(COMPILER_FLAGS)}"
            )
        takes, _ = COMPILER_FLAGS[flag]
        if takes and not value:
            if i + 1 >= len(tokens):
                raise invalid(f"compile: compiler flag {flag} needs a value")
            i += 1
            value = tokens[i]
        if flag == "--target":
            if value not in ("trn1", "trn2", "trn3"):
                raise not_applicable(
                    f"--target={value}", "the simulated targets are trn1, trn2 and trn3"
                )
            target = value
        elif flag == "--auto-cast":
            if value != "none":
                raise not_applicable(
                    f"--auto-cast={value}",
                    "automatic casting is not simulated; cast the model to the dtype you want",
                )
        else:
            recorded.append(f"{flag}={value}" if value else flag)
        i += 1
    if explicit and recorded:
        warnings.warn(
            f"compiler flags {recorded} have no effect on the simulation (no compiler passes run "
            "here); they are recorded in command.txt",
            stacklevel=3,
        )
    return CompilerOptions(target, tuple(recorded), text)


def warmup_inputs(graph: TracedGraph) -> list[torch.Tensor]:
    """The graph's flat inputs for compiling: the traced module's own weights (zeros where it
    lives on the meta device) and the example inputs."""
    program = graph.program
    values = {**program.state_dict, **program.constants}
    users = iter(graph.example_inputs)
    out = []
    for s in program.graph_signature.input_specs:
        if s.kind in WEIGHT_KINDS:
            v = values[s.target].detach()
            out.append(torch.zeros(v.shape, dtype=v.dtype) if v.device.type == "meta" else v)
        else:
            out.append(next(users))
    return out


class _EstimatingGroup(WarmupGroup):
    """Rank 0 standing in for all ranks, estimating each collective kernel's device time."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size)
        self.collective_us = 0.0

    def run(self, coll: Collective, xs: list, static: tuple) -> list:
        with record_launches() as irs:
            out = super().run(coll, xs, static)
        self.collective_us += sum(estimate_ir(ir).latency_us for ir in irs)
        return out


def program_bytes(graph: TracedGraph) -> bytes:
    buf = io.BytesIO()
    with quiet_export():
        torch.export.save(graph.program, buf)
    return buf.getvalue()


def compile(
    hlo_module: TracedGraph,
    metaneff: Metaneff,
    compiler_workdir: str | os.PathLike | None = None,
    compiler_args: str | None = None,
    key: str | None = None,
) -> CompilationArtifacts:
    """Compile one traced bucket (``hlo_module`` and ``metaneff`` from ``trace``) and write
    ``{compiler_workdir}/{key}/{UTC timestamp}/``: ``model/graph.hlo`` (the traced graph),
    ``graph.neff`` (the compiled artifact), ``metaneff.pb`` (the metadata, JSON),
    ``command.txt`` (the flags) and ``log-neuron-cc.txt`` (the backend's report).

    ``compiler_args``: neuronx-cc style flags; ``--target=trn1|trn2|trn3`` picks the simulated
    NeuronCore, ``--auto-cast=none`` is what runs, optimisation flags are recorded (with a
    warning) and any other flag is an ``err_not_applicable`` error. ``key`` names the bucket
    (default: a hash of the graph)."""
    if not isinstance(hlo_module, TracedGraph):
        raise invalid_type(
            f"compile: hlo_module must be the .hlo of trace()'s artifacts, got "
            f"{type(hlo_module).__name__}"
        )
    if not isinstance(metaneff, Metaneff):
        raise invalid_type(
            f"compile: metaneff must be the .metaneff of trace()'s artifacts, "
            f"got {type(metaneff).__name__}"
        )
    options = parse_compiler_args(compiler_args, explicit=compiler_args is not None)
    key = key or hlo_module.digest()
    if not isinstance(key, str) or not key or os.sep in key:
        raise invalid(f"compile: key must be a non-empty name without {os.sep!r}, got {key!r}")
    program = Program(hlo_module.program, options.target, metaneff.state_outputs)
    group = _EstimatingGroup(hlo_module.world_size)
    with record_launches() as irs:
        _, device_us = program.run([warmup_inputs(hlo_module)], group)
    kernels = "\n\n".join(str(ir) for ir in irs)
    report = "\n".join(["graph parts:", program.describe(), *map(str, program.reports)])
    estimate = {
        "compute_us_per_rank": device_us[0],
        "collective_us": group.collective_us,
        "device_us": device_us[0] + group.collective_us,
        "kernels": len(irs),
    }
    examples = io.BytesIO()
    torch.save(list(hlo_module.example_inputs), examples)
    neff = artifacts.pack(
        artifacts.NEFF,
        {
            "key": key,
            "world_size": hlo_module.world_size,
            "target": options.target,
            "compiler_args": options.command,
            "recorded_flags": list(options.recorded),
            "estimate": estimate,
        },
        {
            "program.pt2": program_bytes(hlo_module),
            "example_inputs.pt": examples.getvalue(),
            "metaneff.json": metaneff.to_json().encode(),
            "kernels.txt": kernels.encode(),
            "report.txt": report.encode(),
        },
    )
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = os.path.join(os.fspath(compiler_workdir or DEFAULT_WORKDIR), key, stamp)
    os.makedirs(os.path.join(out, "model"), exist_ok=True)
    with open(os.path.join(out, "model", "graph.hlo"), "w") as fh:
        fh.write(str(hlo_module))
    with open(os.path.join(out, "metaneff.pb"), "w") as fh:
        fh.write(metaneff.to_json())
    with open(os.path.join(out, "command.txt"), "w") as fh:
        fh.write(f"nki-sim compile (no neuronx-cc): {options.command}\n")
    with open(os.path.join(out, "log-neuron-cc.txt"), "w") as fh:
        fh.write(report + "\n")
    path = os.path.join(out, "graph.neff")
    artifacts.write(path, neff)
    COMPILED[artifacts.digest(neff)] = program
    return CompilationArtifacts(neff_filepath=path)


# compiled programs of this process by their artifact's hash: NxDModel.add of an artifact
# compiled here reuses the compiled parts (and their traced kernels)
COMPILED: dict[str, Program] = {}


def load_compiled(data: bytes, where: str) -> tuple[artifacts.Bundle, Program, TracedGraph, Any]:
    """A compiled artifact's bundle, its runnable program, its traced graph and metadata."""
    bundle = artifacts.unpack(data, artifacts.NEFF, where)
    with quiet_export():
        ep = torch.export.load(io.BytesIO(bundle.members["program.pt2"]))
    examples = torch.load(io.BytesIO(bundle.members["example_inputs.pt"]), weights_only=True)
    graph = TracedGraph(ep, tuple(examples), bundle.meta["world_size"])
    meta = Metaneff.from_json(bundle.text("metaneff.json"))
    program = COMPILED.get(artifacts.digest(data))
    if program is None:
        program = Program(ep, bundle.meta["target"], meta.state_outputs)
        COMPILED[artifacts.digest(data)] = program
    return bundle, program, graph, meta
