"""Op-table columns other layers read: which ops ``nl.atomic_rmw`` applies (``atomic``), the
fp32 expressions the Numba backend compiles (``native``), and the op list of the site's
``nki.language`` reference (``markdown``)."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIError
from nki.optable import ATOMIC_UFUNCS, NATIVE, NATIVE_INT_OK, OPS, markdown

from snippets import site_table


def _scatter(op_name: str):
    @nki.jit
    def k(table: nt.mutable_tensor, idx, vals):
        i_p = nl.arange(8)[:, None]
        i_f = nl.arange(4)[None, :]
        ix = nl.load(idx[i_p, 0])
        v = nl.load(vals)
        nl.atomic_rmw(table[ix, i_f], value=v, op=getattr(nl, op_name))
        return table

    return k


@pytest.mark.parametrize("name", sorted(n for n, o in OPS.items() if o.arity == 2))
def test_atomic_rmw_accepts_exactly_the_atomic_rows(name):
    table = np.arange(24, dtype=np.int32).reshape(6, 4)
    idx = np.array([[1], [3], [1], [0], [5], [1], [3], [2]], dtype=np.int32)
    vals = np.arange(1, 33, dtype=np.int32).reshape(8, 4) % 7
    if not OPS[name].atomic:
        with pytest.raises(NKIError) as info:
            _scatter(name)(table.copy(), idx, vals)
        assert info.value.code == "err_unsupported_op"
        return
    got = _scatter(name)(table.copy(), idx, vals)
    want = table.copy()
    ATOMIC_UFUNCS[name].at(want, idx[:, 0], vals)  # repeated rows receive every update
    np.testing.assert_array_equal(got, want)


def test_atomic_ufuncs_are_the_rows_numpy_ufuncs():
    assert set(ATOMIC_UFUNCS) == {n for n, o in OPS.items() if o.atomic}
    for name, fn in ATOMIC_UFUNCS.items():
        assert isinstance(fn, np.ufunc) and fn is OPS[name].fn


def test_numba_backend_compiles_the_native_column():
    from simulator.compiled.codegen import NATIVE as BACKEND_NATIVE

    assert dict(BACKEND_NATIVE) == NATIVE
    assert NATIVE_INT_OK <= set(NATIVE)
    assert all("{a}" in tpl for tpl in NATIVE.values())
    assert all(("{b}" in tpl) == (OPS[n].arity == 2) for n, tpl in NATIVE.items() if n != "copy")


def test_the_language_reference_lists_the_op_table():
    assert site_table("reference/language.md", "optable") == markdown().strip()


def test_op_functions_ignore_floating_point_errors_inside_and_outside_a_launch():
    """A row's function computes 1/0, log(-1) and exp overflow quietly (NumPy's error state
    set to raise around it): by itself, and inside a launch's ``errors_ignored``, where it does
    not enter ``np.errstate`` again."""
    from nki.optable import errors_ignored, quiet

    x = np.array([0.0, -1.0, 1000.0], dtype=np.float32)
    want = (np.float32(np.inf), np.float32(np.nan), np.float32(np.inf))
    with np.errstate(all="raise"):
        outside = OPS["reciprocal"].fn(x[:1]), OPS["log"].fn(x[1:2]), OPS["exp"].fn(x[2:])
        assert quiet() is not quiet()  # (a fresh ``np.errstate`` each time)
        with errors_ignored():
            assert quiet() is quiet()  # (the one shared null context)
            inside = OPS["reciprocal"].fn(x[:1]), OPS["log"].fn(x[1:2]), OPS["exp"].fn(x[2:])
        with pytest.raises(FloatingPointError):  # (the launch's state ends with it)
            np.log(x[1:2])
    for got in (outside, inside):
        np.testing.assert_array_equal(np.concatenate(got), np.array(want, dtype=np.float32))
