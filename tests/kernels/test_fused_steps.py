"""The fused element-wise kernel computes shared steps once (identical steps, the range reduction
of a sine and cosine of one value) and runs chains of scalar ops as two-op instructions
(tensor_scalar, scalar_tensor_tensor), bit for bit what the chain of separate kernels gives;
the range-reduced sin / cos kernels give bit for bit the one-op-per-instruction formula."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.kernels as K
import nki.language as nl
from nki.estimates import trace_launch

F32 = nl.float32
DTYPES = [np.float32, ml_dtypes.bfloat16]
IDS = ["f32", "bf16"]
EDGE = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3.1415927, -3.1415927,
        6.2831855, 1.5707964, 1e4, -1e4, 1e7, 3e38, -3e38, 12345.678, 0.5, -2.0]  # fmt: skip


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def _data(rng: np.random.Generator, shape: tuple[int, int], dt) -> np.ndarray:
    """Normal values of many magnitudes, with the edge values first."""
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 5, shape)
    flat = x.reshape(-1)
    flat[: min(len(EDGE), flat.size)] = EDGE[: flat.size]
    return x.astype(np.float32).astype(dt)


def _separate(program: tuple, ins: list[np.ndarray], outs: tuple) -> list[np.ndarray]:
    """The program's values computed by one separate kernel per step (fp32 inputs, each step
    rounded to its dtype by a cast)."""
    vals: list[np.ndarray] = []
    ins = [K.cast_kernel(x, dtype="float32") for x in ins]
    for op, args, dtype in program:
        kind, _, name = op.partition(":")
        a = [ins[r[1]] if r[0] == "in" else vals[r[1]] if r[0] == "v" else r[1] for r in args]
        if kind == "unary":
            v = K.UNARY_KERNELS[name](a[0])
        elif kind == "cat":  # (a copy: the parts side by side)
            v = np.concatenate(a, axis=1)
        elif kind == "pad":  # (zeros but for the value's columns)
            v = np.zeros((a[0].shape[0], a[2]), a[0].dtype)
            v[:, a[1] : a[1] + a[0].shape[1]] = a[0]
        elif kind == "mean":
            v = K.mean_kernel(a[0])
        elif kind == "binary" and args[1][0] == "s":
            v = K.SCALAR_KERNELS[name](a[0], s=a[1])
        elif kind == "binary" and args[0][0] == "s":
            v = K.SCALAR_KERNELS[name](a[1], s=a[0], reverse=True)
        else:
            v = K.BINARY_KERNELS[name](a[0], a[1])
        vals.append(v if dtype == "float32" else K.cast_kernel(v, dtype=dtype))
    return [vals[o] for o in outs]


def _check(program: tuple, ins: list[np.ndarray], outs: tuple) -> int:
    """Assert the fused values equal the separate kernels' bit for bit; the fused launch's
    number of instructions."""
    got = K.fused_elementwise_kernel(ins, program=program, outs=outs)
    got = [got] if len(outs) == 1 else got  # (one result comes back alone)
    for a, b in zip(got, _separate(program, ins, outs), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))
    ir = trace_launch(K.fused_elementwise_kernel, (ins,), {"program": program, "outs": outs})
    return sum(1 for _ in ir.instructions())


def _name(dt) -> str:
    return "float32" if dt is np.float32 else "bfloat16"


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_rms_norm_chain_is_bitwise_the_separate_kernels_in_fewer_instructions(dt):
    rng = np.random.default_rng(3)
    x, w = _data(rng, (40, 96), dt), _data(rng, (40, 96), dt)
    prog = (
        ("binary:pow", (("in", 0), ("s", 2.0)), "float32"),
        ("mean", (("v", 0),), "float32"),
        ("binary:add", (("v", 1), ("s", 1e-6)), "float32"),
        ("unary:rsqrt", (("v", 2),), "float32"),
        ("binary:mul", (("in", 0), ("v", 3)), "float32"),
        ("binary:mul", (("v", 4), ("in", 1)), _name(dt)),
    )
    # 2 loads, pow, sum, (times 1/n, plus eps), rsqrt, (times rstd, times w), 1 store
    assert _check(prog, [x, w], (5,)) == 8


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_scalar_chains_are_bitwise_the_separate_kernels(dt):
    rng = np.random.default_rng(4)
    x, y = _data(rng, (130, 24), dt), _data(rng, (130, 24), dt)  # two row tiles, ragged
    r = np.abs(_data(rng, (130, 1), dt))
    name = _name(dt)
    prog = (
        ("binary:mul", (("in", 0), ("s", 0.37)), "float32"),  # 0: (x * c
        ("binary:add", (("v", 0), ("s", -1.5)), "float32"),  # 1:  + c)
        ("binary:sub", (("s", 2.0), ("v", 1)), "float32"),  # 2: c - that (a new chain)
        ("binary:div", (("v", 2), ("in", 2)), "float32"),  # 3: / a (N, 1) column
        ("binary:sub", (("in", 1), ("v", 3)), name),  # 4: y - chain: scalar_tensor_tensor
        ("binary:maximum", (("in", 0), ("s", 0.25)), "float32"),  # 5
        ("binary:pow", (("v", 5), ("s", 3.0)), "float32"),  # 6
        ("binary:mul", (("v", 6), ("in", 1)), "float32"),  # 7: chain * y
        ("binary:minimum", (("v", 7), ("s", 8.0)), "float32"),  # 8: a chain, used twice
        ("unary:exp", (("v", 8),), "float32"),  # 9
        ("binary:div", (("s", 1.0), ("v", 8)), "float32"),  # 10: reversed scalar
        ("binary:add", (("v", 9), ("v", 10)), name),  # 11
        ("binary:mul", (("in", 0), ("s", -3.0)), "float32"),  # 12: a stored chain
        ("binary:add", (("v", 12), ("s", 0.5)), name),  # 13
        ("binary:mul", (("in", 1), ("s", 0.5)), "float32"),  # 14
        ("binary:sub", (("in", 0), ("v", 14)), name),  # 15: x - (y * c): one instruction
        ("binary:div", (("s", 3.0), ("in", 1)), "float32"),  # 16
        ("binary:sub", (("v", 16), ("in", 0)), name),  # 17: (c / y) - x: one instruction
    )
    _check(prog, [x, y, r], (4, 11, 12, 13, 15, 17))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_identical_steps_and_sin_cos_of_one_value_compute_once(dt):
    rng = np.random.default_rng(5)
    x, f = _data(rng, (8, 32), dt), _data(rng, (8, 32), dt)
    name = _name(dt)
    prog = (
        ("binary:mul", (("in", 0), ("in", 1)), "float32"),  # 0
        ("binary:mul", (("in", 0), ("in", 1)), "float32"),  # 1: step 0 again
        ("unary:sin", (("v", 0),), name),  # 2
        ("unary:cos", (("v", 1),), name),  # 3: cos of the same angle
        ("binary:mul", (("in", 0), ("in", 1)), name),  # 4: step 0 again in fp32
    )
    n = _check(prog, [x, f], (2, 3, 4))
    ir = trace_launch(K.fused_elementwise_kernel, ([x, f],), {"program": prog, "outs": (2, 3, 4)})
    assert sum(1 for i, _ in ir.instructions() if i.op == "floor") == 1
    # 2 loads, a product, 4 to reduce the angle, sin, 2 for cos, 3 stores; in bf16 a product
    # and its rounding more, and the roundings of sin and cos
    assert n == (13 if dt is np.float32 else 17)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_values_read_only_by_a_cat_or_pad_are_computed_into_it_bitwise(dt):
    rng = np.random.default_rng(7)
    x, y, c = _data(rng, (130, 16), dt), _data(rng, (130, 16), dt), _data(rng, (130, 40), dt)
    name = _name(dt)
    prog = (
        ("unary:neg", (("in", 0),), name),  # 0: read by the cat only
        ("binary:mul", (("in", 0), ("in", 1)), name),  # 1: read by the cat and stored
        ("binary:mul", (("in", 1), ("s", 0.5)), name),  # 2: a scalar op, by the cat only
        ("cat", (("v", 0), ("in", 2), ("v", 1), ("v", 2)), name),  # 3: in 2 loaded into it
        ("unary:exp", (("in", 1),), name),  # 4: read by a pad only
        ("pad", (("v", 4), ("s", 8), ("s", 40)), name),  # 5
    )
    n = _check(prog, [x, y, c], (3, 1, 5))
    # per row tile: 3 loads (each after a zero fill: the last tile is ragged), neg, mul, mul,
    # exp (in bf16 with their 4 roundings), 2 copies (the stored product, the ragged load),
    # the pad's zero fill, 3 stores
    assert n == (16 if dt is np.float32 else 20)


def _old_reduce(x):
    k = nl.floor(nl.add(nl.multiply(x, 1.0 / (2 * math.pi), dtype=F32), 0.5, dtype=F32), dtype=F32)
    r = nl.subtract(x, nl.multiply(k, K.elementwise.TWO_PI_HI, dtype=F32), dtype=F32)
    return nl.subtract(r, nl.multiply(k, K.elementwise.TWO_PI_LO, dtype=F32), dtype=F32)


@nki.jit
def one_op_per_instruction_sin_cos(x):
    """sin and cos of x with each op of the range reduction its own instruction."""
    n, d = x.shape
    s = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    r = _old_reduce(xt)
    nl.store(s, nl.sin(r, dtype=x.dtype))
    half = nl.subtract(math.pi / 2, nl.abs(_old_reduce(xt), dtype=F32), dtype=F32)
    nl.store(c, nl.sin(half, dtype=x.dtype))
    return s, c


@pytest.mark.parametrize("dt", [*DTYPES, np.float16], ids=[*IDS, "f16"])
def test_range_reduced_sin_cos_are_bitwise_one_op_per_instruction(dt):
    x = _data(np.random.default_rng(6), (64, 80), np.float32)
    with np.errstate(over="ignore"):
        x = x.astype(dt)
    s, c = one_op_per_instruction_sin_cos(x)
    np.testing.assert_array_equal(_bits(K.UNARY_KERNELS["sin"](x)), _bits(s))
    np.testing.assert_array_equal(_bits(K.UNARY_KERNELS["cos"](x)), _bits(c))
