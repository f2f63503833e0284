"""Tensor-engine (PE array) instructions: nc_matmul and nc_transpose (SBUF in, PSUM out). The
MX matmul is in ``mx.py`` with the other microscaling instruction."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import (
    NKIError,
    NKIMemoryError,
    NKIShapeError,
    NKITypeError,
    NKIUnsupportedError,
    user_loc,
)
from ..targets import FP8_DTYPES, MATMUL_IN_DTYPES
from ..tracer import NkiTensor, classic_mode, operand, stage_psum_operand
from ..tracer.api_checks import broken
from ..tracer.operand_masks import result_mask, transposed_mask, unwrap
from .common import SBUF, Call, accumulate_unwritten, free_size
from .enums import engine_name
from .forms import dst_dtype, dst_view, instruction
from .rules import check_dtype_in, check_pe_tiling, rules, target

_FP32_LIKE = frozenset({"float32", "tfloat32"})
_NOT_OCP = tuple(d for d in MATMUL_IN_DTYPES if d != "float8_e4m3fn")


def _perf_name(perf_mode: object) -> str:
    if perf_mode is None:
        return "none"
    name = getattr(perf_mode, "value", perf_mode)
    return str(name)


def _matmul_into(name: str, dst: Any, a: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
    """``accumulate``: False overwrites, True adds, None (default) makes ``dst`` a PSUM
    accumulation group: per element, the first write overwrites and later writes add."""
    acc = a.pop("accumulate")
    if acc not in (None, True, False):
        raise NKITypeError(
            f"accumulate= of nisa.nc_matmul must be True, False or None; got {acc!r}",
            code="err_invalid_argument",
            loc=user_loc(),
        )
    _, t = operand(dst_view(dst), "nisa.nc_matmul", "dst")
    if t.decl.buffer != "psum":
        raise NKIError(
            f"dst of nisa.nc_matmul must be a PSUM tile; got a tile in {t.decl.buffer}",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    if acc is True:
        accumulate_unwritten(t, "nisa.nc_matmul")
    if a.get("perf_mode") is not None and str(a["perf_mode"]).endswith("none"):
        a["perf_mode"] = None
    a["dtype"] = dst_dtype(dst)
    if acc is False:
        return dst, None, {"psum_group": False}
    return dst, "add", {"psum_group": acc is None}


@instruction(current=_matmul_into)
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
    free <= 128; moving free <= 512 (trn1/trn2; on trn3 4096 for an fp32 result, 8192 for a bf16
    one); inputs fp8/bf16/fp16/tf32/fp32 (float8_e4m3fn on trn3 only); result fp32 (bf16 also on
    trn3). ``psum[...] += nisa.nc_matmul(a, b)`` accumulates.
    ``is_transpose=True`` (trn2+) transposes ``stationary`` bit-exactly (``moving`` must be an
    identity matrix) and keeps its dtype. ``perf_mode='double_row_gen3'`` (trn2+, fp8) takes
    ``[128, 2, F]`` operands and contracts K = 256. Classic operand masks
    (``stationary[i_m < M]``, ``moving[i_n < N]``) bound the result rows / columns computed.

    Example: ``res_psum = nisa.nc_matmul(a_sb[0:128, 0:64], b_sb[0:128, 0:512])`` -> (64, 512).
    """
    c = Call("nc_matmul", dtype)
    api = c.api
    r = rules()
    (stationary, s_conds), (moving, m_conds) = unwrap(stationary), unwrap(moving)
    # classic mode: PSUM operands staged in SBUF
    stationary = stage_psum_operand(stationary, api)
    moving = stage_psum_operand(moving, api)
    sacc, st = c.tile(stationary, "stationary", SBUF)
    macc, mt = c.tile(moving, "moving", SBUF)
    # (float8_e4m3fn, OCP FP8, from NeuronCore-v4 on)
    ins = MATMUL_IN_DTYPES if r.matmul_ocp_fp8 else _NOT_OCP
    for role, t in (("stationary", st), ("moving", mt)):
        check_dtype_in(t.decl.dtype, ins, f"{api} on {target().name}", role,
                       "err_unsupported_matmul_dtype")  # fmt: skip
    pair = {st.decl.dtype, mt.decl.dtype}
    shown = f"'{api}' got stationary {st.decl.dtype} and moving {mt.decl.dtype}"
    if pair == {"float8_e4m3", "float8_e4m3fn"}:
        broken("nc_matmul.fp8_mix", shown)
    if len(pair & _FP32_LIKE) == 1 and len(pair) == 2:
        broken("nc_matmul.fp32_pair", shown)
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
            fp8 = tuple(d for d in FP8_DTYPES if d in ins)
            check_dtype_in(t.decl.dtype, fp8, f"{api}(perf_mode={perf})", role)
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
    # (the moving free size is as many PSUM columns as matmul_moving_fmax fp32 ones: NeuronCore-v4
    # writes 4096 fp32 or 8192 bfloat16 columns, its whole PSUM)
    mlim = r.matmul_moving_fmax * (2 if c.result_dtype() == "bfloat16" else 1)
    for what, shp, n, lim, where in (
        ("stationary", sshape, m_free, tgt.gemm_stationary_fmax, ""),
        ("moving", mshape, n_free, mlim, f" on {tgt.name} for a {c.result_dtype()} result"),
    ):
        if n > lim:
            raise NKIShapeError(
                f"free size {n} of '{what}' {list(shp)} of '{api}' exceeds the architecture "
                f"limitation of {lim}{where}",
                code="err_size_of_dimension_exceed_arch_limit",
                loc=user_loc(),
            )
    tiling = check_pe_tiling(tile_position, tile_size, sshape[0], m_free, perf, api)
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
        odt = c.result_dtype() if dtype is not None else st.decl.dtype
        out_shape: tuple[int, ...] = (m_free, kdim)
    else:
        odt = c.result_dtype()
        out_shape = (m_free, *mshape[1:]) if perf == "none" else (m_free, n_free)
    if not is_transpose and odt not in r.matmul_out_dtypes:
        raise NKIError(
            f"'{api}' writes its fp32 accumulation to PSUM as {'/'.join(r.matmul_out_dtypes)} "
            f"on {tgt.name}; dtype={odt} is not supported",
            code="err_unsupported_matmul_dtype",
            loc=user_loc(),
        )
    params: dict[str, Any] = {"is_transpose": bool(is_transpose), "perf_mode": perf}
    if tiling is not None and not all(a.is_const for a in tiling):
        # loop-dependent PE tile: alignment checked per iteration by the executor
        params["tile_position"] = tiling
        params["tile_size"] = (int(tile_size[0]), int(tile_size[1]))
    if classic_mode():  # psum += nc_matmul(...) on a fresh PSUM tile starts the group
        params["psum_group"] = True
    if s_conds or m_conds:
        if perf != "none" or is_transpose:
            raise NKIShapeError(
                f"operand masks (tile[pred]) of '{api}' need a plain matmul, not "
                f"perf_mode={perf!r} / is_transpose={bool(is_transpose)}; pass mask= instead",
                code="err_unsupported_expression_in_mask",
                loc=user_loc(),
            )
        axes = (None, *range(1, len(mshape)))  # moving: free axes are the result's free axes
        operands = ((s_conds, sshape, (None, 0)), (m_conds, mshape, axes))
        mask = result_mask(mask, operands, out_shape, api)
    return c.new(out_shape, (sacc, macc), buffer="psum", dtype=odt, mask=mask, **params)


@instruction
def nc_transpose(
    data: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None
) -> NkiTensor:
    """Partition <-> free transpose (free axes collapsed first).

    Tensor engine: up to 128 x 128, SBUF in, PSUM out; done as a matmul with an identity, so on
    NeuronCore-v2 NaN / Inf do not survive bit-exactly. Vector engine: up to 32 x 32, SBUF or
    PSUM in, SBUF out. With no engine, the Tensor engine is used for SBUF inputs and the Vector
    engine for PSUM inputs. In the current API ``dst`` has ``data``'s dtype (AWS's rule); a
    Tensor-engine transpose of a float tile into an fp32 PSUM tile, which public kernels write,
    runs exactly (a matmul with an identity) with a ``DtypeRuleWarning``.

    Example: ``t_psum = nisa.nc_transpose(x_sb)`` for ``x_sb`` of shape (64, 128) -> (128, 64).
    """
    c = Call("nc_transpose", dtype)
    acc, t = c.tile(data, "data")
    p, f = acc.shape[0], free_size(acc.shape)
    eng = c.choose_engine(engine, "tensor" if t.buffer == "sbuf" else "vector")
    r = rules()
    lim = r.tensor_transpose_max if eng == "tensor" else r.vector_transpose_max
    if eng == "tensor" and t.buffer != "sbuf":
        raise NKIMemoryError(
            f"'{c.api}' on the Tensor engine reads SBUF only; 'data' is in {t.buffer} "
            f"({t.label}); use engine=nisa.vector_engine for PSUM inputs (<= 32x32)",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    for d, (n, mx) in enumerate(zip((p, f), lim)):
        if n > mx:
            raise NKIShapeError(
                f"size of dimension {d} in 'data{list(acc.shape)}' of '{c.api}' exceeds the "
                f"architecture limitation of {mx} on the {eng} engine ({lim[0]}x{lim[1]})",
                code="err_size_of_dimension_exceed_arch_limit",
                loc=user_loc(),
            )
    odt = c.result_dtype()
    if odt != t.decl.dtype:
        # (the Tensor engine widening a float into fp32 PSUM is exact: a matmul with identity)
        widen = eng == "tensor" and odt == "float32" and dtypes.is_float(t.decl.dtype)
        rule = "nc_transpose.widen" if widen else "nc_transpose.dtype"
        broken(rule, f"'{c.api}' got data {t.decl.dtype} and dst {odt}")
    # (any dtype, as the documentation's "Data types" says; NeuronCore-v2's PE transpose is
    # inexact only for NaN / Inf, which integers do not have: an integer one is a plain move)
    exact = eng == "vector" or r.pe_transpose_bit_exact or not dtypes.is_float(t.decl.dtype)
    params: dict[str, Any] = {"exact": exact}
    if engine_name(engine) == "unknown":
        # engine left to the compiler: ``sbuf_t[...] = nisa.nc_transpose(x)`` is realised as a
        # Tensor-engine transpose into PSUM plus a copy (as in the AWS attention tutorials)
        params["staged"] = True
    buffer = "psum" if eng == "tensor" else "sbuf"
    mask = transposed_mask(mask, acc.shape, c.api)
    return c.new((f, p), (acc,), buffer=buffer, dtype=odt, mask=mask, engine=eng, **params)
