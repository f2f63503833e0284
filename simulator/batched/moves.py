"""On-chip copies the batched backend makes views instead of copying: an exact whole-tile
``nisa.tensor_copy`` / ``nisa.dma_copy``, or an exact 2-D ``nisa.nc_transpose``, of a tile
written by one instruction only, into a fresh tile written by that copy only. Both tiles are
allocated, and the source written, in the same loop body before the copy, so the source's
storage of that allocation never changes afterwards (its next allocation is new storage): a
view of it (transposed for a transpose) holds what a copy would. The current API's
``nc_transpose`` of a tile into PSUM followed by its copy back to SBUF then costs no pass over
the tile at all."""

from __future__ import annotations

from collections.abc import Set

from nki.ir import Access, Alloc, Instr, KernelIR, Loop, Node

from .. import numerics
from ..config import SimConfig

_MOVES = {"tensor_copy", "dma_copy", "nc_transpose"}


def whole_tile(acc: Access, shape: tuple[int, ...]) -> bool:
    """``acc`` is the whole tile of ``shape``, element for element."""
    if acc.shape != shape:
        return False
    for d, e in enumerate(acc.index):
        if e.base.terms or e.base.const:
            return False
        # (a tile axis of length 1 takes only index 0: its coefficient does not matter)
        if any(c != (t == d) for t, c in enumerate(e.coeffs) if shape[t] > 1):
            return False
    return True


def transposes(instr: Instr) -> bool:
    """The move is a transpose (the destination is the source's view with its axes swapped)."""
    return instr.op == "nc_transpose"


def _exact_move(instr: Instr, ir: KernelIR, config: SimConfig) -> bool:
    """``instr`` copies (or transposes) all of its source tile's bits into its destination."""
    if instr.kind != "isa" or instr.op not in _MOVES or instr.dst is None:
        return False
    if instr.mask is not None or instr.accumulates or len(instr.srcs) != 1:
        return False
    src, dst = instr.srcs[0], instr.dst
    if not isinstance(src, Access) or src.indirect or dst.indirect:
        return False
    sd, dd = ir.tensor(src.tensor), ir.tensor(dst.tensor)
    if not (sd.on_chip and dd.on_chip) or sd.dtype != dd.dtype:
        return False
    if numerics.storage_dtype(sd.dtype, config.precise_fp) != numerics.storage_dtype(
        dd.dtype, config.precise_fp
    ):
        return False
    if not whole_tile(src, sd.shape):
        return False
    if instr.op == "nc_transpose":
        return bool(instr.attr("exact")) and len(sd.shape) == 2
    # tensor_copy goes through fp32 unless exact: the same bits only for fp32 tiles
    return instr.op == "dma_copy" or bool(instr.attr("exact")) or sd.dtype == "float32"


def on_chip_moves(
    ir: KernelIR,
    whole: Set[int],
    writes: dict[str, int],
    touched: Set[str],
    config: SimConfig,
) -> frozenset[int]:
    """Ids of the copies whose destination can be a view of their source (see the module
    docstring): ``whole`` are the instructions filling a fresh tile entirely, ``writes`` the
    number of instructions writing each tensor, ``touched`` the tensors hosted instructions or
    device loops use (their storage stays their own)."""
    aliased = {d.alias_of for d in ir.tensors if d.alias_of is not None}
    out: set[int] = set()

    def single(name: str) -> bool:
        d = ir.tensor(name)
        return (
            d.alias_of is None and name not in aliased and name not in touched
            and writes.get(name) == 1
        )  # fmt: skip

    def visit(nodes: tuple[Node, ...]) -> None:
        allocated: set[str] = set()
        written: set[str] = set()
        for n in nodes:
            if isinstance(n, Loop):
                visit(n.body)
                continue
            if isinstance(n, Alloc):
                allocated.add(n.tensor)
                continue
            if id(n) in whole and _exact_move(n, ir, config):
                src, dst = n.srcs[0].tensor, n.dst.tensor  # type: ignore[union-attr]
                here = src in allocated and src in written and dst in allocated
                if here and single(src) and single(dst):
                    out.add(id(n))
            written |= {w.tensor for w in n.writes()}

    visit(ir.body)
    return frozenset(out)
