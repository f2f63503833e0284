"""check_kernel: passes correct kernels, shrinks failures to a minimal example whose shapes,
dtypes and mismatch are in the error, and rejects misuse with a clear error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import strategies as st

import nki
import nki.language as nl
from nki.testing import (
    KernelCheckError,
    ToolkitUsageError,
    check_kernel,
    dtypes,
    grid_size,
    grids,
    tile_shapes,
)


@nki.jit
def scale_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.multiply(nl.load(a), 2.0), nl.load(b)))
    return out


@nki.jit
def scale_add_col_bug(a, b):
    """Correct for up to 4 columns; column 4 onwards gets a + b instead of 2a + b."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    i_p, i_f = nl.mgrid[0 : a.shape[0], 0 : a.shape[1]]
    nl.store(out, nl.add(x, y))
    nl.store(out[i_p, i_f], nl.add(nl.multiply(x, 2.0), y), mask=(i_f < 4))
    return out


def ref(a, b):
    return 2 * a + b


SAME = st.shared(tile_shapes(max_free=32), key="ab")


def test_correct_kernel_passes_over_drawn_shapes_and_dtypes():
    n = check_kernel(
        scale_add, ref, shapes=[SAME, SAME], dtypes=dtypes(float_only=True), max_examples=12
    )
    assert n == 12


def test_failure_shrinks_to_a_minimal_example_and_reports_it():
    with pytest.raises(KernelCheckError) as ei:
        check_kernel(scale_add_col_bug, ref, shapes=[SAME, SAME], max_examples=30)
    msg = str(ei.value)
    # the smallest failing input: one partition and exactly 5 columns, all-zero a is not enough
    assert "a: float32[1, 5]" in msg and "b: float32[1, 5]" in msg, msg
    assert "kernel 'scale_add_col_bug' fails against reference 'ref'" in msg
    assert "1 of 5 elements differ" in msg
    assert re.search(r"worst element at index \(0, 4\): actual (\S+), expected (\S+)", msg)
    assert "max abs error" in msg


def test_shrunk_values_are_minimal_too():
    @nki.jit
    def relu_bug(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        nl.store(out, nl.maximum(x, 1.0))  # should be 0.0
        return out

    with pytest.raises(KernelCheckError) as ei:
        check_kernel(relu_bug, lambda a: np.maximum(a, 0), shapes=[(2, 3)], max_examples=20)
    msg = str(ei.value)
    # a single offending element between 0 and 1 is left; the rest shrinks to 0 or below
    m = re.search(r"worst element at index \((\d+), (\d+)\): actual 1, expected (\S+) ", msg)
    assert m and 0 <= float(m.group(3)) < 1, msg


def test_bfloat16_tolerance_used_for_bfloat16_outputs():
    @nki.jit
    def exp_kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out

    # the kernel rounds exp to bf16; the fp32 reference passes bf16's tolerance ...
    check_kernel(exp_kernel, np.exp, shapes=[(8, 8)], dtypes="bfloat16", max_examples=5)
    # ... but not a forced fp32 tolerance
    with pytest.raises(KernelCheckError, match="rtol=1e-05"):
        check_kernel(
            exp_kernel, np.exp, shapes=[(8, 8)], dtypes="bfloat16", rtol=1e-5, max_examples=5
        )


def test_per_input_dtypes_value_ranges_and_multiple_outputs():
    @nki.jit
    def two_outputs(a, b):
        x, y = nl.load(a), nl.load(b)
        s = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        q = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(s, nl.add(x, y, dtype=nl.float32))
        nl.store(q, nl.divide(x, y, dtype=nl.float32))
        return s, q

    check_kernel(
        two_outputs,
        lambda a, b: (a + b, a / b),
        shapes=[(4, 6), (4, 6)],
        dtypes=["float32", "int8"],
        min_value=1,
        max_value=50,
        max_examples=5,
    )


def test_grid_and_shapes_from_the_grid():
    @nki.jit
    def rows_x3(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        rows = nl.ds(i * 16, 16)
        nl.store(out[rows, :], nl.multiply(nl.load(a[rows, :]), 3))
        return out

    n = check_kernel(
        rows_x3,
        lambda a: 3 * a,
        shapes=lambda g: [(16 * grid_size(g), 5)],
        grid=grids(max_ndim=1, max_instances=4, cores=True, target="trn2"),
        target="trn2",
        max_examples=8,
    )
    assert n == 8
    # a grid placed on two physical cores is drawn and run
    seen = []

    def ref(a):
        seen.append(a.shape[0] // 16)
        return 3 * a

    check_kernel(
        rows_x3,
        ref,
        shapes=lambda g: [(16 * grid_size(g), 5)],
        grid=grids(max_ndim=1, min_instances=2, max_instances=2, cores=True, target="trn2").filter(
            lambda g: "nc(2)" in repr(g)
        ),
        target="trn2",
        max_examples=3,
    )
    assert seen and set(seen) == {2}


def test_kernel_errors_are_reported_with_the_example():
    @nki.jit
    def too_wide(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    with pytest.raises(KernelCheckError) as ei:
        check_kernel(too_wide, lambda a: a, shapes=[st.tuples(st.integers(100, 200), st.just(2))])
    msg = str(ei.value)
    assert "the kernel raised on" in msg and "a: float32[129, 2]" in msg  # shrunk to 129 rows
    assert "err_num_partition_exceed_arch_limit" in msg or "128" in msg


def test_order_dependence_inside_check_kernel():
    @nki.jit
    def last_writer(a):
        # every instance writes the whole output: the static analysis rejects this race, so
        # it is hidden behind a data-dependent-looking mask over the instance id
        out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        i_p = nl.arange(a.shape[0])[:, None]
        nl.store(out, nl.load(a[i_p, i]), mask=(i_p >= 0) & (i >= 0))
        return out

    with pytest.raises(KernelCheckError) as ei:
        check_kernel(
            last_writer.configure(checks="none"),
            lambda a: a[:, -1:],
            shapes=lambda g: [(2, g[0])],
            grid=grids(max_ndim=1, max_instances=4, min_instances=2),
            shuffle_seeds=range(4),
        )
    msg = str(ei.value)
    assert "order dependence" in msg and "grid=(2,)" in msg and "seed" in msg, msg


# ---- misuse -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(shapes=[(4, 4)]), r"takes 2 tensor argument\(s\) \(a, b\), but shapes gives 1"),
        (dict(shapes=[(4, 4)] * 3), r"but shapes gives 3"),
        (dict(shapes=(4, 4)), r"looks like a single shape"),
        (dict(shapes=[(4, 4)] * 2, dtypes=["float32"]), r"but dtypes gives 1"),
        (dict(shapes=[(4, 4)] * 2, framework="tensorflow"), r"framework must be"),
    ],
)
def test_misuse_is_a_clear_error(kwargs, pattern):
    with pytest.raises(ToolkitUsageError, match=pattern):
        check_kernel(scale_add, ref, **kwargs)


def test_reference_arity_and_output_count_mismatch():
    with pytest.raises(ToolkitUsageError, match="reference 'unary' cannot take the kernel's 2"):

        def unary(a):
            return a

        check_kernel(scale_add, unary, shapes=[(4, 4), (4, 4)])
    with pytest.raises(ToolkitUsageError, match="returned 1 output.* reference returned 2"):
        check_kernel(scale_add, lambda a, b: (a, b), shapes=[(4, 4), (4, 4)], max_examples=2)
    with pytest.raises(ToolkitUsageError, match="already launched"):
        check_kernel(scale_add[2], ref, shapes=[(4, 4), (4, 4)], grid=(2,))


def test_torch_reference():
    torch = pytest.importorskip("torch")
    check_kernel(
        scale_add,
        lambda a, b: torch.add(a * 2, b),
        shapes=[SAME, SAME],
        dtypes=st.sampled_from(["float32", "bfloat16"]),
        framework="torch",
        upcast=False,
        max_examples=5,
    )


def test_several_distinct_failures_raise_one_kernel_check_error():
    @nki.jit
    def first64(a):  # raises on fewer than 64 rows, leaves rows 64 on unwritten otherwise
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(c[0:64, :], nl.load(a[0:64, :]))
        return c

    with pytest.raises(KernelCheckError) as ei:
        check_kernel(
            first64,
            lambda a: a,
            shapes=[st.sampled_from([(32, 8), (128, 8)])],
            max_examples=20,
        )
    assert "kernel 'first64' fails against reference" in str(ei.value)
    assert "2 distinct failures" in str(ei.value)  # (the kernel raised; an output differed)


def test_torch_float8_inputs_and_references():
    torch = pytest.importorskip("torch")
    from nki.testing import assert_allclose

    t = torch.tensor([[1.0, -2.0, 0.5]]).to(torch.float8_e4m3fn)
    assert_allclose(t, np.array([[1.0, -2.0, 0.5]], np.float32))
    with pytest.raises(AssertionError):
        assert_allclose(t, np.array([[1.0, -2.0, 0.75]], np.float32))
    check_kernel(
        scale_add,
        lambda a, b: (a.float() * 2 + b.float()).to(a.dtype),
        shapes=[SAME, SAME],
        dtypes="float8_e5m2",
        framework="torch",
        upcast=False,
        min_value=-2,
        max_value=2,
        max_examples=5,
    )
