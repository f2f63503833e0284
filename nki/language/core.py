"""nki.language core: SPMD queries, loops, index helpers, tensor creation, load / store / copy,
device_print and the tile-size constants."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import NKIError, NKIMemoryError, NKIShapeError, NKITypeError, user_loc
from ..ir import HBM_BUFFERS, Affine, PidSym
from ..symbolic import DynSlice, Scalar, _static_int
from ..symbolic import arange as _arange
from ..symbolic import mgrid as _mgrid
from ..targets import env_target
from ..tracer import (
    NkiTensor,
    TileOps,
    check_broadcast_into,
    check_partitions,
    check_start_partition,
    const_operand,
    current,
    emit,
    generation,
    loop,
    new_tensor,
    note_generation,
    operand,
    require_buffer,
    result_tile,
    state,
    to_mask,
    trailing_units,
)
from ..tracer.api_checks import broken

# ---- buffers -------------------------------------------------------------------------------------


class Buffer:
    """A memory: ``nl.sbuf``, ``nl.psum``, ``nl.hbm`` (= private_hbm), ``nl.private_hbm``,
    ``nl.shared_hbm``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __eq__(self, other: object) -> bool:  # (nl.hbm is private_hbm: equal both ways)
        return _buffer_name(other) == _buffer_name(self.name) if other is not None else False

    def __hash__(self) -> int:
        return hash(_buffer_name(self.name))


sbuf = Buffer("sbuf")
psum = Buffer("psum")
hbm = Buffer("hbm")
private_hbm = Buffer("private_hbm")
shared_hbm = Buffer("shared_hbm")


def _buffer_name(b: object) -> str:
    if b is None:
        return "sbuf"
    if isinstance(b, Buffer):
        name = b.name
    elif isinstance(b, str):
        name = b
    else:
        raise NKITypeError(
            f"buffer must be nl.sbuf, nl.psum or an HBM buffer, got {b!r}",
            code="err_unsupported_memory",
            loc=user_loc(),
        )
    if name == "hbm":
        name = "private_hbm"
    if name not in ("sbuf", "psum", "private_hbm", "shared_hbm"):
        raise NKITypeError(f"unknown buffer {b!r}", code="err_unsupported_memory", loc=user_loc())
    return name


class par_dim(int):
    """Marks the partition dimension in a shape: ``nl.ndarray((4, nl.par_dim(128), 512))``;
    dimensions before it are block dimensions (a list of tiles)."""

    def __new__(cls, n: int) -> par_dim:
        return super().__new__(cls, n)

    def __repr__(self) -> str:
        return f"nl.par_dim({int(self)})"


# ---- SPMD ----------------------------------------------------------------------------------------


class nc:  # noqa: N801 - classic name
    """``nl.nc(k)``: a launch-grid factor placed on ``k`` physical NeuronCores.
    ``nl.nc(2) * 2`` is ``nl.spmd_dim(nl.nc(2), 2)`` and ``2 * nl.nc(2)`` is
    ``nl.spmd_dim(2, nl.nc(2))``."""

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise NKIError(
                f"nl.nc needs a positive integer number of cores, got {k!r}",
                code="err_invalid_grid",
                loc=user_loc(),
            )
        self.k = k

    def __mul__(self, other: object) -> spmd_dim:
        return spmd_dim(self, other)

    def __rmul__(self, other: object) -> spmd_dim:
        return spmd_dim(other, self)

    def __repr__(self) -> str:
        return f"nl.nc({self.k})"


class spmd_dim:  # noqa: N801 - classic name
    """One launch-grid dimension made of factors (outer first), e.g.
    ``nl.spmd_dim(nl.nc(2), 4)``: 8 instances, instances 0-3 on core 0 and 4-7 on core 1."""

    def __init__(self, *factors: object) -> None:
        flat: list[tuple[int, bool]] = []
        for f in factors:
            if isinstance(f, spmd_dim):
                flat.extend(f.factors)
            elif isinstance(f, nc):
                flat.append((f.k, True))
            elif isinstance(f, int) and not isinstance(f, bool) and f >= 1:
                flat.append((f, False))
            else:
                raise NKIError(
                    f"nl.spmd_dim factors must be positive ints or nl.nc(k), got {f!r}",
                    code="err_invalid_grid",
                    loc=user_loc(),
                )
        if not flat:
            raise NKIError(
                "nl.spmd_dim needs at least one factor", code="err_invalid_grid", loc=user_loc()
            )
        self.factors = tuple(flat)

    def __mul__(self, other: object) -> spmd_dim:
        return spmd_dim(self, other)

    def __rmul__(self, other: object) -> spmd_dim:
        return spmd_dim(other, self)

    def __repr__(self) -> str:
        return (
            "nl.spmd_dim("
            + ", ".join(f"nl.nc({k})" if c else str(k) for k, c in self.factors)
            + ")"
        )


def program_id(axis: int = 0) -> Scalar | int:
    """The index of this SPMD instance along grid ``axis`` (a compile-time int, default 0, within
    the launch grid): symbolic while tracing (classic kernels), a plain int in a current-API
    launch on two cores (traced once per core)."""
    st = state("nl.program_id")
    axis = _axis(axis, "nl.program_id")
    nd = len(st.grid_shape)
    if axis < 0 or axis >= max(nd, 1):  # no grid: one instance, axis 0 only
        grid = f"a launch grid of {nd} dimension(s) {st.grid_shape}" if nd else "no launch grid"
        raise NKIError(
            f"nl.program_id({axis}) is out of range: the kernel was launched with {grid} "
            f"(axis {axis} exists only when kernel[...] launches it over at least {axis + 1} "
            "grid dimensions)",
            code="err_invalid_program_axis",
            loc=user_loc(),
        )
    if st.core is not None and axis == 0:
        return st.core  # a per-core trace of an LNC=2 launch
    if not nd or st.grid_shape[axis] == 1:
        return 0  # a single instance along this axis (LNC=1): a plain int, branches are legal
    return Scalar(Affine.of(PidSym(axis)))


def _axis(a: object, api: str) -> int:
    """A grid axis argument: a compile-time int (not a bool, float, NaN or array)."""
    if isinstance(a, bool) or isinstance(a, (float, np.floating)):
        raise NKITypeError(
            f"the axis of {api} must be a compile-time integer, got {a!r}",
            code="err_invalid_program_axis",
            loc=user_loc(),
        )
    return _static_int(a, f"the axis of {api}")


def num_programs(axes: int | tuple[int, ...] | None = None) -> int:
    """Number of instances along ``axes``: one compile-time int axis or a tuple / list of
    distinct ones, within the launch grid (None: all axes; one instance without a grid)."""
    st = state("nl.num_programs")
    shape = st.grid_shape
    if axes is None:
        ax = tuple(range(len(shape)))
    elif isinstance(axes, (tuple, list)):
        ax = tuple(_axis(a, "nl.num_programs") for a in axes)
    else:
        ax = (_axis(axes, "nl.num_programs"),)
    if len(set(ax)) != len(ax):
        raise NKIError(
            f"nl.num_programs names an axis twice: axes={axes!r}",
            code="err_invalid_program_axis",
            loc=user_loc(),
        )
    n = 1
    for a in ax:
        if not 0 <= a < max(len(shape), 1):
            raise NKIError(
                f"nl.num_programs axis {a} is out of range for grid {shape}",
                code="err_invalid_program_axis",
                loc=user_loc(),
            )
        n *= shape[a] if shape else 1
    return n


def program_ndim() -> int:
    """Number of launch-grid dimensions (0 without a grid)."""
    return len(state("nl.program_ndim").grid_shape)


# ---- loops and indices ---------------------------------------------------------------------------


def _range_args(start: Any, stop: Any, step: Any, api: str) -> tuple[int, int, int]:
    if stop is None:
        start, stop = 0, start
    s0 = _static_int(start, f"{api} start")
    s1 = _static_int(stop, f"{api} stop")
    st = _static_int(step, f"{api} step")
    if st == 0:
        raise NKIError(f"{api} step must not be 0", code="err_invalid_argument", loc=user_loc())
    return s0, s1, st


def affine_range(start: Any, stop: Any = None, step: Any = 1, **_kw: Any) -> Iterable[Any]:
    """A parallel loop: iterations must not depend on each other (only associative
    accumulation such as ``psum += nl.matmul(...)`` may cross iterations; two iterations
    writing the same HBM element is an error). Traced once with a symbolic iterator. In a
    current-API kernel the iterator is an int as far as the kernel can tell (``range``): the
    loop is unrolled where Python needs it (an ``if`` that varies, ``min``, ``int``, a list
    index), and an on-chip value carried from one iteration to the next runs in order."""
    s0, s1, st = _range_args(start, stop, step, "nl.affine_range")
    return loop("affine", range(s0, s1, st))


def sequential_range(start: Any, stop: Any = None, step: Any = 1, **_kw: Any) -> Iterable[Any]:
    """A loop whose iterations may depend on each other; runs in order. Traced once (current
    API: unrolled where Python needs the iterator's int, see ``affine_range``)."""
    s0, s1, st = _range_args(start, stop, step, "nl.sequential_range")
    return loop("sequential", range(s0, s1, st))


def static_range(start: Any, stop: Any = None, step: Any = 1) -> range:
    """A loop unrolled at trace time: the body is traced once per iteration."""
    s0, s1, st = _range_args(start, stop, step, "nl.static_range")
    return range(s0, s1, st)


def arange(start: int, stop: int | None = None, step: int = 1):
    """An affine index along one tile axis (reshape with ``[:, None]`` / ``[None, :]``): int
    bounds, a step other than 0 (``err_invalid_argument``) and a non-empty range."""
    return _arange(start, stop, step)


mgrid = _mgrid


def ds(start: Any, size: int) -> DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start+size``; ``start`` may be symbolic, ``size``
    is an int, and the slice stays in bounds (``err_tensor_access_out_of_bound``)."""
    return DynSlice(start, size)


# ---- tensor creation -----------------------------------------------------------------------------


def _shape(shape: Any) -> tuple[tuple[int, ...], int]:
    if hasattr(shape, "__index__"):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise NKITypeError(
            f"a tensor shape must be a tuple of integers, got {shape!r}",
            code="err_invalid_shape",
            loc=user_loc(),
        )
    dims, par = [], 0
    for i, s in enumerate(shape):
        if isinstance(s, par_dim):
            note_generation("classic", "nl.par_dim (classic API only)")
            par = i
        dims.append(_static_int(s, "tensor dimension"))
    return tuple(dims), par


def ndarray(
    shape: Any,
    dtype: Any,
    buffer: Any = None,
    name: str = "",
    address: Any = None,
    **_kw: Any,
) -> NkiTensor:
    """Allocate a tensor (uninitialised). On-chip tensors (``nl.sbuf`` default, ``nl.psum``)
    have the partition dimension first (<= 128) unless marked with ``nl.par_dim``; outputs
    are ``nl.shared_hbm`` tensors created at kernel top level. ``address=(partition_offset,
    byte_offset)`` (current API) places an on-chip tensor: its partitions must fit, a PSUM
    tensor must start on a 2 KiB bank boundary, and two live placed tensors may not overlap."""
    st = state("nl.ndarray")
    dims, par = _shape(shape)
    buf = _buffer_name(buffer)
    if isinstance(buffer, str):
        shown = "hbm" if buffer == "hbm" else buf
        broken("buffer.object", f"got buffer={buffer!r}; write buffer=nl.{shown}")
    dt = dtypes.name_of(dtype)
    if buf == "shared_hbm" and st.loops:
        raise NKIError(
            "shared_hbm tensors (kernel outputs) must be created at kernel top level, not "
            "inside a loop",
            code="err_shared_hbm_must_in_kernel_level",
            loc=user_loc(),
        )
    kind = "output" if buf == "shared_hbm" else "local"
    placement = None
    if getattr(buffer, "allocation", None) is not None and buf in ("sbuf", "psum"):
        placement = buffer.placement(dims, par, dt)  # an nki.compiler AllocatedBuffer
    addr = None
    if address is not None:
        addr, placement = _address_placement(address, dims, par, dt, buf, st.target.pmax)
    return new_tensor(
        dims,
        dt,
        buf,
        name=name or None,
        par_dim=par,
        kind=kind,
        api="nl.ndarray",
        placement=placement,
        address=addr,
    )


PSUM_BANK_BYTES = 2048


def _address_placement(
    address: Any, dims: tuple[int, ...], par: int, dt: str, buf: str, pmax: int
) -> tuple[tuple[int, int], tuple[int, ...]]:
    """``address=(partition_offset, byte_offset)``: the placement (SBUF byte range per
    partition, or PSUM banks) of an on-chip tensor, checked against the partitions."""
    ok = (
        isinstance(address, (tuple, list))
        and len(address) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in address)
    )
    if not ok or buf not in ("sbuf", "psum"):
        raise NKIError(
            f"address= must be (partition_offset, byte_offset) non-negative ints on an SBUF or "
            f"PSUM tensor, got {address!r} for a {buf} tensor",
            code="err_invalid_allocation",
            loc=user_loc(),
        )
    p0, b0 = int(address[0]), int(address[1])
    if p0 + dims[par] > pmax:
        raise NKIError(
            f"address=({p0}, {b0}): partitions [{p0}, {p0 + dims[par]}) of the {dims[par]}-"
            f"partition tensor exceed the {pmax} partitions",
            code="err_num_partition_exceed_arch_limit",
            loc=user_loc(),
        )
    nbytes = dtypes.itemsize(dt)
    for n in dims[par + 1 :]:
        nbytes *= n
    for n in dims[:par]:
        nbytes *= n
    if buf == "psum":
        if b0 % PSUM_BANK_BYTES:
            raise NKIError(
                f"address=({p0}, {b0}): a PSUM tensor must start on a {PSUM_BANK_BYTES}-byte "
                "bank boundary",
                code="err_invalid_allocation",
                loc=user_loc(),
            )
        first = b0 // PSUM_BANK_BYTES
        return (p0, b0), tuple(range(first, first + max(1, -(-nbytes // PSUM_BANK_BYTES))))
    return (p0, b0), (b0, b0 + nbytes)


def no_initial_values_in_hbm(buffer: Any) -> None:
    """A tensor created with values (``nl.full`` and its kin, ``nl.rand``) must be on chip."""
    if _buffer_name(buffer) in HBM_BUFFERS:
        raise NKIMemoryError(
            "HBM tensors cannot be created with an initial value; create an SBUF tile and "
            "nl.store it",
            code="err_hbm_tensor_with_init_value_not_supported",
            loc=user_loc(),
        )


def full(
    shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "", **_kw: Any
) -> NkiTensor:
    """An on-chip tensor (``nl.ndarray``'s shape rules) filled with the number ``fill_value``; HBM
    tensors cannot have initial values (``err_hbm_tensor_with_init_value_not_supported``)."""
    no_initial_values_in_hbm(buffer)
    if isinstance(fill_value, (str, bytes)) or fill_value is None:
        raise NKITypeError(
            f"nl.full fill_value must be a number, got {fill_value!r}",
            code="err_unsupported_dtype",
            loc=user_loc(),
        )
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    emit("memset", "memset", t.access_(), (const_operand(fill_value),), api="nl.full")
    return t


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kw: Any) -> NkiTensor:
    """An on-chip tensor of zeros (``nl.full(shape, 0, dtype)``: not in HBM)."""
    return full(shape, 0, dtype, buffer=buffer, name=name, **kw)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kw: Any) -> NkiTensor:
    """An on-chip tensor of ones (``nl.full(shape, 1, dtype)``: not in HBM)."""
    return full(shape, 1, dtype, buffer=buffer, name=name, **kw)


def _like(a: Any) -> tuple[tuple[int, ...], str, str]:
    if isinstance(a, TileOps):
        t = a.tensor_()
        return tuple(a.shape), str(a.dtype), t.buffer
    raise NKITypeError(
        f"expected a tensor, got {type(a).__name__}",
        code="err_unsupported_operand",
        loc=user_loc(),
    )


def empty_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "") -> NkiTensor:
    """An uninitialised tensor with tensor ``a``'s shape (and dtype unless given)."""
    shape, dt, buf = _like(a)
    return ndarray(shape, dtype or dt, buffer=buffer if buffer is not None else buf, name=name)


def zeros_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "") -> NkiTensor:
    """Zeros with ``a``'s shape (and dtype unless given), on chip (SBUF unless ``buffer`` says)."""
    shape, dt, _ = _like(a)
    return zeros(shape, dtype or dt, buffer=buffer, name=name)


def ones_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "") -> NkiTensor:
    """Ones with ``a``'s shape (and dtype unless given), on chip (SBUF unless ``buffer`` says)."""
    shape, dt, _ = _like(a)
    return ones(shape, dtype or dt, buffer=buffer, name=name)


# ---- data movement -------------------------------------------------------------------------------


def load(src: Any, *, mask: Any = None, dtype: Any = None, **_kw: Any) -> NkiTensor:
    """Copy a tile from an HBM tensor into a new SBUF tile (at least 2-D, partition dim <= 128, in
    bounds; masked-out elements are not read). ``dtype`` casts on the way."""
    acc, t = operand(src, "nl.load", "src")
    require_buffer(t, HBM_BUFFERS, "load", "src")
    if len(acc.shape) < 2:
        raise NKIShapeError(
            f"insufficient rank: nl.load of a {len(acc.shape)}-D access {list(acc.shape)} of "
            f"{t.label}; on-chip tiles need a partition and a free dimension (index the "
            "tensor with 2-D index expressions, e.g. a[i_p, i_f])",
            code="err_insufficient_rank",
            loc=user_loc(),
        )
    check_partitions(acc.shape, "load", "src")
    out = result_tile(
        acc.shape, dtypes.name_of(dtype) if dtype is not None else t.decl.dtype, "sbuf", "nl.load"
    )
    emit(
        "dma",
        "load",
        out.access_(),
        (acc,),
        mask=to_mask(mask, acc.shape, "nl.load"),
        api="nl.load",
    )
    return out


def store(dst: Any, value: Any, *, mask: Any = None, **_kw: Any) -> None:
    """Copy an SBUF (or PSUM) tile into HBM. The value broadcasts into ``dst``; masked-out
    destination elements are left untouched. A Python number as ``value`` fills ``dst`` (a
    tile of it is made in SBUF first, so ``dst`` needs at most 128 partitions)."""
    dacc, dt = operand(dst, "nl.store", "dst")
    require_buffer(dt, HBM_BUFFERS, "store", "dst")
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        check_partitions(dacc.shape, "store", "dst")
        value = full(dacc.shape, value, dt.decl.dtype, buffer=sbuf)
    vacc, vt = operand(value, "nl.store", "value")
    if vt.decl.buffer == "psum":
        if generation() == "current":
            raise NKIMemoryError(
                f"nl.store of the PSUM tile {vt.label}: in the current API DMA cannot read "
                "PSUM; copy it to SBUF first (nisa.tensor_copy or nl.copy)",
                code="err_unsupported_memory",
                loc=user_loc(),
            )
        # only the classic API's DMA reads PSUM: storing one makes the kernel classic
        note_generation("classic", "nl.store of a PSUM tile (classic API only)")
    require_buffer(vt, ("sbuf", "psum"), "store", "value")
    check_partitions(vacc.shape, "store", "value")
    vacc = trailing_units(vacc, dacc.shape)
    check_broadcast_into(vacc.shape, dacc.shape, "store")
    emit("dma", "store", dacc, (vacc,), mask=to_mask(mask, dacc.shape, "nl.store"), api="nl.store")


def copy(src: Any, *, dtype: Any = None, mask: Any = None, **_kw: Any) -> NkiTensor:
    """A copy of an SBUF or PSUM tile into a new SBUF tile (cast to ``dtype`` if given)."""
    acc, t = operand(src, "nl.copy", "src")
    check_start_partition(acc, t, "nl.copy", "src")
    require_buffer(t, ("sbuf", "psum"), "copy", "src")
    check_partitions(acc.shape, "copy", "src")
    out = result_tile(
        acc.shape, dtypes.name_of(dtype) if dtype is not None else t.decl.dtype, "sbuf", "nl.copy"
    )
    emit(
        "copy",
        "copy",
        out.access_(),
        (acc,),
        mask=to_mask(mask, acc.shape, "nl.copy"),
        api="nl.copy",
    )
    return out


def device_print(prefix: str, x: Any, **_kw: Any) -> None:
    """Print a tile's values when the simulator executes this point (per instance)."""
    if isinstance(x, TileOps):
        acc, _t = operand(x, "nl.device_print", "x")
        emit(
            "print", "print", None, (acc,), attrs=(("prefix", str(prefix)),), api="nl.device_print"
        )
    else:
        emit(
            "print",
            "print",
            None,
            (const_operand(x),),
            attrs=(("prefix", str(prefix)),),
            api="nl.device_print",
        )


# ---- tile-size constants -------------------------------------------------------------------------


class tile_size:  # noqa: N801 - classic name
    """Hardware tile limits (``nl.tile_size.pmax`` ...). ``total_available_sbuf_size`` is the
    usable SBUF bytes per partition of the target being traced (outside a trace: the
    environment's target, else the default trn3)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1

    class _PerTarget:
        """A limit read from the target being traced (outside a trace: ``env_target()``)."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def __get__(self, obj: object, owner: type) -> int:
            st = current()
            target = st.target if st is not None else env_target()
            return int(self.fn(target))

    total_available_sbuf_size = _PerTarget(lambda t: t.sbuf_usable_per_partition)
    # current API: usable bytes per partition, the same in fp32 elements, all partitions
    sbuf_fmax_bytes = _PerTarget(lambda t: t.sbuf_usable_per_partition)
    sbuf_fmax = _PerTarget(lambda t: t.sbuf_usable_per_partition // 4)
    sbuf_size_bytes = _PerTarget(lambda t: t.sbuf_bytes_per_partition * t.pmax)
