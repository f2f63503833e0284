"""The strategies stay inside the hardware budgets they promise and reach what they offer
(ragged shapes, special values, multi-core grids)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from nki import dtypes as ndt
from nki.targets import TARGETS
from nki.testing import (
    arrays,
    dtypes,
    free_limit,
    grid_size,
    grids,
    hbm_shapes,
    sbuf_budget,
    special_values,
    tile_shapes,
)

FIND = settings(database=None, max_examples=1000, derandomize=True)  # find() searches this long


@given(
    data=st.data(),
    target=st.sampled_from(sorted(TARGETS)),
    dt=dtypes(kinds=("float", "int", "uint", "bool")),
    free_dims=st.integers(1, 3),
)
def test_tile_shapes_fit_partitions_and_sbuf(data, target, dt, free_dims):
    shape = data.draw(
        tile_shapes(dtype=dt, target=target, free_dims=free_dims, max_free=None), label="shape"
    )
    assert len(shape) == 1 + free_dims
    assert 1 <= shape[0] <= 128
    assert math.prod(shape[1:]) * ndt.itemsize(str(dt)) <= TARGETS[target].sbuf_usable_per_partition


@given(
    data=st.data(),
    target=st.sampled_from(sorted(TARGETS)),
    instr=st.sampled_from(["nc_matmul.stationary", "nc_matmul.moving", "bn_stats",
                           "nc_transpose.vector", "psum_bank_fp32"]),
)  # fmt: skip
def test_tile_shapes_respect_instruction_free_limits(data, target, instr):
    shape = data.draw(tile_shapes(instruction=instr, target=target, max_free=None))
    assert shape[1] <= free_limit(instr, target)
    if instr == "nc_transpose.vector":
        assert shape[0] <= 32


def test_budget_numbers_come_from_the_target_table():
    assert free_limit("nc_matmul.moving", "trn2") == 512
    assert free_limit("nc_matmul.moving", "trn3") == 4096
    assert free_limit("nc_matmul.stationary", "trn1") == 128
    assert free_limit("psum_bank_fp32", "trn2") == 512
    assert sbuf_budget("trn1") < sbuf_budget("trn2") < sbuf_budget("trn3")
    with pytest.raises(ValueError, match="unknown instruction"):
        free_limit("nc_magic")


def test_tile_shapes_reach_the_sbuf_budget_and_reject_bad_limits():
    # the largest fp32 tile that fits a trn1 partition is found
    big = find(
        tile_shapes(dtype="float32", target="trn1", max_free=None),
        lambda s: s[1] * 4 > 180224 - 4 * 64,
        settings=FIND,
    )
    assert big[1] * 4 <= 180224
    with pytest.raises(ValueError, match="exceeds the 128 partitions"):
        find(tile_shapes(max_partitions=256), lambda s: True)
    with pytest.raises(ValueError, match="no free size fits"):
        find(tile_shapes(budget_bytes=2, dtype="float32"), lambda s: True)


@given(shape=hbm_shapes((128, 64), max_tiles=(3, 2)))
def test_hbm_shapes_multiples(shape):
    assert shape[0] % 128 == 0 and shape[1] % 64 == 0
    assert shape[0] <= 384 and shape[1] <= 128


@given(shape=hbm_shapes((128, 64), max_tiles=3, multiple=False))
def test_hbm_shapes_ragged(shape):
    assert shape[0] % 128 or shape[1] % 64
    assert 1 <= shape[0] <= 384 and 1 <= shape[1] <= 192


def test_hbm_shapes_ragged_shrinks_to_one_short():
    s = find(hbm_shapes((128, 4), multiple=False), lambda s: True, settings=FIND)
    assert s in ((127, 4), (1, 4), (128, 3), (1, 1))


def test_dtypes_filters():
    floats = {"float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"}
    assert set(find_all(dtypes(float_only=True))) == floats
    assert set(find_all(dtypes(float_only=True, fp8=False))) == {"float32", "bfloat16", "float16"}
    assert set(find_all(dtypes(kinds=("uint",)))) == {"uint8", "uint16", "uint32"}
    assert set(find_all(dtypes(include=[np.float32, "bf16"], exclude=["float32"]))) == {"bfloat16"}
    d = find(dtypes(), lambda d: True)
    assert d == "float32" and d == np.float32  # NKI dtype objects compare equal to NumPy dtypes
    with pytest.raises(ValueError, match="unknown dtype kinds"):
        dtypes(kinds=("complex",))
    with pytest.raises(ValueError, match="leave no dtype"):
        dtypes(include=["int8"], exclude=["int8"])


def find_all(strategy):
    seen = set()

    @settings(database=None, max_examples=200)
    @given(strategy)
    def collect(x):
        seen.add(str(x))

    collect()
    return seen


@given(data=st.data(), dt=dtypes(kinds=("float", "int", "uint", "bool")))
def test_arrays_default_to_safe_finite_values(data, dt):
    shape = (9, 40)
    big = data.draw(arrays(dt, shape))  # seeded background + drawn elements
    small = data.draw(arrays(dt, (3, 5)))  # every element drawn
    for a in (big, small):
        assert a.dtype == ndt.storage(str(dt))
        f = a.astype(np.float64)
        assert np.isfinite(f).all()
        if ndt.is_float(str(dt)):
            assert (np.abs(f) <= 4).all()
        elif ndt.is_int(str(dt)):
            assert (np.abs(f) <= 100).all()


@given(a=arrays("bfloat16", (4, 4), min_value=0.5, max_value=2.0))
def test_arrays_value_range_holds_after_rounding(a):
    f = a.astype(np.float32)
    assert (f >= 0.5).all() and (f <= 2.0).all()


@pytest.mark.parametrize(
    "dt,lo,hi",
    [("bfloat16", 0.0, 0.1), ("bfloat16", 0.0, 1.006), ("float8_e5m2", -1000, 1000),
     ("float8_e4m3", -1000, 1000), ("float8_e4m3fn", -1000, 1000), ("float16", -0.3, 0.3)],
)  # fmt: skip
def test_narrow_float_arrays_stay_finite_and_inside_their_range(dt, lo, hi):
    @settings(database=None, max_examples=150, derandomize=True)
    @given(a=arrays(dt, (4, 8), min_value=lo, max_value=hi))
    def check(a):
        f = a.astype(np.float64)
        assert np.isfinite(f).all() and f.min() >= lo and f.max() <= hi

    check()


@given(data=st.data(), dt=st.sampled_from(["int8", "uint8", "int16"]))
def test_default_ints_leave_room_for_a_sum_of_two(data, dt):
    a = data.draw(arrays(dt, (3, 5))).astype(np.int64)
    ii = np.iinfo(dt)
    assert (a + a <= ii.max).all() and (a + a >= ii.min).all()


@pytest.mark.parametrize("lo,hi,nd", [(5, 5, 2), (7, 8, 3), (3, 4, 3), (6, 6, 3), (2, 3, 2)])
def test_grids_keep_between_the_instance_bounds(lo, hi, nd):
    @settings(database=None, max_examples=150, derandomize=True)
    @given(g=grids(max_ndim=nd, min_instances=lo, max_instances=hi))
    def check(g):
        assert lo <= grid_size(g) <= hi

    check()


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8"])
def test_special_values_are_reachable(dt):
    seen_bits: set[tuple[bool, object]] = set()

    @settings(database=None, max_examples=120, derandomize=True, phases=[Phase.generate])
    @given(a=arrays(dt, (2, 3), special=True))
    def collect(a):
        f = a.astype(np.float64).ravel()
        seen_bits.update((bool(np.signbit(v)), "nan" if np.isnan(v) else v) for v in f)

    collect()
    for v in special_values(dt):
        vf = float(np.asarray(v).astype(np.float64))
        key = (bool(np.signbit(vf)), "nan" if np.isnan(vf) else vf)
        if np.isnan(vf):
            assert any(k[1] == "nan" for k in seen_bits), "NaN never drawn"
        else:
            assert key in seen_bits, f"{vf!r} never drawn"


def test_special_values_content():
    f32 = [float(v) for v in special_values("float32")]
    assert any(np.isnan(v) for v in f32) and np.inf in f32 and -np.inf in f32
    assert any(v == 0 and np.signbit(v) for v in f32)  # -0.0
    assert float(np.finfo(np.float32).smallest_subnormal) in f32
    assert float(np.finfo(np.float32).max) in f32
    e4fn = [float(v) for v in special_values("float8_e4m3fn")]
    assert not any(np.isinf(v) for v in e4fn)  # no infinity in e4m3fn
    assert 448.0 in e4fn
    assert [int(v) for v in special_values("int8")] == [-128, -1, 0, 1, 127]


@given(g=grids(max_ndim=3, max_instances=12, cores=True, target="trn2"))
def test_grids_stay_within_instance_budget(g):
    assert 1 <= len(g) <= 3
    assert 1 <= grid_size(g) <= 12


def test_grids_reach_multi_core_placements_except_on_trn1():
    g = find(grids(cores=True, target="trn2"), lambda g: "nc(2)" in repr(g[0]), settings=FIND)
    assert grid_size(g) == 2
    with pytest.raises(NoSuchExample):
        find(grids(cores=True, target="trn1"), lambda g: "nc(" in repr(g), settings=FIND)
    assert find(grids(), lambda g: True) == (1,)
