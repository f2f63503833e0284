"""Classic kernels label instructions with ``name="..."`` (the classic nki.isa / nki.language
calls took ``**kwargs``): the label is accepted, has no effect on values, and a misspelled
keyword next to it is still a located error."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError

X = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)


@nki.jit(api="classic")
def _labelled(x):
    out = nl.ndarray((128, 65), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    rmax = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    scaled = nisa.tensor_scalar_reduce(
        data=t, op0=np.multiply, operand0=0.5, reduce_op=nl.max, reduce_res=rmax, name="scale"
    )
    e = nisa.activation(op=nl.exp, data=scaled, bias=None, scale=1.0, name="exp")
    c = nisa.tensor_copy(e, dtype=nl.float32, name="copy")
    s = nl.add(c, 1.0, name="plus-one")
    nl.store(out[:, 0:64], s)
    nl.store(out[:, 64:65], rmax)
    return out


def test_name_label_on_classic_isa_and_language_calls_is_accepted():
    got = _labelled(X)
    np.testing.assert_allclose(got[:, :64], np.exp(0.5 * X) + 1.0, rtol=1e-5)
    np.testing.assert_allclose(got[:, 64], (0.5 * X).max(axis=1), rtol=1e-6)


def test_loop_reduce_accepts_a_name_label():
    @nki.jit(api="classic")
    def k(x):
        out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(4):
            acc[...] = nl.loop_reduce(nl.load(x[:, j * 16 : (j + 1) * 16]), np.add, [j], name="r")
        nl.store(out, acc)
        return out

    want = X.reshape(128, 4, 16).sum(axis=1)
    np.testing.assert_allclose(k(X), want, rtol=1e-5, atol=1e-5)


def test_misspelled_keyword_next_to_a_label_is_still_an_error():
    @nki.jit(api="classic")
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_copy(nl.load(x), dtyp=nl.float32, name="copy"))
        return out

    with pytest.raises(NKIError) as ei:
        k(X)
    assert ei.value.code == "err_unexpected_keyword_argument"
    assert "dtyp" in str(ei.value) and ei.value.loc.file == __file__


def test_label_on_a_call_of_both_forms_keeps_a_classic_kernel_classic():
    # dma_copy(dst=, src=) is a call of both generations; only the current form lists name=,
    # but the label must not make the classic kernel's call a destination-first one
    @nki.jit(api="classic")
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.ndarray((nl.par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((nl.par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x, name="seed_load")
        for j in nl.affine_range(64):
            b[:, nl.ds(63 - j, 1)] = nisa.tensor_copy(a[:, nl.ds(j, 1)])
        nisa.dma_copy(dst=out, src=b, name="result_store")
        return out

    np.testing.assert_array_equal(k(X), X[:, ::-1])
