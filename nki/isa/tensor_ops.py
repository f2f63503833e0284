"""Tensor-engine instructions: nc_matmul and nc_transpose (SBUF in, PSUM out).

(Module named tensor_ops so that it does not shadow the ``nisa.tensor_engine`` alias.)"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIError, NKIMemoryError, NKIShapeError, NKIUnsupportedError, user_loc
from ..ir import Affine
from ..isa_spec import checked
from ..symbolic import Scalar
from ..targets import FP8_DTYPES, MATMUL_IN_DTYPES
from ..tracer import NkiTensor, classic_mode, stage_psum_operand, state
from .common import emit_isa, free_size, out_dtype, out_tile, rules, target, tile
from .enums import engine_name
from .rules import check_dtype_in


def _perf_name(perf_mode: object) -> str:
    if perf_mode is None:
        return "none"
    name = getattr(perf_mode, "value", perf_mode)
    return str(name)


@checked
def nc_matmul(
    stationary: Any,
    moving: Any,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    tile_position: tuple[int, ...] = (),
    tile_size: tuple[int, ...] = (),
    perf_mode: Any = None,
    *,
    mask: Any = None,
    dtype: Any = None,
) -> NkiTensor:
    """``stationary.T @ moving`` on the Tensor engine, accumulated in fp32 into a new PSUM tile
    of shape (stationary free, moving free).

    Constraints: both operands in SBUF; equal partition (contraction) sizes <= 128; stationary
    free <= 128; moving free <= 512 (trn1/trn2; 4096 on trn3); inputs fp8/bf16/fp16/tf32/fp32;
    result fp32 (bf16 also on trn3). ``psum[...] += nisa.nc_matmul(a, b)`` accumulates.
    ``is_transpose=True`` (trn2+) transposes ``stationary`` bit-exactly (``moving`` must be an
    identity matrix) and keeps its dtype. ``perf_mode='double_row_gen3'`` (trn2+, fp8) takes
    ``[128, 2, F]`` operands and contracts K = 256.

    Example: ``res_psum = nisa.nc_matmul(a_sb[0:128, 0:64], b_sb[0:128, 0:512])`` -> (64, 512).
    """
    api = "nisa.nc_matmul"
    r = rules()
    # classic mode: PSUM operands staged in SBUF
    stationary = stage_psum_operand(stationary, api)
    moving = stage_psum_operand(moving, api)
    sacc, st = tile(stationary, api, "stationary", ("sbuf",))
    macc, mt = tile(moving, api, "moving", ("sbuf",))
    for role, t in (("stationary", st), ("moving", mt)):
        check_dtype_in(t.decl.dtype, _in_dtypes(), api, role, "err_unsupported_matmul_dtype")
    perf = _perf_name(perf_mode)
    sshape, mshape = sacc.shape, macc.shape
    if perf != "none":
        if perf not in r.matmul_perf_modes:
            raise NKIUnsupportedError(
                f"perf_mode={perf!r} of '{api}' is not available on {target().name} "
                f"(NeuronCore-v{target().gen}); supported: {list(r.matmul_perf_modes) or 'none'}",
                code="err_unsupported_perf_mode",
                loc=user_loc(),
            )
        for role, t in (("stationary", st), ("moving", mt)):
            check_dtype_in(t.decl.dtype, FP8_DTYPES, f"{api}(perf_mode={perf})", role)
        for role, shp in (("stationary", sshape), ("moving", mshape)):
            if len(shp) != 3 or shp[1] != 2:
                raise NKIShapeError(
                    f"perf_mode={perf!r} of '{api}' needs '{role}' shaped [K, 2, F]; got "
                    f"{list(shp)}",
                    code="err_matmul_shape",
                    loc=user_loc(),
                )
        m_free, n_free = sshape[2], mshape[2]
        kdim = 2 * sshape[0]
    else:
        if len(sshape) != 2:
            raise NKIShapeError(
                f"'stationary' of '{api}' must be 2-D [K, M]; got {list(sshape)}",
                code="err_exceed_max_supported_dimension",
                loc=user_loc(),
            )
        m_free, n_free = sshape[1], free_size(mshape)
        kdim = sshape[0]
    if sshape[0] != mshape[0]:
        raise NKIShapeError(
            f"contraction (partition) sizes of '{api}' differ: stationary{list(sshape)} has "
            f"{sshape[0]} partitions, moving{list(mshape)} has {mshape[0]}",
            code="err_num_partition_mismatch",
            loc=user_loc(),
        )
    tgt = target()
    if m_free > tgt.gemm_stationary_fmax:
        raise NKIShapeError(
            f"free size {m_free} of 'stationary' {list(sshape)} of '{api}' exceeds the "
            f"architecture limitation of {tgt.gemm_stationary_fmax}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    if n_free > r.matmul_moving_fmax:
        raise NKIShapeError(
            f"free size {n_free} of 'moving' {list(mshape)} of '{api}' exceeds the "
            f"architecture limitation of {r.matmul_moving_fmax} on {tgt.name}",
            code="err_size_of_dimension_exceed_arch_limit",
            loc=user_loc(),
        )
    tiling = _check_tiling(tile_position, tile_size, sshape[0], m_free, perf, api)
    if is_transpose:
        if not r.matmul_transpose_mode:
            raise NKIUnsupportedError(
                f"is_transpose=True of '{api}' needs the PE transpose mode of NeuronCore-v3 "
                f"(trn2) or newer; target is {tgt.name} (NeuronCore-v{tgt.gen})",
                code="err_unsupported_perf_mode",
                loc=user_loc(),
            )
        if tuple(mshape) != (kdim, kdim):
            raise NKIShapeError(
                f"is_transpose=True of '{api}' needs 'moving' to be a ({kdim}, {kdim}) identity "
                f"matrix; got shape {list(mshape)}",
                code="err_matmul_shape",
                loc=user_loc(),
            )
        default = st.decl.dtype
        out_shape: tuple[int, ...] = (m_free, kdim)
    else:
        default = "float32"
        out_shape = (m_free, *mshape[1:]) if perf == "none" else (m_free, n_free)
    odt = out_dtype(dtype, default)
    if not is_transpose and odt not in r.matmul_out_dtypes:
        raise NKIError(
            f"'{api}' writes its fp32 accumulation to PSUM as {'/'.join(r.matmul_out_dtypes)} "
            f"on {tgt.name}; dtype={odt} is not supported",
            code="err_unsupported_matmul_dtype",
            loc=user_loc(),
        )
    out = out_tile(out_shape, odt, api, "psum")
    attrs: dict[str, Any] = {"engine": "tensor", "transpose": bool(is_transpose), "perf_mode": perf}
    if tiling is not None and not all(a.is_const for a in tiling):
        # loop-dependent PE tile: alignment checked per iteration by the executor
        attrs["tile_position"] = tiling
        attrs["tile_size"] = (int(tile_size[0]), int(tile_size[1]))
    if classic_mode():  # psum += nc_matmul(...) on a fresh PSUM tile starts the group
        attrs["psum_group"] = True
    emit_isa("nc_matmul", out.access_(), (sacc, macc), attrs, mask=mask, api=api)
    return out


def _in_dtypes() -> tuple[str, ...]:
    return MATMUL_IN_DTYPES


def _check_tiling(
    position: Any, size: Any, k: int, m: int, perf: str, api: str
) -> tuple[Affine, Affine] | None:
    """PE-array tiling: sizes from the target's list, positions aligned to the sizes and inside
    the 128x128 array, and the operands must fit the tile (row = contraction, column =
    stationary free). Positions may be affine in loop iterators / program ids (as in the AWS
    ``nc_matmul`` example): those are checked over the loop ranges here and exactly, per
    iteration, when the instruction runs (the returned affine (row, column) positions)."""
    if not position and not size:
        return None
    if len(tuple(position)) != 2 or len(tuple(size)) != 2:
        raise NKIError(
            f"tile_position and tile_size of '{api}' must both be (row, column) pairs; got "
            f"tile_position={position!r}, tile_size={size!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    ok = rules().matmul_tile_sizes
    pos: list[Affine] = []
    for what, s, p, need in (("row", size[0], position[0], k), ("column", size[1], position[1], m)):
        if isinstance(s, Scalar) or s not in ok:
            raise NKIError(
                f"tile_size {what} {s} of '{api}' is not supported on {target().name}; "
                f"supported sizes: {list(ok)} (compile-time integers)",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        aff = p.aff if isinstance(p, Scalar) else Affine.constant(_static_position(p, what, api))
        lo, hi = _position_bounds(aff)
        if (aff.is_const and aff.const % s) or lo < 0 or hi + s > 128:
            shown = aff.const if aff.is_const else f"{aff} (in [{lo}, {hi}])"
            raise NKIError(
                f"tile_position {what} {shown} of '{api}' must be a multiple of the tile size {s} "
                f"within the 128x128 PE array (position + size <= 128)",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        if need > s:
            raise NKIShapeError(
                f"'{api}' operand {what} extent {need} does not fit tile_size {what} {s}",
                code="err_invalid_tile_position",
                loc=user_loc(),
            )
        pos.append(aff)
    if perf != "none" and size[1] != 128:
        raise NKIError(
            f"perf_mode={perf!r} of '{api}' cannot be combined with PE column tiling "
            f"(tile_size column {size[1]}); use a column size of 128",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    return (pos[0], pos[1])


def _static_position(p: Any, what: str, api: str) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise NKIError(
            f"tile_position {what} of '{api}' must be an integer or an affine expression of loop "
            f"iterators / program ids; got {p!r}",
            code="err_invalid_tile_position",
            loc=user_loc(),
        )
    return int(p)


def _position_bounds(aff: Affine) -> tuple[int, int]:
    """(min, max) of a position over the enclosing loops' ranges (program ids unbounded here:
    their values are checked when the instruction runs)."""
    ranges = state("nisa.nc_matmul").loop_ranges
    if any(s not in ranges for s in aff.symbols()):
        return aff.const, aff.const
    return aff.bounds(ranges)


@checked
def nc_transpose(
    data: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None
) -> NkiTensor:
    """Partition <-> free transpose (free axes collapsed first).

    Tensor engine: up to 128 x 128, SBUF in, PSUM out; done as a matmul with an identity, so on
    NeuronCore-v2 NaN / Inf do not survive bit-exactly. Vector engine: up to 32 x 32, SBUF or
    PSUM in, SBUF out. With no engine, the Tensor engine is used for SBUF inputs and the Vector
    engine for PSUM inputs.

    Example: ``t_psum = nisa.nc_transpose(x_sb)`` for ``x_sb`` of shape (64, 128) -> (128, 64).
    """
    api = "nisa.nc_transpose"
    acc, t = tile(data, api, "data")
    eng = engine_name(engine)
    p, f = acc.shape[0], free_size(acc.shape)
    if eng == "unknown":
        eng = "tensor" if t.buffer == "sbuf" else "vector"
    r = rules()
    if eng == "tensor":
        lim = r.tensor_transpose_max
        if t.buffer != "sbuf":
            raise NKIMemoryError(
                f"'{api}' on the Tensor engine reads SBUF only; 'data' is in {t.buffer} "
                f"('{t.name}'); use engine=nisa.vector_engine for PSUM inputs (<= 32x32)",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        buffer = "psum"
    elif eng == "vector":
        lim = r.vector_transpose_max
        buffer = "sbuf"
    else:
        raise NKIError(
            f"'{api}' runs on the Tensor or Vector engine, not {eng}",
            code="err_unsupported_engine_for_op",
            loc=user_loc(),
        )
    for d, (n, mx) in enumerate(zip((p, f), lim)):
        if n > mx:
            raise NKIShapeError(
                f"size of dimension {d} in 'data{list(acc.shape)}' of '{api}' exceeds the "
                f"architecture limitation of {mx} on the {eng} engine ({lim[0]}x{lim[1]})",
                code="err_size_of_dimension_exceed_arch_limit",
                loc=user_loc(),
            )
    odt = out_dtype(dtype, t.decl.dtype)
    if eng == "tensor" and not dtypes.is_float(t.decl.dtype):
        check_dtype_in(t.decl.dtype, _in_dtypes(), api, "data", "err_unsupported_matmul_dtype")
    out = out_tile((f, p), odt, api, buffer)
    attrs = {"engine": eng, "exact": eng == "vector" or r.pe_transpose_bit_exact}
    if engine_name(engine) == "unknown":
        # engine left to the compiler: ``sbuf_t[...] = nisa.nc_transpose(x)`` is realised as a
        # Tensor-engine transpose into PSUM plus a copy (as in the AWS attention tutorials)
        attrs["staged"] = True
    emit_isa("nc_transpose", out.access_(), (acc,), attrs, mask=mask, api=api)
    return out
