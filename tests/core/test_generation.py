"""How a kernel's API generation is decided: its first generation-specific construct, or
``nki.jit(api=...)``; ``neuronxcc.nki`` kernels are always classic."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from frontends import compat
from nki.errors import NKIError


def add_one(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def spmd_classic(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.load(a[i * 4 : (i + 1) * 4, :])
    nl.store(out[i * 4 : (i + 1) * 4, :], nisa.tensor_scalar(t, nl.add, 1.0))
    return out


def test_first_destination_first_call_makes_kernel_current_and_bracket_an_lnc():
    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    k = nki.jit(add_one)
    np.testing.assert_array_equal(k(a), a + 1)
    assert k.generation(k.last_ir) == "current"
    np.testing.assert_array_equal(k[1](a), a + 1)
    assert str(k.last_ir.grid) == "(nc(1))"


def test_classic_kernel_bracket_stays_an_spmd_grid():
    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    k = nki.jit(spmd_classic)
    np.testing.assert_array_equal(k[2](a), a + 1)
    assert k.generation(k.last_ir) == "classic"
    assert str(k.last_ir.grid) == "(2)"


def test_unknown_api_value_is_rejected():
    with pytest.raises(NKIError, match="unknown nki.jit api"):
        nki.jit(add_one, api="newest")


def test_neuronxcc_alias_kernels_are_classic():
    compat.install()
    try:
        import neuronxcc.nki as cnki

        k = cnki.jit(add_one)
        with pytest.raises(NKIError) as ei:
            k(np.ones((8, 4), np.float32))
        assert ei.value.code == "err_mixed_api_generations"
        assert "nki.jit(api='classic')" in str(ei.value)
    finally:
        compat.uninstall()


def test_every_instruction_with_both_forms_takes_the_destination_first_form():
    import nki.isa_spec as spec

    both = [n for n in spec.names(spec.CURRENT) if spec.get(n).classic is not None]
    missing = [n for n in both if "Current API (destination first)" not in getattr(nisa, n).__doc__]
    assert not missing, missing
    assert len(both) >= 30
