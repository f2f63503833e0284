"""Layout changes and queries of current-API views (nki 0.5+): ``t.rearrange`` (einops-style
split / reorder / merge), ``t.view(dtype)`` (bit reinterpretation on chip), the NeuronCore-v4
tensor indirection ``t.indirect(index)`` and the queries ``is_contiguous / get_pattern /
is_indirect``. Each builds on the affine views of ``views`` (reshape, permute, ``.ap``) or on
the tracer's run-time index machinery (indirection)."""

from __future__ import annotations

from typing import Any

from .. import dtypes
from ..ir import Access, IndexExpr
from .handles import NkiTensor, TileOps, View
from .state import state
from .subscripts import compose, parse_subscript, prod
from .views import (
    _alias,
    _err,
    _on_chip,
    _parts,
    _rebuild,
    _reshape_any,
    _view,
    ap,
    offset,
    permute,
    strides,
)


def view_dtype(self: TileOps, dtype: Any) -> View:
    """``t.view(dtype)``: the same bytes read as ``dtype`` (a bit reinterpretation, no
    conversion). The last dim is scaled by the itemsize ratio and must be contiguous (stride
    1); the view's start must fall on a whole element of ``dtype``. Not after a dynamic
    select or offset."""
    t, acc = _parts(self)
    dt = dtypes.name_of(dtype)
    old, new = dtypes.itemsize(t.decl.dtype), dtypes.itemsize(dt)
    if acc.indirect:
        raise _err(f"view({dt}): {t.label} is indexed dynamically here; reinterpret first")
    if _on_chip(t) and t.decl.par_dim:
        return _view_dtype_blocked(t, acc, dt, old, new)
    st, shape = list(strides(self)), list(acc.shape)
    if shape[-1] > 1 and st[-1] != 1:
        raise _err(
            f"view({dt}): the last dim of view {shape} of {t.label} must be contiguous "
            f"(stride 1), got stride {st[-1]}"
        )
    start = offset(self)
    scaled = [s * old for s in st[:-1]] + [shape[-1] * old, start * old]
    if any(v % new for v in scaled):
        raise _err(
            f"view({dt}): view {shape} of {t.label} ({t.decl.dtype}) does not split into whole "
            f"{dt} elements ({new} bytes): its last dim, strides or start are not multiples"
        )
    pat = [[s * old // new, n] for s, n in zip(st[:-1], shape[:-1])]
    pat.append([1, shape[-1] * old // new])
    if _on_chip(t) and len(shape) == 1:
        raise _err(f"view({dt}): an on-chip view needs its partition dim")
    return ap(self, pat, offset=start * old // new, dtype=dt)


def _view_dtype_blocked(t: NkiTensor, acc: Access, dt: str, old: int, new: int) -> View:
    """``view(dtype)`` of a tile with block dims before its partition dim (``(B, par_dim(P),
    F)``): each block's row lies in the partition's free bytes, so the view keeps the tile's
    dims and only its last one is rescaled; the viewed elements must run along it."""
    d = t.decl
    shape, last = list(acc.shape), len(acc.index) - 1
    if (d.shape[-1] * old) % new:
        raise _err(
            f"view({dt}): the last dim of {t.label} {d.dtype}{list(d.shape)} ({d.shape[-1] * old}"
            f" bytes) does not split into whole {dt} elements ({new} bytes)"
        )
    index = []
    for k, e in enumerate(acc.index):
        coeffs = list(e.coeffs)
        if shape[-1] == 1:  # (a one-element last axis runs along the tensor's last dim)
            coeffs[-1] = 1 if k == last else 0
        if k < last:
            if coeffs[-1]:
                raise _err(f"view({dt}): the last dim of view {shape} of {t.label} must run "
                           "along the tile's last dim")  # fmt: skip
            index.append((e.base, coeffs))
            continue
        if coeffs[-1] != 1 or not e.base.is_const:
            raise _err(f"view({dt}): the last dim of view {shape} of {t.label} must be "
                       "contiguous (stride 1) and start at a constant")  # fmt: skip
        scaled = [e.base.const * old, *(c * old for c in coeffs[:-1])]
        if any(v % new for v in scaled):
            raise _err(f"view({dt}): view {shape} of {t.label} does not start on whole {dt} "
                       f"elements ({new} bytes)")  # fmt: skip
        base = type(e.base).constant(scaled[0] // new)
        index.append((base, [v // new for v in scaled[1:]] + [1]))
    shape[-1] = shape[-1] * old // new
    if shape[-1] < 1:
        raise _err(f"view({dt}): view {list(acc.shape)} of {t.label} is narrower than one {dt}")
    decl = _alias(t, d.shape[:-1] + (d.shape[-1] * old // new,), dt, "v", par_dim=d.par_dim)
    idx = tuple(IndexExpr(b, tuple(c), tuple(shape)) for b, c in index)
    return View(NkiTensor(decl, t.scope), Access(decl.name, tuple(shape), idx))


def rearrange(self: TileOps, src_pattern: Any, dst_pattern: Any, fixed_sizes: Any = None) -> View:
    """``t.rearrange(src_pattern, dst_pattern, fixed_sizes=None)``: einops-style split,
    reorder and merge of the view's axes in one step, e.g. ``t.rearrange(('b', ('h', 'w')),
    ('b', 'w', 'h'), {'h': 4})``. ``src_pattern`` names each axis (a tuple of names splits it;
    one size per split may be inferred, the others come from ``fixed_sizes``);
    ``dst_pattern`` lists every name once (a tuple merges, which needs the merged axes to be
    contiguous). On chip the first axis stays first."""
    src, dst = tuple(src_pattern), tuple(dst_pattern)
    sizes = dict(fixed_sizes or {})
    if len(src) != len(self.shape):
        raise _err(f"rearrange: pattern {src} names {len(src)} axes, view {list(self.shape)} has "
                   f"{len(self.shape)}")  # fmt: skip
    flat: list[str] = []
    split_shape: list[int] = []
    for axis, (part, n) in enumerate(zip(src, self.shape)):
        names = list(part) if isinstance(part, (tuple, list)) else [part]
        known = [sizes.get(nm) for nm in names]
        free = [i for i, k in enumerate(known) if k is None]
        prod_known = prod(tuple(k for k in known if k is not None))
        if len(free) > 1 or (len(free) == 1 and (prod_known == 0 or n % prod_known)):
            raise _err(f"rearrange: cannot infer the sizes of {names} (axis {axis}, size {n}); "
                       "give all but one in fixed_sizes")  # fmt: skip
        if free:
            known[free[0]] = n // prod_known
        if prod(tuple(known)) != n:  # type: ignore[arg-type]
            raise _err(f"rearrange: sizes {dict(zip(names, known))} do not make axis {axis} "
                       f"of size {n}")  # fmt: skip
        for nm, k in zip(names, known):
            if nm in flat:
                raise _err(f"rearrange: name {nm!r} appears twice in {src}")
            flat.append(nm)
            split_shape.append(int(k))  # type: ignore[arg-type]
            sizes[nm] = int(k)  # type: ignore[assignment]
    order = [nm for part in dst for nm in (part if isinstance(part, (tuple, list)) else [part])]
    if sorted(order) != sorted(flat):
        raise _err(f"rearrange: {dst} must use each name of {src} exactly once")
    t, _ = _parts(self)
    v = self if tuple(split_shape) == tuple(self.shape) else _reshape_any(self, tuple(split_shape))
    if v is None:
        raise _err(f"rearrange: cannot split view {list(self.shape)} into {split_shape}")
    perm = tuple(flat.index(nm) for nm in order)
    if perm != tuple(range(len(perm))):
        v = permute(v, perm)
    merged = tuple(
        prod(tuple(sizes[nm] for nm in part)) if isinstance(part, (tuple, list)) else sizes[part]
        for part in dst
    )
    if merged != tuple(v.shape):
        got = _reshape_any(v, merged)
        if got is None:
            raise _err(f"rearrange: the axes merged by {dst} are not contiguous in memory")
        v = got
    return v


def is_contiguous(self: TileOps) -> bool:
    """Whether the view covers its storage row-major without gaps (on chip: over the free
    dims of each partition; size-1 axes are ignored)."""
    t, acc = _parts(self)
    if acc.indirect:
        return False
    st, shape = strides(self), self.shape
    lead = 1 if _on_chip(t) else 0
    want = 1
    for s, n in reversed(list(zip(st[lead:], shape[lead:]))):
        if n == 1:
            continue
        if s != want:
            return False
        want *= n
    return True


def get_pattern(self: TileOps) -> list[list[int]]:
    """The view's access pattern ``[[stride, count], ...]`` (one pair per axis, in order)."""
    return [[s, n] for s, n in zip(strides(self), self.shape)]


def is_indirect(self: TileOps) -> bool:
    """Whether the view is addressed at run time (dynamic select, vector_select, ``.ap`` with
    a dynamic offset, ``.indirect``)."""
    return bool(self.access_().indirect)


INDIRECT_GROUP = 16  # partitions per snake group (Vector/Scalar/GpSimd; the Tensor engine: 32)


def indirect(self: TileOps, index: Any, num_elem: int | None = None) -> View:
    """``t.indirect(index, num_elem=None)`` (NeuronCore-v4): a ``(P, num_elem)`` view whose
    element ``(p, i)`` is ``t[p, index[i % G, i // G]]`` (free-dim offsets read at run time
    from the SBUF int tile ``index``; G = 16 for the Vector/Scalar/GpSimd engines, 32 for the
    Tensor engine). ``t`` is an on-chip ``(P, F)`` view with a stride-1 free axis. nki-sim
    simulates ``num_elem <= 16``, where both group sizes give offset i = ``index[i, 0]``."""
    t, acc = _parts(self)
    st = state("tensor.indirect")
    if st.target.gen < 4:
        raise _err(f"indirect: tensor indirection needs NeuronCore-v4 (trn3); target is "
                   f"{st.target.name}", "err_unsupported_instruction_for_target")  # fmt: skip
    if not _on_chip(t) or len(self.shape) != 2:
        raise _err(f"indirect: needs a 2-D on-chip view, got {t.buffer} view {list(self.shape)}")
    if acc.indirect:
        raise _err(f"indirect: view of {t.label} is already indirect; it cannot be re-indirected")
    if not isinstance(index, TileOps) or index.tensor_().buffer != "sbuf" or len(index.shape) != 2:
        raise _err(f"indirect: index must be a 2-D SBUF int tile, got {index!r}")
    if not dtypes.is_int(index.dtype):
        raise _err(f"indirect: index must hold integers, got {index.dtype}")
    n = prod(tuple(index.shape)) if num_elem is None else num_elem
    if not isinstance(n, int) or not 1 <= n <= prod(tuple(index.shape)):
        raise _err(f"indirect: num_elem must be in [1, {prod(tuple(index.shape))}], got {n!r}")
    if n > INDIRECT_GROUP:
        raise _err(
            f"indirect: num_elem={n} > {INDIRECT_GROUP}: offset i is index[i % G, i // G] with a "
            "group size G that depends on the consuming engine; nki-sim simulates up to "
            f"{INDIRECT_GROUP} offsets (one column of index)",
            "err_unsupported_operand",
        )
    if index.shape[0] < n:
        raise _err(f"indirect: index {list(index.shape)} has fewer than {n} partitions")
    free = [d for d, e in enumerate(acc.index) if e.coeffs[1]]
    if self.shape[1] > 1 and (len(free) != 1 or acc.index[free[0]].coeffs[1] != 1):
        raise _err(f"indirect: the free axis of view {acc} must walk one dim with stride 1")
    dim = free[0] if free else len(acc.index) - 1
    shape = (self.shape[0], n)
    coeffs = [(e.coeffs[0], 0) for e in acc.index]
    out = _rebuild(acc, shape, coeffs)
    # the index column as a (1, n) tile: index[i, 0] for view axis i
    iacc = index.access_()
    icol = compose(iacc, parse_subscript((slice(0, n), slice(0, 1)), iacc.shape, "index"))
    row = Access(icol.tensor, (1, n), tuple(
        IndexExpr(e.base, (0, e.coeffs[0]), (1, n)) for e in icol.index
    ))  # fmt: skip
    return _view(t, Access(out.tensor, shape, out.index, ((dim, row),)))


METHODS = {
    "rearrange": rearrange,
    "is_contiguous": is_contiguous,
    "get_pattern": get_pattern,
    "is_indirect": is_indirect,
    "indirect": indirect,
}


def install() -> None:
    """Attach these methods to the tensor handle classes (after ``views.install``); ``.view``
    keeps the whole-HBM-tensor form (an alias tensor, returnable as an output)."""
    for name, fn in METHODS.items():
        setattr(TileOps, name, fn)
    hbm_view = NkiTensor.view

    def view(self: TileOps, dtype: Any) -> Any:
        if isinstance(self, NkiTensor) and not _on_chip(self):
            return hbm_view(self, dtype)
        return view_dtype(self, dtype)

    view.__doc__ = view_dtype.__doc__
    for cls in (NkiTensor, View):  # (``reinterpret_cast``: the current API's other name for it)
        cls.view = view  # type: ignore[method-assign,attr-defined]
        cls.reinterpret_cast = view  # type: ignore[attr-defined]
