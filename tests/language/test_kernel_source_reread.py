"""Kernels whose source nki-sim re-reads (annotated locals, symbolic-loop exits) may be nested,
methods, decorated, or have lines indented less than their ``def`` (a docstring or a string
continuation at column 0): the checks must still find the right statements and lines."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt
from nki.errors import NKIControlFlowError, NKIShapeError

from helpers import stored as _out


def _nested_with_column0_docstring():
    @nki.jit
    def kernel(a):
        """Docstring whose second line is at column 0:
        no indentation here (dedenting the function's source alone cannot parse it)."""
        x: nt.tensor[128, 256] = nl.load(a)
        return _out(x)

    return kernel


class _Kernels:
    @staticmethod
    @nki.jit
    def method(a):
        msg = "a string continued \
at column 0"
        x: nt.tensor[128, 256] = nl.load(a)
        assert msg.endswith("column 0")
        return _out(x)


def _assert_annotation_error(kernel, fn, offset):
    line = inspect.getsourcelines(fn)[1] + offset
    with pytest.raises(NKIShapeError) as ei:
        kernel(np.ones((128, 512), np.float32))
    assert ei.value.code == "err_annotation_shape_mismatch"
    assert ei.value.loc.line == line, (ei.value.loc, line)


def test_annotated_local_in_nested_kernel_with_column0_docstring():
    k = _nested_with_column0_docstring()
    _assert_annotation_error(k, k.fn, 4)


def test_annotated_local_in_decorated_method_with_column0_continuation():
    k = _Kernels.method
    # getsourcelines starts at the first decorator (@staticmethod)
    _assert_annotation_error(k, k.fn, 5)


def test_annotated_local_passes_when_shape_matches_in_method():
    x = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    got = nki.simulate(_Kernels.method)(x)
    np.testing.assert_array_equal(got, x)


def test_symbolic_loop_break_located_in_nested_kernel_with_column0_docstring():
    @nki.jit(api="classic")  # (a current-API loop is Python's range: unrolled and left)
    def kernel(a):
        """Docstring line two
        at column 0."""
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for _i in nl.affine_range(2):
            nl.store(out, nl.load(a))
            break
        return out

    line = inspect.getsourcelines(kernel.fn)[1] + 7
    with pytest.raises(NKIControlFlowError) as ei:
        kernel(np.ones((128, 64), np.float32))
    assert ei.value.loc.line == line, (ei.value.loc, line)
