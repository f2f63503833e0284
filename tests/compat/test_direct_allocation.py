"""nki.compiler direct allocation (classic): buffers computed like automatic ones, argument
validation, and placement checks (banks and SBUF bytes by position, not summed)."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

import nki
import nki.compiler as ncc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

RNG = np.random.default_rng(5)


@ncc.enable_stack_allocator
@ncc.skip_middle_end_transformations
@nki.jit
def staged_scale(x):
    # explicitly allocated buffers: a modulo-allocated SBUF block tensor and a PSUM tile
    n = x.shape[0] // 128
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray(
        (n, nl.par_dim(128), x.shape[1]),
        dtype=x.dtype,
        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)),
    )
    acc = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=1))
    auto = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=ncc.sbuf.auto_alloc())
    for i in nl.affine_range(n):
        buf[i] = nl.load(x[i * 128 : (i + 1) * 128, :])
        acc[...] = nl.multiply(buf[i], 3.0)
        auto[...] = nl.copy(acc)
        nl.store(out[i * 128 : (i + 1) * 128, :], auto)
    return out


def test_direct_allocation_buffers_compute_like_automatic_ones():
    x = RNG.random((384, 32), dtype=np.float32)
    np.testing.assert_allclose(staged_scale(x), 3 * x, rtol=1e-6)


def test_direct_allocation_arguments_are_validated():
    with pytest.raises(NKIError, match="num_free_tiles"):
        ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(0,))
    with pytest.raises(NKIError, match="callable"):
        ncc.sbuf.alloc(42)


def bank_out_of_range(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    banks = ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(2,))
    ps = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=banks)  # ERR
    ps[0] = nisa.nc_matmul(nl.load(a), nl.load(b))
    nl.store(out, nl.copy(ps[0]))
    return out


def sbuf_past_the_end(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    place = ncc.sbuf.mod_alloc(base_addr=212_000)
    t = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=place)  # ERR
    t[...] = nl.load(a)
    nl.store(out, t)
    return out


def _bank(bank_map, idx, pdim_size, fdim_size):
    # a placement function as AWS's allocated kernels write it: bound with functools.partial,
    # called with idx / pdim_size / fdim_size by name
    return (bank_map[idx], 0, 0)


def shared_banks(a, b):
    # PSUM fully booked by explicit placements that overlap on purpose (8 banks each for two
    # block tensors, plus two tensors on chosen banks): the kernel manages the reuse
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    blocks = ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 4))
    qk = nl.ndarray((2, 4, nl.par_dim(128), 512), dtype=nl.float32, buffer=blocks)
    tp = nl.ndarray((2, 4, nl.par_dim(128), 512), dtype=nl.float32, buffer=blocks)
    chosen = ncc.psum.alloc(functools.partial(_bank, bank_map={(0,): 1, (1,): 5}))
    res = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=chosen)
    for i in nl.affine_range(2):
        qk[i, 0] = nisa.nc_matmul(at, bt)
        tp[i, 1] = nisa.nc_matmul(at, bt)
        res[i] = nl.add(qk[i, 0], tp[i, 1])
        nl.store(out[i], nl.copy(res[i]))
    return out


def test_direct_allocations_are_checked_by_placement_not_summed():
    a, b = RNG.random((128, 128), dtype=np.float32), RNG.random((128, 512), dtype=np.float32)
    want = 2 * (a.T @ b)
    np.testing.assert_allclose(nki.jit(shared_banks)(a, b), np.stack([want, want]), rtol=1e-5)
    for fn, args, code, words in (
        (bank_out_of_range, (a, b), "err_psum_capacity_exceeded", ["banks [7, 8]", "0..7"]),
        (sbuf_past_the_end, (b,), "err_sbuf_capacity_exceeded", ["[212000, 214048)", "212984"]),
    ):
        with pytest.raises(NKIError) as ei:
            nki.jit(fn, platform_target="trn2")(*args)
        e = ei.value
        assert e.code == code and all(w in str(e) for w in words), str(e)
        lines, start = inspect.getsourcelines(fn)
        assert e.loc.line == start + next(i for i, t in enumerate(lines) if "# ERR" in t)
