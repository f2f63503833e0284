"""Each engine / dtype / size / buffer rule broken once: error class, code, message values and
the kernel's own line; and verdicts that differ between trn1 and trn2."""

import numpy as np
import pytest
from helpers import expect_error, rand, run
from helpers import hbm_out as _out

import nki.isa as nisa
import nki.language as nl
from nki.errors import NKIError, NKIMemoryError, NKIShapeError, NKITypeError, NKIUnsupportedError


def k_ts_scalar(x, op0, op1):
    out = _out(x.shape, x.dtype)
    o1 = None if op1 is None else 1.0
    act = nisa.scalar_engine
    r = nisa.tensor_scalar(nl.load(x), op0, 2.0, op1=op1, operand1=o1, engine=act)  # ERR
    nl.store(out, r)
    return out


def test_scalar_engine_tensor_scalar_trn1_vs_trn2():
    x = rand((16, 8))
    np.testing.assert_allclose(
        run(k_ts_scalar, x, np.multiply, np.add, target="trn2"), x * 2 + 1, rtol=1e-6
    )
    expect_error(
        k_ts_scalar,
        x,
        np.multiply,
        np.add,
        target="trn1",
        cls=NKIUnsupportedError,
        code="err_unsupported_engine_for_op",
        fragments=["Scalar", "trn1", "v3"],
    )
    expect_error(
        k_ts_scalar,
        x,
        np.add,
        np.multiply,
        target="trn2",
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["(op0=add, op1=multiply)", "(op0=multiply, op1=add)"],
    )
    expect_error(
        k_ts_scalar,
        x,
        np.subtract,
        None,
        target="trn2",
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["op0=subtract"],
    )


def k_tt(x, y, op, engine):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=op, engine=engine))  # ERR
    return out


def test_bitvec_rules():
    xi = np.ones((8, 8), np.int32)
    xf = rand((8, 8))
    expect_error(
        k_tt,
        xf,
        xf,
        nl.bitwise_and,
        nisa.vector_engine,
        cls=NKITypeError,
        code="err_bitvec_op_requires_integer_dtype",
        fragments=["bitwise_and", "float32"],
    )
    expect_error(
        k_tt,
        xi,
        xi,
        nl.bitwise_or,
        nisa.gpsimd_engine,
        cls=NKIError,
        code="err_unsupported_engine_for_op",
        fragments=["bitwise_or", "Vector", "gpsimd"],
    )


def test_gpsimd_int32_add_is_exact():
    x = np.full((4, 4), 2**24 + 1, np.int32)
    y = np.ones((4, 4), np.int32)
    np.testing.assert_array_equal(run(k_tt, x, y, np.add, nisa.gpsimd_engine), x + y)
    # the Vector engine computes arithmetic in fp32
    np.testing.assert_array_equal(
        run(k_tt, x, y, np.add, nisa.vector_engine), (x.astype(np.float32) + 1).astype(np.int32)
    )


def k_ts_gp(x, engine):
    out = _out(x.shape, x.dtype)
    nl.store(
        out, nisa.tensor_scalar(nl.load(x), np.add, 1, op1=np.multiply, operand1=3, engine=engine)
    )
    return out


def test_gpsimd_tensor_scalar_int_exact():
    x = np.full((4, 4), 2**24 + 1, np.int32)
    np.testing.assert_array_equal(run(k_ts_gp, x, nisa.gpsimd_engine), (x + 1) * 3)
    vec = run(k_ts_gp, x, nisa.vector_engine)
    want = ((x.astype(np.float32) + 1) * 3).astype(np.int64).astype(np.int32)
    np.testing.assert_array_equal(vec, want)


def k_tt_psum(x):
    out = _out(x.shape, x.dtype)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
    a[...] = nl.load(x)
    b[...] = nl.load(x)
    nl.store(out, nisa.tensor_tensor(a, b, op=np.add))  # ERR
    return out


def k_tt_parts(x, y):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(y), op=np.add))  # ERR
    return out


def test_tensor_tensor_memory_and_shape_rules():
    x = rand((8, 8))
    expect_error(
        k_tt_psum,
        x,
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["data1", "data2", "PSUM"],
    )
    expect_error(
        k_tt_parts,
        x,
        rand((4, 16)),
        cls=NKIShapeError,
        code="err_num_partition_mismatch",
        fragments=["data1[8, 8]", "data2[4, 16]"],
    )
    expect_error(
        k_tt_parts,
        x,
        rand((8, 9)),
        cls=NKIShapeError,
        code="err_free_size_mismatch",
        fragments=["[8, 8] (8)", "[8, 9] (9)"],
    )
    # a (P, 1) column broadcasts along the free axis, on either side
    col = np.random.default_rng(3).uniform(0.5, 1.5, (8, 1)).astype(np.float32)
    got = run(k_tt_column, x, col)
    np.testing.assert_allclose(got[0], x * col, rtol=1e-6)
    np.testing.assert_allclose(got[1], col - x, rtol=1e-6)


def k_tt_column(x, c):
    out = nl.ndarray((2,) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt, ct = nl.load(x), nl.load(c)
    nl.store(out[0], nisa.tensor_tensor(xt, ct, op=nl.multiply))
    nl.store(out[1], nisa.tensor_tensor(ct, xt, op=nl.subtract))
    return out


def k_ts_mixed(x):
    out = _out(x.shape, x.dtype)
    r = nisa.tensor_scalar(nl.load(x), np.add, 1, op1=nl.bitwise_and, operand1=3)  # ERR
    nl.store(out, r)
    return out


def k_ts_vec_shape(x, v):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.tensor_scalar(nl.load(x), np.add, nl.load(v)))  # ERR
    return out


def test_tensor_scalar_rules():
    xi = np.ones((8, 8), np.int32)
    expect_error(
        k_ts_mixed,
        xi,
        cls=NKIError,
        code="err_tensor_scalar_op_class_mismatch",
        fragments=["op0=add", "op1=bitwise_and"],
    )
    expect_error(
        k_ts_vec_shape,
        rand((8, 8)),
        rand((8, 2)),
        cls=NKIShapeError,
        code="err_scalar_or_vector_operand_shape",
        fragments=["operand0", "(8, 1)", "[8, 2]"],
    )


def k_reduce_axis(x, axis):
    r = nisa.tensor_reduce(np.add, nl.load(x), axis=axis)  # ERR
    out = _out(r.shape, x.dtype)
    nl.store(out, r)
    return out


def test_tensor_reduce_axis_rule():
    x = rand((8, 4, 4))
    for axis in (0, 1, (1, 3)):
        expect_error(
            k_reduce_axis,
            x,
            axis,
            cls=NKIError,
            code="err_invalid_axis",
            fragments=[repr(axis), "last axis 2"],
        )


def k_bn_big(x):
    out = _out((x.shape[0], 6), nl.float32)
    nl.store(out, nisa.bn_stats(nl.load(x)))  # ERR
    return out


def k_bn_aggr_bad(x):
    out = _out((x.shape[0], 2), nl.float32)
    nl.store(out, nisa.bn_aggr(nl.load(x)))  # ERR
    return out


def test_bn_rules():
    expect_error(
        k_bn_big,
        rand((8, 513)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["513", "512", "bn_stats_fmax"],
    )
    expect_error(
        k_bn_aggr_bad,
        rand((8, 7)),
        cls=NKIShapeError,
        code="err_bn_aggr_free_size",
        fragments=["7", "multiple of 3"],
    )


def k_max8_small(x):
    out = _out((x.shape[0], 8), x.dtype)
    nl.store(out, nisa.max8(src=nl.load(x)))  # ERR
    return out


def test_max8_size_rule():
    expect_error(
        k_max8_small,
        rand((8, 5)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["5", "8", "16384"],
    )


def k_act_not_act(x):
    out = _out(x.shape, x.dtype)
    nl.store(out, nisa.activation(np.add, nl.load(x)))  # ERR
    return out


def test_activation_op_must_be_activation():
    expect_error(
        k_act_not_act,
        rand((8, 8)),
        cls=NKIError,
        code="err_unsupported_activation",
        fragments=["add", "activation"],
    )


def k_pred_dtype(x, p):
    d = nl.load(x)
    nisa.tensor_copy_predicated(src=nl.load(x), dst=d, predicate=nl.load(p))  # ERR
    out = _out(x.shape, x.dtype)
    nl.store(out, d)
    return out


def test_predicate_dtype_rule():
    expect_error(
        k_pred_dtype,
        rand((8, 8)),
        rand((8, 8)),
        cls=NKITypeError,
        code="err_unsupported_dtype",
        fragments=["predicate", "float32", "uint8"],
    )


def k_shuffle_bad(x):
    d = nl.load(x)
    nisa.nc_stream_shuffle(src=nl.load(x), dst=d, shuffle_mask=[0] * 31)  # ERR
    return None


def test_shuffle_mask_rule():
    expect_error(
        k_shuffle_bad,
        rand((32, 4)),
        cls=NKIError,
        code="err_invalid_shuffle_mask",
        fragments=["32 integers"],
    )


def k_isa_into_hbm(x):
    out = _out(x.shape, x.dtype)
    out[...] = nisa.tensor_copy(nl.load(x))  # ERR
    return out


def test_compute_engine_cannot_write_hbm():
    expect_error(
        k_isa_into_hbm,
        rand((8, 8)),
        cls=NKIMemoryError,
        code="err_unsupported_memory",
        fragments=["HBM", "nl.store"],
    )


def k_part_limit(x):
    out = _out((x.shape[1], x.shape[0]), x.dtype)
    nl.store(out, nisa.nc_transpose(nl.load(x[0:128, 0:200]), engine=nisa.tensor_engine))  # ERR
    return out


def test_tensor_transpose_free_limit():
    expect_error(
        k_part_limit,
        rand((128, 200)),
        cls=NKIShapeError,
        code="err_size_of_dimension_exceed_arch_limit",
        fragments=["200", "128", "tensor engine"],
    )


@pytest.mark.parametrize("target,ok", [("trn1", False), ("trn2", True)])
def test_same_kernel_two_targets_summary(target, ok):
    """One kernel, several per-target rules: all pass on trn2, the first fails on trn1."""
    x = rand((16, 8))
    if ok:
        run(k_ts_scalar, x, np.multiply, None, target=target)
    else:
        with pytest.raises(NKIUnsupportedError):
            run(k_ts_scalar, x, np.multiply, None, target=target)
