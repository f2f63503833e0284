"""Issue 14's planted bugs in current-API kernels: each is reported as a located NKIError with
its code, naming the kernel's own line (marked ``# BUG``) and the values involved."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

P = 128


def _line(fn, mark: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if mark in ln)


def _raises(kernel, args, code: str, match: str, **launch) -> NKIError:
    if launch.get("full"):
        kernel = kernel.configure(checks="full")
    run = kernel[launch["lnc"]] if "lnc" in launch else kernel
    with pytest.raises(NKIError, match=match) as e:
        nki.simulate(run)(*args)
    err = e.value
    assert err.code == code, err
    fn = kernel.fn
    assert err.loc is not None and err.loc.file == inspect.getsourcefile(fn)
    if launch.get("full"):  # poison propagates: reported where it escapes, naming its origin
        assert err.loc.line == _line(fn, "# ESCAPES"), str(err)
        assert f"{err.loc.file}:{_line(fn, '# BUG')}" in str(err)
    else:
        assert err.loc.line == _line(fn, "# BUG"), str(err)
    return err


X = np.ones((256, 64), np.float32)


@nki.jit(api="classic")  # kernel[2]: an SPMD grid of two instances
def race_between_cores(x):
    # both instances write rows 0:128 of the output (the second should take 128:256)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:P, :])
    nisa.dma_copy(dst=out[0:P, :], src=t)  # BUG
    return out


def test_race_between_the_two_cores():
    err = _raises(race_between_cores, (X,), "err_spmd_write_race", "race", lnc=2)
    assert "out" in str(err)


@nki.jit
def uninitialised_read(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:32], src=x[0:P, 0:32])  # the other half is never written
    r = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=t, op0=nl.multiply, operand0=2.0)  # BUG
    nisa.dma_copy(dst=out, src=r)  # ESCAPES
    return out


def test_uninitialised_read_under_full_checks():
    err = _raises(uninitialised_read, (X,), "err_uninitialized_read", "uninitiali", full=True)
    assert "'r' element (0, 32)" in str(err)


@nki.jit
def out_of_bounds_view(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.slice(0, 200, 328))  # BUG
    nisa.dma_copy(dst=out, src=t)
    return out


def test_out_of_bounds_view():
    err = _raises(out_of_bounds_view, (X,), "err_tensor_access_out_of_bound", "328")
    assert "256" in str(err)


@nki.jit
def psum_over_capacity(x):
    out = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x[0:P, 0:P])
    m = nl.ndarray((P, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=m, value=1.0)
    accs = []
    for _ in range(9):  # nine live 2 KiB accumulators: PSUM has eight banks
        acc = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.psum)  # BUG
        nisa.nc_matmul(acc, a, m)
        accs.append(acc)
    r = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=r, value=0.0)
    for acc in accs:
        nisa.tensor_tensor(dst=r, data1=r, data2=acc, op=nl.add)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_psum_over_capacity():
    x = np.ones((P, P), np.float32)
    _raises(psum_over_capacity, (x,), "err_psum_capacity_exceeded", "PSUM")


@nki.jit
def sbuf_over_capacity(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    big = nl.ndarray((P, 60000), dtype=nl.float32, buffer=nl.sbuf)  # BUG
    nisa.memset(dst=big, value=0.0)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=big[:, 0:64])
    nisa.dma_copy(dst=out, src=t)
    return out


def test_sbuf_over_capacity():
    # 60000 fp32 per partition: over trn2's 212984 usable bytes (trn3 has 245752)
    _raises(sbuf_over_capacity.configure(target="trn2"), (X,), "err_sbuf_capacity_exceeded", "SBUF")


@nki.jit
def overlapping_addresses(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf, address=(0, 0))
    b = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf, address=(0, 128))  # BUG
    nisa.dma_copy(dst=a, src=x[0:P, :])
    nisa.tensor_scalar(dst=b, data=a, op0=nl.add, operand0=1.0)
    nisa.tensor_tensor(dst=b, data1=a, data2=b, op=nl.add)
    nisa.dma_copy(dst=out, src=b)
    return out


def test_overlapping_address_placements():
    err = _raises(overlapping_addresses, (X,), "err_address_overlap", "overlaps")
    assert "[128, 256)" in str(err)


@nki.jit
def misspelled_keyword(x):
    out = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:P, :])
    r = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=r, op=nl.exp, data=t, bais=0.5)  # BUG
    nisa.dma_copy(dst=out, src=r)
    return out


def test_misspelled_keyword_names_the_closest_valid_one():
    err = _raises(misspelled_keyword, (X,), "err_unexpected_keyword_argument", "'bais'")
    assert "bias" in str(err)


def test_the_unplanted_kernels_run():
    # the same kernels without their bug run clean (the checks are not firing on everything)
    @nki.jit
    def fixed(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        lo = nl.program_id(0) * P
        t = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[lo : lo + P, :])
        r = nl.ndarray((P, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=r, op=nl.exp, data=t, bias=0.5)
        nisa.dma_copy(dst=out[lo : lo + P, :], src=r)
        return out

    x = np.random.default_rng(3).standard_normal((256, 64)).astype(np.float32)
    got = nki.simulate(fixed.configure(checks="full")[2])(x)
    np.testing.assert_allclose(got, np.exp(x + 0.5), rtol=1e-6)
