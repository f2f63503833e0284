"""Subscripts: ``t[key]`` with integers, slices, ``nl.ds``, ``nl.arange`` / ``nl.mgrid``
expressions, program ids, loop iterators and index tiles, turned into per-dimension affine
index expressions (an ``Access``) and composed with the access being indexed."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..errors import NKIIndexError, user_loc
from ..ir import Access, Affine, IndexExpr, tensor_label
from ..symbolic import DynSlice, Index, MGrid, Scalar, _Traced, broadcast_shapes, expand_expr
from . import state
from .handles import DynOffset, TileOps, _Assigned, is_register


def prod(shape: tuple[int, ...]) -> int:
    """Number of elements of ``shape``."""
    n = 1
    for s in shape:
        n *= s
    return n


def _scalar_aff(x: object, what: object) -> Affine | None:
    if isinstance(x, Scalar):
        return x.aff
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return Affine.constant(x)
    if hasattr(x, "__index__") and not isinstance(x, _Traced) and not isinstance(x, TileOps):
        try:
            return Affine.constant(int(x.__index__()))  # numpy integers
        except TypeError:  # an array that is not one integer: not a valid start
            return None
    return None


def _label(name: str) -> str:
    """The user's name of the traced tensor ``name`` (``nki.ir.tensor_label``)."""
    st = state.current()
    decl = st.tensors.get(name) if st is not None else None
    return tensor_label(decl) if decl is not None else f"'{name}'"


def _runtime(x: object) -> str:
    """Advice for a subscript that is a run-time value (a register: a one-element SBUF tile,
    such as a device loop's iterator), which addresses a view only as a dynamic offset; empty
    for anything else."""
    if not is_register(x):
        return ""
    return (
        f"; {x!r} is a register, known only at run time (a device loop's iterator is one): "
        "use it as a dynamic offset, t.ap(pattern, offset, scalar_offset=reg) or "
        "t.select(dim, reg)"
    )


def parse_subscript(key: object, shape: tuple[int, ...], what: object) -> Access:
    """Turn ``t[key]`` into per-dimension index expressions over the result tile shape.

    The returned Access has tensor '' (it indexes the *view*); ``compose`` maps it onto the
    underlying tensor."""
    if isinstance(key, MGrid):  # t[nl.mgrid[0:128, 0:512]]: the grid's axes, one per dim
        key = tuple(key)
    keys = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in keys):
        i = keys.index(Ellipsis)
        if Ellipsis in keys[i + 1 :]:
            raise NKIIndexError("an index can only have a single ellipsis", loc=user_loc())
        n_fill = len(shape) - (len(keys) - 1)
        keys = keys[:i] + [slice(None)] * max(n_fill, 0) + keys[i + 1 :]
    if len(keys) > len(shape):
        raise NKIIndexError(
            f"too many indices for {what}: {len(keys)} indices for {len(shape)} dimensions "
            f"(shape {shape})",
            code="err_too_many_indices",
            loc=user_loc(),
        )
    advanced = [k for k in keys if isinstance(k, (Index, TileOps, _Assigned, DynOffset))]
    if advanced:
        return _parse_advanced(keys, shape, what)
    keys += [slice(None)] * (len(shape) - len(keys))
    out_shape: list[int] = []
    parts: list[tuple[Affine, int | None, int]] = []  # (base, result axis or None, stride)
    for d, k in enumerate(keys):
        n = shape[d]
        if isinstance(k, (slice, DynSlice)):
            base, size, step = _slice_bounds(k, n, d, what)
            parts.append((base, len(out_shape), step))
            out_shape.append(size)
            continue
        aff = _scalar_aff(k, what)
        if aff is None:
            raise NKIIndexError(
                f"unsupported index {k!r} for dimension {d} of {what}: use integers, slices, "
                "nl.ds(start, size), program ids, loop iterators or nl.arange expressions",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        if not isinstance(k, Scalar) and aff.is_const and -n <= aff.const < 0:
            # Python-style negative index, only for literal ints: an index *expression* that
            # folds to a negative constant (e.g. `ip - 1` over a 1-row arange) is out of bounds.
            aff = Affine.constant(aff.const + n)
        if not isinstance(k, Scalar) and aff.is_const and not 0 <= aff.const < n:
            raise NKIIndexError(  # (here, at the subscript: not where the view is used)
                f"out-of-bound access for {what} on dimension {d}: index {k!r} is outside the "
                f"dimension size of {n}",
                code="err_tensor_access_out_of_bound",
                loc=user_loc(),
            )
        parts.append((aff, None, 0))
    rshape = tuple(out_shape)
    idx = []
    for base, ax, step in parts:
        coeffs = tuple(step if (j == ax and rshape[j] > 1) else 0 for j in range(len(rshape)))
        idx.append(IndexExpr(base, coeffs, rshape))
    return Access("", rshape, tuple(idx))


def _slice_bounds(k: slice | DynSlice, n: int, d: int, what: object) -> tuple[Affine, int, int]:
    if isinstance(k, DynSlice):
        start = _scalar_aff(k.start, what)
        if start is None:
            got = type(k.start).__name__ if isinstance(k.start, TileOps) else repr(k.start)
            advice = _runtime(k.start)
            if state.generation() != "current":  # (the current API has no index tiles)
                advice += (
                    "; for an offset held in a tile (data-dependent), index with the tile "
                    "itself (an indirect access, t[idx_tile, ...])"
                )
            raise NKIIndexError(
                f"nl.ds start must be a compile-time integer, a loop iterator / program id or "
                f"an affine expression of them, got {got}{advice}",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        return start, k.size, k.step
    step = 1 if k.step is None else _scalar_aff(k.step, what)
    if not isinstance(step, int):
        if step is None or not step.is_const:
            raise NKIIndexError("slice steps must be integer constants", loc=user_loc())
        step = step.const
    if step <= 0:
        raise NKIIndexError(f"slice step must be positive, got {step}", loc=user_loc())
    start = Affine.constant(0) if k.start is None else _scalar_aff(k.start, what)
    stop = Affine.constant(n) if k.stop is None else _scalar_aff(k.stop, what)
    if start is None or stop is None:
        advice = _runtime(k.start) or _runtime(k.stop)
        raise NKIIndexError(
            f"unsupported slice bounds {k!r} on {what}{advice}",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )
    if start.is_const and stop.is_const:
        if 0 <= start.const < stop.const and stop.const > n:  # no silent clipping (issue 5)
            raise NKIIndexError(
                f"out-of-bound access for {what} on dimension {d}: index range "
                f"[{start.const}, {stop.const - 1}] exceeds the dimension size of {n}",
                code="err_tensor_access_out_of_bound",
                loc=user_loc(),
            )
        s0, s1, _ = slice(start.const, stop.const, step).indices(n)
        return Affine.constant(s0), max(0, len(range(s0, s1, step))), step
    extent = stop + start.scale(-1)
    if not extent.is_const:
        raise NKIIndexError(
            f"slice {_fmt_slice(start, stop)} on dimension {d} of {what} has a size that depends "
            "on a traced value; tile sizes must be compile-time constants",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )
    size = len(range(0, extent.const, step))
    return start, size, step


def _fmt_slice(a: Affine, b: Affine) -> str:
    return f"[{a}:{b}]"


def _parse_advanced(keys: list[object], shape: tuple[int, ...], what: object) -> Access:
    for k in keys:
        if isinstance(k, (slice, DynSlice)) or k is Ellipsis:
            raise NKIIndexError(
                f"mixing basic indexing (slices) and advanced indexing (nl.arange / nl.mgrid) "
                f"in one subscript of {what} is not supported; use nl.arange for every "
                "sliced dimension" + next(filter(None, map(_runtime, keys)), ""),
                code="err_unsupported_mixing_basic_advanced_tensor_indexing",
                loc=user_loc(),
            )
        if isinstance(k, Index) and k.ndim == 1:
            raise NKIIndexError(
                f"a 1-D nl.arange cannot index {what}; give each index its own axis, e.g. "
                "nl.arange(128)[:, None] and nl.arange(512)[None, :]",
                code="err_1d_arange_not_supported",
                loc=user_loc(),
            )
    if len(keys) < len(shape) and all(n == 1 for n in shape[len(keys) :]):
        keys = [*keys, *[0] * (len(shape) - len(keys))]  # (trailing unit dims: their one index)
    if len(keys) != len(shape):
        raise NKIIndexError(
            f"advanced indexing of {what} needs one index per dimension: got {len(keys)} "
            f"indices for shape {shape}" + next(filter(None, map(_runtime, keys)), ""),
            code="err_unsupported_mixing_basic_advanced_tensor_indexing",
            loc=user_loc(),
        )
    tiles: dict[int, Access] = {}  # indirect indexing: dim -> SBUF tile of index values
    dyn: dict[int, Any] = {}  # dynamic offsets: dim -> affine part (Index / Scalar / int)
    for d, k in enumerate(keys):
        if isinstance(k, DynOffset):
            tiles[d] = _index_tile(k.tile, what)
            dyn[d] = k.part
        elif isinstance(k, (TileOps, _Assigned)):
            tiles[d] = _index_tile(k, what)
    sparsified = False
    try:
        rshape = _index_shape(keys, tiles, dyn)
    except NKIIndexError:
        # indices from different nl.mgrid calls (``t[i_p, j * 6 + i_f]`` with i_p from a 3-D
        # and i_f from a 2-D mgrid): each index is an iterator over the axes it uses, so
        # broadcast them over those axes only (the unused ones are dropped below)
        sparse = [_sparse(k) if isinstance(k, Index) else k for k in keys]
        if not tiles and any(s is not k for s, k in zip(sparse, keys)):
            rshape, keys, sparsified = _index_shape(sparse, tiles, dyn), sparse, True
        else:
            raise
    idx = []
    for d, k in enumerate(keys):
        if isinstance(k, Index):
            idx.append(expand_expr(k.expr, rshape))
            continue
        if d in dyn:
            part = dyn[d]
            if isinstance(part, Index):
                idx.append(expand_expr(part.expr, rshape))
            else:
                base = part.aff if isinstance(part, Scalar) else Affine.constant(int(part))
                idx.append(IndexExpr(base, (0,) * len(rshape), rshape))
            continue
        if d in tiles:
            idx.append(IndexExpr(Affine(), (0,) * len(rshape), rshape))
            continue
        aff = _scalar_aff(k, what)
        if aff is None:
            raise NKIIndexError(
                f"unsupported index {k!r} for dimension {d} of {what}",
                code="err_unsupported_index_expression",
                loc=user_loc(),
            )
        if not isinstance(k, Scalar) and aff.is_const and -shape[d] <= aff.const < 0:
            aff = Affine.constant(aff.const + shape[d])  # literal negative int: Python meaning
        idx.append(IndexExpr(aff, (0,) * len(rshape), rshape))
    if not tiles:
        # more grid axes than tensor dims: drop every unused mgrid axis; otherwise only unused
        # axes of extent > 1 (``t[i_p, 2]``), as extent-1 axes carry no coefficient to tell
        used = [k for k in keys if isinstance(k, Index)]
        # (indices that broadcast, ``nl.arange(B)[:, None, None]``, give the NumPy shape: an
        # extent-1 axis between them is the tile's own, not an unused mgrid axis)
        dense = sparsified or all(tuple(k.shape) == rshape for k in used)
        rshape, idx = _drop_unreferenced(rshape, idx, used, len(rshape) <= len(shape) or not dense)
    return Access("", rshape, tuple(idx), tuple(sorted(tiles.items())))


def _index_shape(keys: list[object], tiles: dict[int, Access], dyn: dict[int, Any]) -> tuple:
    """The broadcast shape of a subscript's index arrays (the tile shape)."""
    rshape: tuple[int, ...] = ()
    for d, k in enumerate(keys):
        if isinstance(dyn.get(d), Index):
            rshape = broadcast_shapes(rshape, dyn[d].shape)
        elif d in tiles and d not in dyn:
            if prod(tiles[d].shape) != 1:  # a one-element tile is a dynamic scalar offset
                rshape = broadcast_shapes(rshape, tiles[d].shape)
        elif isinstance(k, Index):
            rshape = broadcast_shapes(rshape, k.shape)
    return rshape


def _sparse(k: Index) -> Index:
    """``k`` with extent 1 on the axes it does not vary along (an mgrid index is dense)."""
    e = k.expr
    shape = tuple(n if c else 1 for c, n in zip(e.coeffs, e.shape))
    return k if shape == e.shape else Index(IndexExpr(e.base, e.coeffs, shape))


def _drop_unreferenced(
    rshape: tuple[int, ...], idx: list[IndexExpr], keys: list[Index], wide_only: bool = False
) -> tuple[tuple[int, ...], list[IndexExpr]]:
    """``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:512]`` then ``t[iw, iy]``: a tile over the grid
    axes the indices use, [1, 512] (classic NKI; the tutorials' layernorm and rmsnorm rely on
    it), not over every axis of the mgrid. Only axes that no index refers to and along which
    every index is dense (an mgrid axis, not a broadcast) are dropped."""
    n = len(rshape)
    shapes = [(1,) * (n - len(k.shape)) + tuple(k.shape) for k in keys]  # NumPy alignment
    coeffs = [(0,) * (n - len(k.shape)) + tuple(k.expr.coeffs) for k in keys]
    keep = [
        a
        for a in range(n)
        if any(c[a] for c in coeffs)
        or any(ks[a] != rshape[a] for ks in shapes)
        or (wide_only and rshape[a] == 1)
    ]
    if len(keep) == len(rshape) or not keep:
        return rshape, idx
    new_shape = tuple(rshape[a] for a in keep)
    new_idx = [IndexExpr(e.base, tuple(e.coeffs[a] for a in keep), new_shape) for e in idx]
    return new_shape, new_idx


def _index_tile(k: object, what: object) -> Access:
    """An on-chip integer tile used as an index (indirect DMA): its values are the indices."""
    if isinstance(k, _Assigned):
        k = k.view
    assert isinstance(k, TileOps)
    t = k.tensor_()
    if not t.decl.on_chip or not (dtypes.is_int(t.decl.dtype)):
        raise NKIIndexError(
            f"a tile used as an index of {what} must be an integer tile in SBUF/PSUM, got "
            f"{t.decl.dtype} in {t.buffer} ({t.label})",
            code="err_unsupported_index_expression",
            loc=user_loc(),
        )
    return k.access_()


def compose(outer: Access, sub: Access) -> Access:
    """Index a view: substitute the sub-access's expressions for the view's tile axes."""
    # View axes of extent 1 carry no coefficient, so an index along them would vanish here; in a
    # whole-tensor view axis a *is* tensor dimension a (stride 1), elsewhere it must be 0.
    identity = len(outer.index) == len(outer.shape) and all(
        e.base.is_const
        and e.base.const == 0
        and all(c == (d == a) for a, c in enumerate(e.coeffs) if c)
        for d, e in enumerate(outer.index)
    )
    first = sub.index[0] if sub.index else None
    if first is not None and any(ind.shape[0] > 1 for _, ind in outer.indirect):
        # (a gathered view, vector_select / vector_offset: each row of axis 0 its own index)
        if sub.shape[:1] != outer.shape[:1] or first.base != Affine() or first.coeffs[0] != 1:
            raise NKIIndexError(
                f"the gathered axis 0 of a view of {_label(outer.tensor)} (vector_select / "
                "vector_offset: one run-time index per row) cannot be sliced or selected; "
                "slice the index tile instead",
                code="err_invalid_view",
                loc=user_loc(),
            )
    lost: dict[int, int] = {}
    for a, n in enumerate(outer.shape):
        se = sub.index[a]
        if n != 1 or (se.base.is_const and se.base.const == 0 and not any(se.coeffs)):
            continue
        if identity:
            lost[a] = 1
            continue
        values = _trace_bounds(se)
        if values == (0, 0):  # e.g. the iterator of a one-trip loop: always 0, so it vanishes
            continue
        raise NKIIndexError(
            f"out-of-bound access for tensor {_label(outer.tensor)}: index {se} on a view axis "
            f"of size 1 (view shape {outer.shape}, axis {a}) must be 0{_values(se, values)}",
            code="err_tensor_access_out_of_bound",
            loc=user_loc(),
        )
    out = []
    for d, e in enumerate(outer.index):
        base = e.base
        coeffs = [0] * len(sub.shape)
        for a, c in enumerate(e.coeffs):
            if not c:
                continue
            se = sub.index[a]
            base = base + se.base.scale(c)
            for j, sc in enumerate(se.coeffs):
                coeffs[j] += c * sc
        if d in lost:
            se = sub.index[d]
            base = base + se.base
            coeffs = [x + y for x, y in zip(coeffs, se.coeffs)]
        out.append(IndexExpr(base, tuple(coeffs), sub.shape))
    indirect = outer.indirect + _map_indirect(outer, sub, out)
    return Access(outer.tensor, sub.shape, tuple(out), indirect)


def _trace_bounds(e: IndexExpr) -> tuple[int, int] | None:
    """Inclusive (min, max) of ``e`` over its tile axes and the trace-time ranges of the loops
    it uses; None when a program id or a device loop makes it known only at run time."""
    st = state.current()
    base = None if st is None else st.static_bounds(e.base)
    if base is None:
        return None
    lo, hi = base
    for c, n in zip(e.coeffs, e.shape):
        lo += min(0, c * (n - 1))
        hi += max(0, c * (n - 1))
    return lo, hi


def _values(e: IndexExpr, values: tuple[int, int] | None) -> str:
    """What the index ranges over, in the kernel's own names: ``; l60 (the loop iterator
    i_d_head_tile) takes values 0..1``."""
    syms = e.base.symbols()
    if not syms:
        return ""
    names = ", ".join(
        f"{s} (the loop iterator {s.name})" if getattr(s, "name", "") else str(s) for s in syms
    )
    if values is None:
        return f"; {names}: known only at run time"
    return f"; over {names} it takes values {values[0]}..{values[1]}"


def _map_indirect(
    outer: Access, sub: Access, composed: list[IndexExpr]
) -> tuple[tuple[int, Access], ...]:
    """Move a sub-access's indirect (tile-valued) indices from view axes to tensor dims. Only
    the partition / first dimension of a tensor can be indexed by a tile."""
    out = []
    for a, ind in sub.indirect:
        dims = [d for d, e in enumerate(outer.index) if e.coeffs[a] != 0]
        d = dims[0] if len(dims) == 1 else (a if len(outer.index) == len(outer.shape) else -1)
        if d > 0 and prod(ind.shape) == 1:  # a dynamic scalar offset may index any dim
            out.append((d, ind))
            continue
        if d > 0 and not any(any(e.coeffs) for e in composed[:d]):
            # ``kv[0, idx_tile[i_p, 0], i_f]``: the leading dims are fixed, so the tile indexes
            # the first dimension of the sub-tensor ``kv[0]``
            out.append((d, ind))
            continue
        if d != 0:
            raise NKIIndexError(
                f"indirect (tile-valued) indices are only supported on the partition / first "
                f"dimension of tensor {_label(outer.tensor)}, not on dimension {d}",
                code="err_indirect_indices_free_dim",
                loc=user_loc(),
            )
        out.append((d, ind))
    return tuple(out)
