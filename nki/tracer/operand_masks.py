"""Classic operand masking: ``nl.matmul(lhs_T[i_lhs_f <= 64], rhs[i_rhs_f <= 256], ...)``.

A matmul's two operands share their partition (contraction) axis and each brings free axes of
the result, so one ``mask=`` over the result cannot say which input axis a condition restricts
when both free axes come from the same ``nl.arange``. The classic API lets a Tensor-engine
operand carry its own predicate instead: ``tile[pred]`` (chained, ``x[a < A][b < B]``, for
several). Here the predicate is stated over the operand's own axes and moved onto the result's
axes (the stationary operand's free axis is the result's partition axis, the moving operand's
free axes are the result's free axes) and joined with any ``mask=``: the instruction then
computes, and writes, only the result elements where every condition holds. A condition on the
contraction axis is not supported (the documentation gives none), and only the matmul calls
take a masked operand, as AWS's documentation says.

A transpose's ``mask=`` (``nisa.nc_transpose``, ``nl.transpose``, ``nl.load_transpose2d``) is
moved the same way: it is stated over the input tile's axes, which the result swaps."""

from __future__ import annotations

from ..errors import NKIError, user_loc
from ..ir import Cond, IndexExpr
from ..symbolic import Pred
from .handles import MaskedOperand
from .operands import _fit_conds
from .state import decided_by, generation, note_generation


def mask_operand(tile: object, pred: Pred) -> MaskedOperand:
    """``tile[pred]`` (classic API only)."""
    if generation() == "current":
        raise NKIError(
            f"tile[{pred!r}] masks a matmul operand, a classic-API form, and the kernel is "
            f"current-API{decided_by()}: bound a partial tile with min()-sized slices instead",
            code="err_mixed_api_generations",
            loc=user_loc(),
        )
    note_generation("classic", "an operand mask tile[pred] (classic API only)")
    return MaskedOperand(tile, pred.conds)


def unwrap(x: object) -> tuple[object, tuple[Cond, ...]]:
    """``(tile, conditions)`` of a matmul operand (no conditions for a plain tile)."""
    if isinstance(x, MaskedOperand):
        return x.tile, x.conds
    return x, ()


def result_mask(
    mask: object,
    operands: tuple[tuple[tuple[Cond, ...], tuple[int, ...], tuple[int | None, ...]], ...],
    out_shape: tuple[int, ...],
    api: str,
) -> object:
    """``mask`` joined with the operands' conditions moved onto the result's axes.

    ``operands``: per operand, its conditions, its tile shape and the result axis each of its
    axes becomes (None: the contraction axis)."""
    moved: list[Cond] = []
    for conds, shape, axes in operands:
        for c in _fit_conds(conds, shape, api):
            e = c.expr
            pad = len(shape) - len(e.coeffs)
            coeffs_in, shape_in = (0,) * pad + e.coeffs, (1,) * pad + e.shape
            coeffs, dims = [0] * len(out_shape), [1] * len(out_shape)
            for a, k in enumerate(coeffs_in):
                if not k:
                    continue
                if axes[a] is None:
                    raise NKIError(
                        f"the operand mask {Pred((c,))!r} of '{api}' restricts the contraction "
                        "(partition) axis, which operand masking does not support; slice the "
                        "operands' partitions instead",
                        code="err_unsupported_expression_in_mask",
                        loc=user_loc(),
                    )
                coeffs[axes[a]], dims[axes[a]] = k, shape_in[a]
            moved.append(Cond(IndexExpr(e.base, tuple(coeffs), tuple(dims)), c.op))
    if not moved:
        return mask
    pred = Pred(tuple(moved))
    if mask is None or mask is True:
        return pred
    if mask is False:
        return mask
    return mask & pred


def transposed_mask(mask: object, data_shape: tuple[int, ...], api: str) -> object:
    """The ``mask=`` of a 2-D partition/free transpose, stated over the input tile's axes (the
    index variables the instruction reads ``data`` with, as public kernels write it:
    ``nisa.nc_transpose(t[i, j], mask=(i < B) & (j < N))``), moved onto the result's swapped
    axes. A mask that does not fit the input's shape is left to be fitted to the result's."""
    if not isinstance(mask, Pred) or len(data_shape) != 2:
        return mask
    try:
        _fit_conds(mask.conds, data_shape, api)
    except NKIError as e:
        if e.code != "err_mask_shape_mismatch":
            raise
        return mask
    return result_mask(None, ((mask.conds, data_shape, (1, 0)),), data_shape[::-1], api)
