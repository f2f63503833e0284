"""nki.typing annotations on kernel parameters and locals (checked at trace time),
isinstance(x, nt.tensor), and which parameters a kernel may write and must return."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nki_typing  # (an alias of nt, for the string annotations' test)
import nki.typing as nt
from nki.errors import NKIError, NKIShapeError
from nki.typing import mutable_tensor as mt

from helpers import stored as _out

# ---- nki.typing ---------------------------------------------------------------------------


@nki.jit
def annotated(a: nt.tensor[128, 512]):
    return _out(nl.load(a))


def test_shape_annotation_checked_at_trace_time():
    x = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(annotated(x), x)
    with pytest.raises(NKIShapeError) as ei:
        annotated(np.ones((128, 256), np.float32))
    assert ei.value.code == "err_annotation_shape_mismatch"
    assert "128, 512" in str(ei.value) and "256" in str(ei.value)


@nki.jit
def annotated_locals(a):
    x: nt.tensor[128, 512] = nl.load(a)
    y: nt.tensor[128, 256] = nl.load(a[:, 0:256])
    return _out(nl.add(x[:, 0:256], y))


def test_local_shape_annotations_are_checked():
    x = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(annotated_locals(x), 2 * x[:, :256])

    @nki.jit
    def wrong(a):
        x: nt.tensor[128, 256] = nl.load(a)
        return _out(x)

    line = inspect.getsourcelines(wrong.fn)[1] + 2
    with pytest.raises(NKIShapeError) as ei:
        wrong(x)
    assert ei.value.code == "err_annotation_shape_mismatch"
    assert ei.value.loc.line == line
    assert "'x'" in str(ei.value) and "(128, 512)" in str(ei.value)


def test_isinstance_nt_tensor_on_kernel_arguments():
    """Kernels check their arguments with ``isinstance(x, nt.tensor)`` (optionally a shape)."""

    @nki.jit
    def kernel(x):
        assert isinstance(x, nt.tensor) and isinstance(x, nt.tensor[128, 4])
        assert not isinstance(x, nt.tensor[64, 4]) and not isinstance(3, nt.tensor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        assert isinstance(t, nt.tensor)
        nl.store(out, t)
        return out

    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(kernel(x), x)


def test_mutable_tensor_may_be_written_and_is_returned():
    @nki.jit
    def inc(a: nt.mutable_tensor):
        nl.store(a, nl.add(nl.load(a), 1.0))
        return a

    a = np.zeros((4, 8), np.float32)
    out = inc(a)
    assert np.all(out == 1) and np.all(a == 1)


def test_mutable_parameter_must_be_returned():
    @nki.jit
    def not_returned(a: nt.mutable_tensor):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(a, nl.load(a))
        nl.store(out, nl.load(a))
        return out

    line = inspect.getsourcelines(not_returned.fn)[1] + 3
    with pytest.raises(NKIError) as ei:
        not_returned(np.zeros((4, 4), np.float32))
    assert ei.value.code == "err_mutable_parameter_not_returned"
    assert ei.value.loc.line == line


def test_writing_an_immutable_parameter_is_an_error():
    @nki.jit(api="classic")  # the current API lets a kernel write its inputs
    def bad(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(b, nl.load(a))
        nl.store(out, nl.load(a))
        return out

    line = inspect.getsourcelines(bad.fn)[1] + 3
    with pytest.raises(NKIError) as ei:
        bad(np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float32))
    assert ei.value.code == "err_cannot_update_immutable_parameter"
    assert "'b'" in str(ei.value)
    assert ei.value.loc.line == line


def test_string_annotations_name_nt_types_through_any_alias():
    """With ``from __future__ import annotations`` (this file's) every annotation is a string:
    it is evaluated in the kernel's globals and closure (a module alias, an imported name), and
    else read by name through any module path, with its shape."""

    @nki.jit(api="classic")  # (the classic API lets a kernel write only mutable parameters)
    def clear(stats: nki_typing.mutable_tensor, more: mt):
        nl.store(stats, nl.zeros(stats.shape, dtype=nl.float32, buffer=nl.sbuf))
        nl.store(more, nl.add(nl.load(more), 1.0))
        return stats, more

    stats, more = np.ones((128, 64), np.float32), np.zeros((4, 8), np.float32)
    got = clear(stats, more)
    assert np.all(got[0] == 0) and np.all(got[1] == 1) and np.all(stats == 0)

    @nki.jit
    def shaped(a: neuronxcc.nki.typing.tensor[128, 512]):  # noqa: F821 - (not importable here)
        return _out(nl.load(a))

    with pytest.raises(NKIShapeError) as ei:
        shaped(np.ones((128, 256), np.float32))
    assert ei.value.code == "err_annotation_shape_mismatch" and "128, 512" in str(ei.value)


def test_legacy_kernel_writes_its_output_parameter():
    @nki.jit
    def legacy(a, out):
        nl.store(out, nl.multiply(nl.load(a), 2.0))

    a = np.full((4, 8), 3.0, np.float32)
    out = np.zeros_like(a)
    assert legacy(a, out) is None
    assert np.all(out == 6)


# ---- annotated locals are read once per kernel and text, evaluated at every trace ----------

_ROWS = 128


def _kernel_from_text(file: str, text: str):
    """A kernel defined by running ``text`` as if it were the file ``file`` (linecache holds its
    lines, as for a notebook cell)."""
    import linecache

    linecache.cache[file] = (len(text), None, text.splitlines(True), file)
    scope = {"nki": nki, "nl": nl, "nt": nt, "_out": _out}
    exec(compile(text, file, "exec"), scope)
    return scope["kernel"]


def test_local_annotation_follows_a_changed_global():
    @nki.jit
    def kernel(a):
        x: nt.tensor[_ROWS, 256] = nl.load(a)
        return _out(x)

    x = np.ones((128, 256), np.float32)
    np.testing.assert_array_equal(kernel(x), x)
    global _ROWS
    _ROWS = 64
    try:  # new traces (new shapes) evaluate the annotation in the kernel's globals again
        y = np.ones((64, 256), np.float32)
        np.testing.assert_array_equal(kernel(y), y)
        with pytest.raises(NKIShapeError) as ei:
            kernel(np.ones((32, 256), np.float32))
        assert "nt.tensor[64, 256]" in str(ei.value), str(ei.value)
    finally:
        _ROWS = 128


def test_local_annotation_follows_the_kernel_text_it_is_read_from():
    file = "<nki-test-annotation-text>"
    text = "def kernel(a):\n    x: nt.tensor[128, 256] = nl.load(a)\n    return _out(x)\n"
    k = nki.jit(_kernel_from_text(file, text))
    x = np.ones((128, 256), np.float32)
    np.testing.assert_array_equal(k(x), x)
    # the same code object, its file's text now annotating another shape: read again
    import linecache

    changed = text.replace("[128, 256]", "[128, 512]")
    linecache.cache[file] = (len(changed), None, changed.splitlines(True), file)
    with pytest.raises(NKIShapeError) as ei:
        nki.jit(k.fn)(x)
    assert "nt.tensor[128, 512]" in str(ei.value) and ei.value.loc.line == 2
