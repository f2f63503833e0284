"""Per-core traces of a current-API launch on two physical cores (``kernel[2]``, LNC=2).

In the current API ``nl.program_id(0)`` is a plain Python int on each core, so a kernel may
branch on it (``if nl.program_id(0) == 0:``). Such a kernel, and one whose cores interact
(``nisa.core_barrier``, ``nisa.sendrecv``, ``nki.collectives``), is traced once per core; the
traces become one :class:`~nki.ir.KernelIR` whose ``cores`` hold each core's IR.

The cores share HBM: the parameters, and the shared-HBM tensors the kernel creates, which are
paired between the traces in creation order (each core runs the same ``nl.ndarray(...,
buffer=nl.shared_hbm)`` calls; a tensor only one core creates is that core's own). Every other
tensor of core ``c > 0`` is renamed ``<name>_c<c>`` so that the cores' private SBUF / PSUM /
private HBM never meet."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .errors import NKIError
from .ir import Access, Alloc, Grid, Instr, KernelIR, Loop, Mask, TensorDecl

__all__ = ["merge_cores"]


def _shared_created(ir: KernelIR) -> list[TensorDecl]:
    return [
        t
        for t in ir.tensors
        if t.buffer == "shared_hbm" and t.kind != "param" and t.alias_of is None
    ]


def _renaming(base: KernelIR, ir: KernelIR, core: int) -> dict[str, str]:
    """Core ``core``'s tensor names in the merged IR."""
    names = {t.name: f"{t.name}_c{core}" for t in ir.tensors if t.kind != "param"}
    for mine, theirs in zip(_shared_created(ir), _shared_created(base)):
        if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
            break  # the cores' allocations diverge here: the rest are per core
        names[mine.name] = theirs.name
    # a reshape view (alias) of shared storage is the same tensor on both cores when its root,
    # shape and dtype agree (an alias holds no offset): `return K.reshape(...)` of a parameter
    shared = {t.name for t in base.tensors if t.kind == "param"} | {
        t.name for t in _shared_created(base)
    }
    unused: dict[tuple, list[str]] = {}
    for t in base.tensors:
        if t.alias_of in shared:
            unused.setdefault((t.alias_of, t.shape, t.dtype, t.buffer), []).append(t.name)
    for t in ir.tensors:
        root = names.get(t.alias_of, t.alias_of) if t.alias_of else None
        pool = unused.get((root, t.shape, t.dtype, t.buffer)) if root in shared else None
        if pool:
            names[t.name] = pool.pop(0)
    return names


def _rename(x: Any, names: dict[str, str]) -> Any:
    """``x`` (an IR node, access, declaration or a tuple of them) with tensors renamed."""
    if isinstance(x, tuple):
        return tuple(_rename(e, names) for e in x)
    if isinstance(x, Access):
        return dataclasses.replace(
            x, tensor=names.get(x.tensor, x.tensor), indirect=_rename(x.indirect, names)
        )
    if isinstance(x, Alloc):
        return dataclasses.replace(x, tensor=names.get(x.tensor, x.tensor))
    if isinstance(x, TensorDecl):
        alias = names.get(x.alias_of, x.alias_of) if x.alias_of else None
        return dataclasses.replace(x, name=names.get(x.name, x.name), alias_of=alias)
    if isinstance(x, (Instr, Loop, Mask)):  # Loop includes RuntimeLoop's register accesses
        fields = {f.name: _rename(getattr(x, f.name), names) for f in dataclasses.fields(x)}
        return dataclasses.replace(x, **fields)
    return x


def merge_cores(trace: Callable[[int], KernelIR], grid: Grid) -> KernelIR:
    """Trace the kernel once per physical core of ``grid`` (``trace(core)``) and merge the
    traces: the result's ``cores[c]`` is core ``c``'s one-instance IR."""
    irs = [trace(c) for c in range(grid.num_cores)]
    base = irs[0]
    # (``_by_name`` is the name-lookup cache: a replaced IR starts its own)
    cores = [dataclasses.replace(base, grid=Grid(()), _by_name={})]
    tensors = {t.name: t for t in base.tensors}
    writes_back = list(base.writes_back)
    for c, ir in enumerate(irs[1:], 1):
        names = _renaming(base, ir, c)
        body = _rename(ir.body, names)
        decls = tuple(_rename(t, names) for t in ir.tensors)
        outputs = tuple(names.get(o, o) for o in ir.outputs)
        if outputs != base.outputs or ir.returns_outputs != base.returns_outputs:
            first = next((t.loc for t in decls if t.name in outputs), None) or ir.loc
            raise NKIError(
                f"the two cores of an LNC=2 launch return different tensors (core 0: "
                f"{', '.join(map(base.label, base.outputs)) or 'none'}, core {c}: "
                f"{', '.join(map(ir.label, ir.outputs)) or 'none'}); both cores must return the "
                "same shared-HBM tensors, created by the same nl.ndarray(..., "
                "buffer=nl.shared_hbm) calls in the same order",
                code="err_collective_mismatch",
                loc=first,
            )
        cores.append(dataclasses.replace(ir, tensors=decls, body=body, grid=Grid(()), _by_name={}))
        for t in decls:
            tensors.setdefault(t.name, t)
        writes_back += [p for p in ir.writes_back if p not in writes_back]
    return dataclasses.replace(
        base,
        tensors=tuple(tensors.values()),
        writes_back=tuple(writes_back),
        grid=grid,
        cores=tuple(cores),
        _by_name={},
    )
