"""Rules the tracer enforces per instruction: limits, partition mismatch, memory, immutability."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIAttributeError, NKIError, NKIMemoryError, NKIShapeError

from helpers import expect, line_of
from helpers import randn as rand


def k_partitions(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)  # ERR
    nl.store(out, t)
    return out


def test_partition_limit():
    e = expect(
        k_partitions,
        rand((256, 8)),
        cls=NKIShapeError,
        code="err_num_partition_exceed_arch_limit",
        values=["256", "128"],
    )
    assert "nl.load" in str(e)


def k_free_limit(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(a), nl.load(b))  # ERR
    nl.store(out, nl.copy(p))
    return out


def test_free_size_limit():
    expect(
        k_free_limit,
        rand((64, 130)),
        rand((64, 128)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        values=["130", "128"],
    )


def k_mismatch(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, nisa.tensor_tensor(x, y, op=nl.add))  # ERR
    return out


def test_partition_mismatch():
    expect(
        k_mismatch,
        rand((128, 8)),
        rand((64, 8)),
        cls=NKIShapeError,
        code="err_num_partition_mismatch",
        values=["128", "64"],
    )


def k_load_from_sbuf(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.load(t)  # ERR
    nl.store(out, u)
    return out


def k_exp_on_hbm(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(a))  # ERR
    return out


def test_wrong_memory_load_from_sbuf():
    expect(
        k_load_from_sbuf,
        rand((128, 8)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        values=["hbm", "sbuf", "load"],
    )


def test_wrong_memory_compute_on_hbm():
    expect(
        k_exp_on_hbm,
        rand((128, 8)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        values=["hbm"],
    )


def k_matmul_into_sbuf(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    res[...] = nisa.nc_matmul(nl.load(a), nl.load(b))  # ERR
    nl.store(out, res)
    return out


def test_tensor_engine_cannot_write_sbuf():
    expect(
        k_matmul_into_sbuf,
        rand((64, 32)),
        rand((64, 16)),
        cls=NKIError,
        code="err_unsupported_memory",
        values=["PSUM", "sbuf", "nisa.nc_matmul"],
    )


def k_write_param(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(a, t)  # ERR
    nl.store(out, t)
    return out


def test_immutable_parameter():
    expect(
        k_write_param,
        rand((128, 8)),
        api="classic",  # the current API lets a kernel write its inputs
        code="err_cannot_update_immutable_parameter",
        values=["'a'", "nt.mutable_tensor"],
    )


def k_legacy_out(a, out):
    nl.store(out, nl.load(a))


def test_legacy_kernel_may_write_output_parameter():
    a = rand((128, 8))
    out = np.zeros_like(a)
    nki.jit(k_legacy_out)(a, out)
    np.testing.assert_array_equal(out, a)


def test_error_message_has_source_line_caret_and_traceback_ends_in_kernel():
    k = nki.jit(k_partitions)
    try:
        k(rand((256, 8)))
    except NKIError as e:
        text = str(e)
        line = line_of(k_partitions)
        assert f"test_trace_rules.py:{line}:" in text
        assert "t = nl.load(a)  # ERR" in text and "^" in text.splitlines()[2]
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        assert tb.tb_frame.f_code.co_filename == __file__ and tb.tb_lineno == line
    else:
        raise AssertionError("no error")


def k_unknown_tile_method(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, t[:, 0].as_tile())  # ERR
    return out


def test_unknown_tile_attribute_is_a_located_nki_error():
    e = expect(
        k_unknown_tile_method,
        rand((128, 4)),
        cls=NKIAttributeError,
        code="err_unsupported_attribute",
        values=["no attribute 'as_tile'", "[128, 1]"],
    )
    assert isinstance(e, AttributeError)  # hasattr / getattr(default) still work on tiles
