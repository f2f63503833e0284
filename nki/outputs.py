"""What a traced kernel gives back: its outputs (returned HBM tensors, or the parameters it
writes), the parameters it may write, and the shared-HBM tensors it writes but never returns
(a forgotten ``return``: :class:`nki.errors.UnreturnedOutputWarning`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .errors import NKIError, SrcLoc, UnreturnedOutputWarning, user_loc, warn_at
from .ir import KernelIR, tensor_label
from .tracer import NkiTensor, TraceState, onchip_return
from .tracer.api_checks import broken


def kernel_outputs(st: TraceState, ret: Any) -> tuple[tuple[str, ...], bool]:
    """The kernel's outputs (tensor names) and whether it returns them (else: the parameters it
    writes, the legacy convention). A returned tensor must live in HBM; a returned private-HBM
    tensor becomes shared (one instance) or is an error (a grid, or the current API)."""
    if ret is None:
        written = [p for p in st.params if p in written_bases(st)]
        return tuple(written), False
    items = ret if isinstance(ret, (tuple, list)) else (ret,)
    items = tuple(onchip_return(r, st.grid_shape) for r in items)
    names = []
    for r in items:
        if not isinstance(r, NkiTensor) or r.buffer not in ("shared_hbm", "private_hbm"):
            what = r.buffer if isinstance(r, NkiTensor) else type(r).__name__
            raise NKIError(
                f"a kernel must return HBM tensors created with nl.ndarray(..., "
                f"buffer=nl.shared_hbm) (or mutable parameters); got {what}",
                code="err_kernel_output_must_be_hbm",  # located at the return by trace()
            )
        name = r.decl.alias_of or r.name
        decl = st.tensors[name]
        if decl.buffer == "private_hbm":
            # private HBM is per instance: with one instance it is the output; with a grid
            # every instance would return its own copy, which the hardware cannot do
            if st.grid_shape and int(np.prod(st.grid_shape)) > 1:
                raise NKIError(
                    f"kernel returns {tensor_label(decl)}, allocated in private HBM (nl.hbm / "
                    f"nl.private_hbm), from a launch grid of {st.grid_shape} instances; "
                    "outputs shared by the grid must use buffer=nl.shared_hbm",
                    code="err_output_tensor_must_be_shared_hbm",
                    loc=decl.loc or user_loc(),
                )
            broken(
                "output.shared_hbm",
                f"kernel '{st.name}' returns {tensor_label(decl)}, allocated with "
                "buffer=nl.hbm (private HBM)",
                decl.loc,
            )
            st.tensors[name] = dataclasses.replace(decl, buffer="shared_hbm", kind="output")
        # a returned reshape / view keeps its own shape (its storage is the base tensor's)
        names.append(r.name if r.decl.alias_of else name)
    return tuple(names), True


def check_param_writes(
    st: TraceState, returns: bool, mutable: set[str], written: dict[str, SrcLoc]
) -> None:
    """A kernel that returns its outputs may write only the parameters annotated
    ``nt.mutable_tensor`` (classic API); ``written``: :func:`written_bases` of the trace."""
    if not returns:
        return  # legacy convention: outputs are parameters the kernel writes
    for name, loc in written.items():
        if name in st.params and name not in mutable:
            raise NKIError(
                f"kernel writes to input parameter '{name}', which is immutable; annotate it "
                f"'{name}: nt.mutable_tensor' (import nki.typing as nt) if it is an in/out "
                "tensor",
                code="err_cannot_update_immutable_parameter",
                loc=loc,
            )


def written_bases(st: TraceState) -> dict[str, SrcLoc]:
    """The tensors the trace writes (a view's writes count for its base), each with the line of
    its first write."""
    out: dict[str, SrcLoc] = {}
    for name, loc in st.written.items():
        d = st.tensors.get(name)
        base = d.alias_of if d is not None and d.alias_of else name
        out.setdefault(base, loc)
    return out


def warn_unreturned(ir: KernelIR) -> None:
    """Warn about every shared-HBM tensor the kernel creates and writes but neither returns nor
    reads: what it wrote is lost (typically a forgotten ``return``)."""
    base = {t.name: t.alias_of or t.name for t in ir.tensors}
    created = {t.name: t for t in ir.tensors if t.kind == "output" and not t.alias_of}
    returned = {base[o] for o in ir.outputs} if ir.returns_outputs else set()
    written: dict[str, int] = {}
    read: set[str] = set()
    for ins, _ in ir.instructions():
        for acc in ins.writes():
            written.setdefault(base.get(acc.tensor, acc.tensor), ins.loc.line if ins.loc else 0)
        read.update(base.get(acc.tensor, acc.tensor) for acc in ins.reads())
    for name, decl in created.items():
        if name in returned or name in read or name not in written:
            continue
        how = "returns nothing" if not ir.returns_outputs else "does not return it"
        warn_at(
            f"kernel '{ir.name}' writes the shared-HBM tensor {tensor_label(decl)} (line "
            f"{written[name]}) but {how}: the caller never sees what it wrote. Return it from "
            "the kernel (or drop it)",
            UnreturnedOutputWarning,
            decl.loc,
        )
