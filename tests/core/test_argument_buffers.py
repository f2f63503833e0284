"""The buffer a kernel's array arguments report, as NKI 0.7 wraps them: private HBM (``nl.hbm``)
in a current-API launch of one instance, shared HBM under LNC=2 and in classic kernels. The
kernels still read and write them as before (values checked against NumPy)."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

X = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)


def _doubled(x, seen):
    seen.append(x.buffer)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    seen.append(out.buffer)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_one_instance_current_launch_sees_its_arguments_in_private_hbm():
    seen = []
    np.testing.assert_array_equal(nki.jit(_doubled)(X, seen), X * 2)
    arg, out = seen
    assert arg == nl.hbm and arg == nl.private_hbm and nl.hbm == arg and arg != nl.shared_hbm
    assert nl.is_hbm(arg) and out == nl.shared_hbm


def test_lnc2_arguments_are_shared():
    seen = []
    np.testing.assert_array_equal(nki.jit(_doubled)[2](X, seen), X * 2)
    assert seen and all(b == nl.shared_hbm for b in seen)


def _classic_doubled(x, seen):
    i_p, i_f = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]  # (nl.mgrid: a classic kernel)
    seen.append(x.buffer)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[i_p, i_f], nl.multiply(nl.load(x[i_p, i_f]), 2.0))
    return out


def _loaded_doubled(x, seen):
    seen.append(x.buffer)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), 2.0))
    return out


def test_classic_kernels_see_shared_hbm_arguments():
    for kernel in (nki.jit(_classic_doubled), nki.jit(_loaded_doubled, api="classic")):
        seen = []
        np.testing.assert_array_equal(kernel(X, seen), X * 2)
        assert seen[-1] == nl.shared_hbm and seen[-1] != nl.hbm
