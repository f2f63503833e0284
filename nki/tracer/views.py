"""Tensor views of the current NKI API (nki 0.3-0.7): ``t.slice / select / permute / broadcast /
expand_dim / squeeze_dim / reshape / ap`` and the ``strides / offset / size`` queries.

A view is an ``Access`` into the viewed tensor: one affine expression per tensor dimension over
the view's axes. Permuting, striding or broadcasting a view only changes the coefficients, so
views are ordinary operands and destinations of every call. ``.ap`` addresses the base
allocation through an alias of its storage (flat on HBM, ``(partitions, free elements)`` on
chip). Dynamic offsets use the tracer's indirect (run-time index) machinery."""

from __future__ import annotations

import operator
from typing import Any

from .. import dtypes
from ..errors import NKIIndexError, NKIShapeError, arguments_checked, user_loc
from ..ir import HBM_BUFFERS, Access, Affine, IndexExpr, TensorDecl
from ..symbolic import Scalar
from .emission import column_major_rows, scaled_offset
from .handles import NkiTensor, TileOps, View
from .state import generation, note_generation, request_per_core, state
from .subscripts import compose, parse_subscript, prod
from .tensors import reshape_tile

MAX_VIEW_DIMS = 5


def _err(msg: str, code: str = "err_invalid_view") -> NKIIndexError:
    return NKIIndexError(msg, code=code, loc=user_loc())


def _parts(x: TileOps) -> tuple[NkiTensor, Access]:
    return x.tensor_(), x.access_()


def _on_chip(t: NkiTensor) -> bool:
    return t.decl.buffer not in HBM_BUFFERS


def _dim(x: TileOps, dim: Any, api: str, extra: int = 0) -> int:
    n = len(x.shape) + extra
    if not isinstance(dim, int) or isinstance(dim, bool) or not -n <= dim < n:
        raise _err(f"{api}: dim {dim!r} is not a dimension of a {n - extra}-D view {x.shape}")
    return dim % n


def _not_partition(t: NkiTensor, dim: int, api: str) -> None:
    if dim == 0 and _on_chip(t):
        raise _err(
            f"{api}: dim 0 of on-chip tensor {t.label} ({t.buffer}) is the partition "
            "dimension and cannot be changed by this view"
        )


def _rebuild(acc: Access, shape: tuple[int, ...], coeffs: list[tuple[int, ...]]) -> Access:
    """The access with new view axes: ``coeffs[d]`` are tensor dim d's coefficients."""
    if len(shape) > MAX_VIEW_DIMS:
        raise _err(f"views have at most {MAX_VIEW_DIMS} dimensions, got shape {list(shape)}")
    idx = tuple(
        IndexExpr(e.base, tuple(c if shape[j] > 1 else 0 for j, c in enumerate(cs)), shape)
        for e, cs in zip(acc.index, coeffs)
    )
    return Access(acc.tensor, shape, idx, acc.indirect)


def _view(t: NkiTensor, acc: Access) -> View:
    return View(t, acc)


# --- queries -------------------------------------------------------------------------------


def _tensor_strides(t: NkiTensor) -> list[int]:
    out, s = [], 1
    for n in reversed(t.decl.shape):
        out.append(s)
        s *= n
    return out[::-1]


def strides(self: TileOps) -> tuple[int, ...]:
    """Element strides of each view axis in the viewed tensor's storage (0 on broadcast axes)."""
    t, acc = _parts(self)
    st = _tensor_strides(t)
    return tuple(
        sum(st[d] * e.coeffs[j] for d, e in enumerate(acc.index)) for j in range(len(acc.shape))
    )


def offset(self: TileOps) -> int:
    """Element offset of the view's first element in the viewed tensor's storage."""
    t, acc = _parts(self)
    total = 0
    for s, e in zip(_tensor_strides(t), acc.index):
        if not e.base.is_const:
            raise _err(f"the offset of view {acc} depends on a loop index or program id")
        total += s * e.base.const
    return total


def size(self: TileOps) -> int:
    """Number of elements of the view."""
    return prod(tuple(self.shape))


# --- view methods --------------------------------------------------------------------------


def slice_(self: TileOps, dim: int, start: int, end: int, step: int = 1) -> View:
    """``t.slice(dim, start, end, step=1)``: elements ``start, start+step, ... < end`` of
    ``dim``. Requires ``0 <= start < end <= shape[dim]`` and ``step >= 1``."""
    t, acc = _parts(self)
    d = _dim(self, dim, "slice")
    n = self.shape[d]
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step))
    if not ok or not (0 <= start < end <= n) or step < 1:
        raise _err(
            f"slice(dim={d}, start={start}, end={end}, step={step}) on view {list(self.shape)}"
            f" of {t.label}: needs 0 <= start < end <= {n} and step >= 1",
            "err_tensor_access_out_of_bound",
        )
    key = tuple(slice(start, end, step) if j == d else slice(None) for j in range(self.ndim))
    return _view(t, compose(acc, parse_subscript(key, acc.shape, t.what)))


def select(self: TileOps, dim: int, index: Any) -> View:
    """``t.select(dim, index)``: fix ``dim`` at ``index`` and remove it. An int is a static
    index (``0 <= index < shape[dim]``); a one-element SBUF int tile is read at run time
    (bounds checked then) and may not select the partition dimension on chip."""
    t, acc = _parts(self)
    d = _dim(self, dim, "select")
    n = self.shape[d]
    if isinstance(index, TileOps):
        _not_partition(t, d, "select with a dynamic index")
        if prod(tuple(index.shape)) != 1 or _on_chip(index.tensor_()) is False:
            raise _err(
                f"select: a dynamic index must be a one-element SBUF tile, got "
                f"{index.tensor_().buffer} tile {list(index.shape)}"
            )
        dims = [k for k, e in enumerate(acc.index) if e.coeffs[d]]
        if n == 1 and len(acc.index) == len(acc.shape):
            dims = [d]
        if len(dims) != 1 or acc.index[dims[0]].coeffs[d] not in (0, 1):
            raise _err(
                f"select: a dynamic index needs view axis {d} to walk one tensor dimension "
                f"with stride 1 (view {acc} of {t.label})"
            )
        if acc.indirect:  # (the documentation's "only one dynamic select per tensor")
            raise _err(f"select: {t.label} is already indexed dynamically (one dynamic select)")
        keep = [j for j in range(len(acc.shape)) if j != d]
        shape = tuple(acc.shape[j] for j in keep)
        coeffs = [tuple(e.coeffs[j] for j in keep) for e in acc.index]
        out = _rebuild(acc, shape, coeffs)
        ind = Access(out.tensor, out.shape, out.index, acc.indirect + ((dims[0], index.access_()),))
        return _view(t, ind)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
        raise _err(
            f"select(dim={d}, index={index!r}) on view {list(self.shape)} of {t.label}: "
            f"the index must be an int in [0, {n})",
            "err_tensor_access_out_of_bound",
        )
    if d == 0 and _on_chip(t):
        raise _err(
            f"select(dim=0) on on-chip tensor {t.label} would remove the partition dimension; "
            f"use slice(0, {index}, {index + 1})"
        )
    key = tuple(index if j == d else slice(None) for j in range(self.ndim))
    return View(t, acc)[key]  # the indexing rules: on chip the result stays >= 2-D


def vector_select(self: TileOps, dim: int, vector_offset: Any) -> View:
    """``t.vector_select(0, vector_offset)``: HBM only, dim 0; ``vector_offset`` an SBUF
    ``(P, 1)`` int tile. The view's dim 0 becomes P and partition p reads row
    ``vector_offset[p]`` (bounds checked when the access runs)."""
    offsets = vector_offset
    t, acc = _parts(self)
    if dim != 0 or _on_chip(t):
        raise _err(f"vector_select: only dim 0 of an HBM tensor, got dim {dim} of {t.buffer} "
                   f"tensor {t.label}")  # fmt: skip
    if (
        not isinstance(offsets, TileOps)
        or offsets.tensor_().buffer != "sbuf"
        or (len(offsets.shape) != 2 or offsets.shape[1] != 1)
    ):
        raise _err(f"vector_select: offsets must be an SBUF (P, 1) int tile, got {offsets!r}")
    dims = [k for k, e in enumerate(acc.index) if e.coeffs[0]]
    if acc.shape[0] > 1 and (dims != [0] or acc.index[0].coeffs[0] != 1):
        raise _err(f"vector_select: view axis 0 must walk dim 0 of {t.label} with stride 1")
    if any(k == 0 for k, _ in acc.indirect):
        raise _err(f"vector_select: dim 0 of {t.label} is already indexed dynamically")
    shape = (offsets.shape[0],) + acc.shape[1:]
    coeffs = [(0,) + e.coeffs[1:] for e in acc.index]
    out = _rebuild(acc, shape, coeffs)
    return _view(t, Access(out.tensor, shape, out.index, ((0, offsets.access_()),)))


def permute(self: TileOps, dims: Any) -> View:
    """``t.permute(dims)``: view axis k is axis ``dims[k]`` of ``t``; on chip ``dims[0] == 0``
    (the partition dimension stays first)."""
    t, acc = _parts(self)
    dims = tuple(dims)
    if sorted(dims) != list(range(self.ndim)):
        raise _err(f"permute{dims}: not a permutation of the {self.ndim} dims of {self.shape}")
    if _on_chip(t) and dims[0] != 0:
        raise _err(
            f"permute{dims}: on-chip tensor {t.label} must keep the partition dimension first "
            "(dims[0] == 0)"
        )
    shape = tuple(acc.shape[k] for k in dims)
    coeffs = [tuple(e.coeffs[k] for k in dims) for e in acc.index]
    return _view(t, _rebuild(acc, shape, coeffs))


def broadcast(self: TileOps, dim: int, size: int) -> View:
    """``t.broadcast(dim, size)``: repeat a size-1 ``dim`` ``size`` times (stride 0); not the
    partition dimension on chip."""
    t, acc = _parts(self)
    d = _dim(self, dim, "broadcast")
    if self.shape[d] != 1:
        raise _err(f"broadcast(dim={d}, size={size}): dim {d} of {list(self.shape)} is not 1")
    _not_partition(t, d, "broadcast")
    if not isinstance(size, int) or size < 1:
        raise _err(f"broadcast: size must be a positive int, got {size!r}")
    shape = acc.shape[:d] + (size,) + acc.shape[d + 1 :]
    return _view(t, _rebuild(acc, shape, [e.coeffs for e in acc.index]))


def expand_dim(self: TileOps, dim: int) -> View:
    """``t.expand_dim(dim)``: insert a size-1 axis before axis ``dim``; not dim 0 on chip."""
    t, acc = _parts(self)
    d = _dim(self, dim, "expand_dim", extra=1)
    _not_partition(t, d, "expand_dim")
    shape = acc.shape[:d] + (1,) + acc.shape[d:]
    coeffs = [e.coeffs[:d] + (0,) + e.coeffs[d:] for e in acc.index]
    return _view(t, _rebuild(acc, shape, coeffs))


def squeeze_dim(self: TileOps, dim: int) -> View:
    """``t.squeeze_dim(dim)``: remove a size-1 axis; not dim 0 on chip."""
    t, acc = _parts(self)
    d = _dim(self, dim, "squeeze_dim")
    if self.shape[d] != 1:
        raise _err(f"squeeze_dim({d}): dim {d} of {list(self.shape)} has size {self.shape[d]}")
    _not_partition(t, d, "squeeze_dim")
    shape = acc.shape[:d] + acc.shape[d + 1 :]
    coeffs = [e.coeffs[:d] + e.coeffs[d + 1 :] for e in acc.index]
    return _view(t, _rebuild(acc, shape, coeffs))


def view_reshape(x: TileOps, shape: tuple[int, ...]) -> View | None:
    """The view of ``x`` with another shape over the same elements (row-major), or None when
    its layout cannot be described by one affine expression per tensor dim (then the caller
    copies). Each axis' step is a vector over the tensor dims: merging axes a, a+1 needs
    ``step[a] == size[a+1] * step[a+1]``; splitting scales the step."""
    t, acc = _parts(x)
    old = [(n, tuple(e.coeffs[j] for e in acc.index)) for j, n in enumerate(acc.shape)]
    old = [(n, v) for n, v in old if n != 1]
    want = [n for n in shape]
    steps: list[tuple[int, ...]] = []
    zero = tuple(0 for _ in acc.index)
    i = 0
    for n in want:
        if n == 1:
            steps.append(zero)
            continue
        # gather old axes (merging) until their product reaches a multiple of n
        if i >= len(old):
            return None
        size, step = old[i]
        if size % n == 0:  # split: n outer part of this axis
            inner = size // n
            steps.append(tuple(c * inner for c in step))
            old[i] = (inner, step)
            if inner == 1:
                i += 1
            continue
        if n % size:
            return None
        got, vec = size, step
        i += 1
        while got < n:
            if i >= len(old):
                return None
            s2, v2 = old[i]
            if vec != tuple(c * s2 for c in v2) or (n % (got * s2) and (got * s2) % n):
                return None
            if got * s2 > n:
                return None
            got, vec = got * s2, v2
            i += 1
        steps.append(vec)
    if i != len(old):
        return None
    coeffs = [tuple(s[d] for s in steps) for d in range(len(acc.index))]
    return _view(t, _rebuild(acc, tuple(shape), coeffs))


def _flat(x: TileOps) -> View | None:
    """The same view over a flattened alias of its storage (``(P, free)`` on chip, ``(N,)`` on
    HBM), so axes walking different tensor dims become steps along one dim."""
    t, acc = _parts(x)
    if acc.indirect:
        return None
    dims = t.decl.shape
    lead = 1 if _on_chip(t) else 0
    st = _tensor_strides(t)
    if lead:
        st = [0] + _strides_of(dims[1:])
    flat_base, flat_coeffs = Affine(), [0] * len(acc.shape)
    for d in range(lead, len(dims)):
        e = acc.index[d]
        flat_base = flat_base + e.base.scale(st[d])
        flat_coeffs = [c + st[d] * k for c, k in zip(flat_coeffs, e.coeffs)]
    shape = (dims[0], prod(dims[1:])) if lead else (prod(dims),)
    decl = _alias(t, shape, t.decl.dtype, "f")
    idx = (acc.index[0],) if lead else ()
    idx += (IndexExpr(flat_base, tuple(flat_coeffs), acc.shape),)
    return View(NkiTensor(decl, t.scope), Access(decl.name, acc.shape, idx))


def _strides_of(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


def _reshape_any(x: TileOps, shape: tuple[int, ...]) -> View | None:
    got = view_reshape(x, shape)
    if got is None:
        flat = _flat(x)
        got = None if flat is None else view_reshape(flat, shape)
    return got


def reshape_view(self: TileOps, shape: Any) -> Any:
    """``t.reshape(shape)``: the same elements (row-major) in another shape, as a view of the
    same memory. The number of elements must match; on chip the partition size stays."""
    t, acc = _parts(self)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if prod(shape) != prod(acc.shape) or (_on_chip(t) and (not shape or shape[0] != acc.shape[0])):
        raise NKIShapeError(
            f"cannot reshape view {list(acc.shape)} of {t.label} to {list(shape)}: the number "
            "of elements must match and on chip the partition dimension must stay",
            code="err_reshape_size_mismatch",
            loc=user_loc(),
        )
    got = _reshape_any(self, shape)
    if got is not None:
        return got
    return reshape_tile(self, shape) if _on_chip(t) else NkiTensor.reshape(t, shape)


def reshape_dim(self: TileOps, dim: int, shape: Any) -> View:
    """``t.reshape_dim(dim, shape)``: split axis ``dim`` into ``shape`` (one entry may be -1);
    not dim 0 on chip. The split must keep the view affine."""
    t, acc = _parts(self)
    d = _dim(self, dim, "reshape_dim")
    _not_partition(t, d, "reshape_dim")
    parts = [int(v) for v in shape]
    n = self.shape[d]
    if parts.count(-1) == 1:
        known = prod(tuple(v for v in parts if v != -1))
        parts[parts.index(-1)] = n // known if known and n % known == 0 else 0
    if prod(tuple(parts)) != n or any(v < 1 for v in parts):
        raise _err(f"reshape_dim({d}, {tuple(shape)}): cannot split axis {d} of size {n}")
    got = _reshape_any(self, tuple(self.shape[:d]) + tuple(parts) + tuple(self.shape[d + 1 :]))
    if got is None:
        raise _err(f"reshape_dim({d}, {tuple(shape)}) of view {acc}: not an affine view")
    return got


def flatten_dims(self: TileOps, start_dim: int, end_dim: int) -> View:
    """``t.flatten_dims(start_dim, end_dim)``: merge axes ``start_dim..end_dim`` (inclusive)
    into one; they must be contiguous in the viewed memory; not dim 0 on chip."""
    start, end = start_dim, end_dim
    t, acc = _parts(self)
    a, b = _dim(self, start, "flatten_dims"), _dim(self, end, "flatten_dims")
    if a > b:
        raise _err(f"flatten_dims({start}, {end}): start must not be after end")
    _not_partition(t, a, "flatten_dims")
    shape = (
        tuple(self.shape[:a]) + (prod(tuple(self.shape[a : b + 1])),) + tuple(self.shape[b + 1 :])
    )
    got = _reshape_any(self, shape)
    if got is None:
        raise _err(
            f"flatten_dims({start}, {end}) of view {list(self.shape)} with strides "
            f"{strides(self)}: the axes are not contiguous in memory"
        )
    return got


# --- raw access patterns -------------------------------------------------------------------


def _alias(
    t: NkiTensor, shape: tuple[int, ...], dtype: str, tag: str, par_dim: int = 0
) -> TensorDecl:
    st = state("tensor.ap")
    root = t.decl.alias_of or t.decl.name
    decl = TensorDecl(st.fresh(f"{root}_{tag}"), shape, dtype, t.decl.buffer, "alias", par_dim,
                      user_loc(), root)  # fmt: skip
    st.declare(decl)
    return decl


def ap(
    self: TileOps,
    pattern: Any,
    offset: int = 0,
    scalar_offset: Any = None,
    vector_offset: Any = None,
    indirect_dim: int = 0,
    dtype: Any = None,
) -> View:
    """``t.ap(pattern, offset=0, ...)``: a raw access pattern over the **base allocation** of
    ``t`` (the calling view's shape and strides are ignored). ``pattern`` is ``[[stride, count],
    ...]`` in elements, outermost first; element ``(i0, ...)`` is storage[``offset + sum
    i_k * stride_k``]. On SBUF/PSUM the first pair is the partition: its stride must equal
    the allocation's free-element count. ``scalar_offset`` (a one-element SBUF int tile) moves
    the start by ``value * prod(base.shape[indirect_dim + 1:])`` at run time (``indirect_dim``
    a dimension of the base; on chip a later one than 0 moves along the partition row, the
    pattern running on from there);
    ``vector_offset`` (an SBUF ``(P, 1)`` int tile, ``indirect_dim=0``) makes partition p read
    row ``vector_offset[p]``; a ``(128, n)`` one gives its indices column after column.
    Out-of-range elements are reported when the access runs."""
    t = self.tensor_()
    base = t.decl
    if isinstance(offset, Scalar) and not offset.aff.is_const:
        # an offset from loop iterators: the current API's iterators are integers (its loop is
        # unrolled here); the classic API has no .ap, so an undecided kernel is current-API
        if generation() is None:
            note_generation("current", "t.ap(offset=...) computed from a loop iterator")
        offset = operator.index(offset)
    for v in (offset, scalar_offset, vector_offset):
        aff = getattr(v, "aff", None)  # nl.program_id: a plain int on each core of the launch
        if aff is not None:
            request_per_core("nl.program_id in an access pattern", aff.symbols())
    seq = isinstance(pattern, (list, tuple))
    pat = [tuple(p) if isinstance(p, (list, tuple)) else (p,) for p in pattern] if seq else []
    ints = [isinstance(v, int) and not isinstance(v, bool) for p in pat for v in p]
    if not pat or len(pat) > MAX_VIEW_DIMS or any(len(p) != 2 for p in pat) or not all(ints):
        raise _err(f"ap: pattern must be 1 to {MAX_VIEW_DIMS} [stride, count] int pairs, got "
                   f"{pattern!r}")  # fmt: skip
    if any(c < 1 for _, c in pat) or not isinstance(offset, int) or offset < 0:
        raise _err(f"ap: counts must be >= 1 and offset >= 0, got {pattern!r}, offset={offset}")
    if scalar_offset is not None and vector_offset is not None:
        raise _err("ap: scalar_offset and vector_offset are mutually exclusive")
    if vector_offset is not None and indirect_dim != 0:
        raise _err(f"ap: a vector_offset indexes dimension 0 only (indirect_dim=0), got "
                   f"indirect_dim={indirect_dim!r}")  # fmt: skip
    dt = base.dtype if dtype is None else dtypes.name_of(dtype)
    ratio_num, ratio_den = dtypes.itemsize(base.dtype), dtypes.itemsize(dt)
    shape = tuple(c for _, c in pat)
    on_chip = _on_chip(t)
    dims = base.shape
    if not (isinstance(indirect_dim, int) and not isinstance(indirect_dim, bool)) or not (
        0 <= indirect_dim < len(dims) or (scalar_offset is None and vector_offset is None)
    ):
        raise _err(f"ap: indirect_dim must be a dimension of {t.label} {list(dims)}, got "
                   f"{indirect_dim!r}")  # fmt: skip
    # the elements a scalar offset of 1 moves the start by: on HBM a row of the (rows, elements
    # per row) view; on chip a whole partition row for indirect_dim=0, a step along it otherwise
    unit = prod(dims[indirect_dim + 1 :]) * ratio_num // ratio_den
    if on_chip:
        parts, free = dims[0], prod(dims[1:]) * ratio_num
        if free % ratio_den:
            raise _err(f"ap: dtype {dt} does not divide the {free}-byte partition row")
        free //= ratio_den
        if pat[0][0] != free and pat[0][1] > 1:
            raise _err(
                f"ap: on {base.buffer} the first pair is the partition; its stride must be the "
                f"free-element count {free} of {t.label} {list(dims)}, got {pat[0][0]}"
            )
    else:
        total = prod(dims) * ratio_num
        if total % ratio_den:
            raise _err(f"ap: dtype {dt} does not divide the storage of {t.label}")
        total //= ratio_den
        if unit < 1 or total % unit:  # (a step of indirect_dim is no whole number of dt elements)
            if scalar_offset is not None or vector_offset is not None:
                raise _err(
                    f"ap: a step of dimension {indirect_dim} of {t.label} {list(dims)} is not a "
                    f"whole number of {dt} elements, so a dynamic offset cannot count in them"
                )
            unit = total  # (no offset to scale: the storage as one row)
        parts, free = total // unit, unit
    if isinstance(scalar_offset, int) and not isinstance(scalar_offset, bool):
        # a register value known while tracing (nki.collectives.rank_id()): a static offset
        offset += scalar_offset * unit
        scalar_offset = None
        if offset < 0:
            raise _err(f"ap: the scalar offset puts the access before the start, at {offset}")
    dynamic, scale = (scalar_offset if scalar_offset is not None else vector_offset), 1
    if on_chip:
        # (partitions, free elements): the partition pair walks dim 0, the rest the row
        p0, f0 = divmod(offset, free)
        c0 = [1 if j == 0 else 0 for j in range(len(pat))]
        c1 = [0] + [s for s, _ in pat[1:]]
        if dynamic is not None and vector_offset is not None:
            raise _err("ap: vector_offset indexes HBM rows; the tensor is on chip")
        dyn_dim, alias, coefs, bases = 0, (parts, free), [c0, c1], [p0, f0]
        if scalar_offset is not None and indirect_dim != 0:
            # the offset moves along the row in steps of ``unit`` elements: the row is viewed
            # as (free // unit, unit) and the register indexes the first of the two; a pattern
            # crossing the steps reads the row itself, from the register's value times ``unit``
            dyn_dim, in_row, scale = 1, _in_row(pat, c1, f0, free, unit), unit
            if in_row is not None:
                alias, coefs, bases = (parts, free // unit, unit), *in_row
                coefs, bases, scale = [c0, *coefs], [p0, *bases], 1
    else:
        # (rows, elements per row): pattern steps that are whole rows walk dim 0
        p0, f0 = divmod(offset, free)
        c0, c1 = [], []
        for s, _ in pat:
            r, e = divmod(s, free)
            c0.append(r if e == 0 else 0)
            c1.append(0 if e == 0 else s)
        if vector_offset is not None:  # partition p reads row vector_offset[p]
            c0[0], c1[0] = 0, 0
        bases = [p0, f0]
        dyn_dim = 0
        span = f0 + sum(c * (n - 1) for c, (_, n) in zip(c1, pat))
        if span >= free or any(c < 0 for c in c1):
            # the pattern crosses rows non-uniformly: address the flat storage instead
            if dynamic is not None:
                raise _err(
                    f"ap: a dynamic offset needs a pattern whose steps stay inside one "
                    f"row of {free} elements or move whole rows, got {pattern!r}"
                )
            parts, free = 1, parts * free
            c0, c1, bases = [0] * len(pat), [s for s, _ in pat], [0, offset]
        alias, coefs = (parts, free), [c0, c1]
    decl = _alias(t, alias, dt, "ap")
    idx = tuple(
        IndexExpr(Affine.constant(b), tuple(c if n > 1 else 0 for c, n in zip(cs, shape)), shape)
        for b, cs in zip(bases, coefs)
    )
    acc = Access(decl.name, shape, idx)
    view = View(NkiTensor(decl, t.scope), acc)
    if dynamic is not None:
        if not isinstance(dynamic, TileOps) or dynamic.tensor_().buffer != "sbuf":
            raise _err(f"ap: a dynamic offset must be an SBUF int tile, got {dynamic!r}")
        want = (1,) if scalar_offset is not None else (shape[0],)
        if prod(tuple(dynamic.shape)) != want[0] and scalar_offset is not None:
            raise _err(f"ap: scalar_offset must be a one-element tile, got {dynamic.shape}")
        if vector_offset is not None and tuple(dynamic.shape) != (shape[0], 1):
            dynamic = column_major_rows(dynamic, shape[0])
        if scale > 1:
            dynamic = scaled_offset(dynamic, scale)
        view = View(view.base, Access(acc.tensor, shape, idx, ((dyn_dim, dynamic.access_()),)))
    return view


def _in_row(
    pat: list, c1: list, f0: int, free: int, unit: int
) -> tuple[list[list[int]], list[int]] | None:
    """The row part of an on-chip pattern whose scalar offset moves along the partition row in
    steps of ``unit`` elements, over the row viewed as (free // unit, unit): the two row axes'
    coefficients (``c1``: the pattern's steps along the row) and bases (``f0``: the start in
    the row); None when a step neither moves whole units nor stays inside one."""
    if unit < 1 or free % unit:
        raise _err(f"ap: a scalar offset in steps of {unit} elements does not divide the "
                   f"{free}-element partition row")  # fmt: skip
    blk = [s // unit if s % unit == 0 else 0 for s in c1]
    inner = [0 if s % unit == 0 else s for s in c1]
    b_blk, b_in = divmod(f0, unit)
    span = b_in + sum(c * (n - 1) for c, (_, n) in zip(inner, pat))
    if span >= unit or any(c < 0 for c in inner):
        return None
    return [blk, inner], [b_blk, b_in]


METHODS = {
    "slice": slice_,
    "select": select,
    "vector_select": vector_select,
    "permute": permute,
    "broadcast": broadcast,
    "expand_dim": expand_dim,
    "squeeze_dim": squeeze_dim,
    "reshape_dim": reshape_dim,
    "flatten_dims": flatten_dims,
    "ap": ap,
}
PROPERTIES = {"strides": strides, "offset": offset, "size": size}


def install() -> None:
    """Attach the view methods and queries to the tensor handle classes."""
    for name, fn in METHODS.items():
        setattr(TileOps, name, arguments_checked(f".{name}")(fn))
    for name, fn in PROPERTIES.items():
        setattr(TileOps, name, property(fn))
    View.reshape = reshape_view  # type: ignore[method-assign]
