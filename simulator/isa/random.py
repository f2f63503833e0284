"""Executors of the random-number instructions: the current API's per-lane XORWOW generators
(``rng``, ``rand2``) and their state (``set_rng_seed``, ``rand_set_state``,
``rand_get_state``), and ``dropout``'s per-instance stream. See ``nki/isa/random.py`` for what
is modelled and what differs from hardware. Each instance keeps its own engine states (like the
accumulator registers)."""

from __future__ import annotations

import numpy as np

from nki.ir import Instr

from .. import numerics
from ..executors import executes
from ..memory import Ctx
from .common import dst_of, operand, src_const, src_tile, store

WORDS = {"gpsimd": 6, "vector": 24}
LANES = 128
WEYL = np.uint32(362437)  # XORWOW's counter increment
_M32 = 0xFFFFFFFF


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values (spreads a seed over the state words)."""
    z = (z + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def seeded_state(seed: int, engine: str) -> np.ndarray:
    """(128, words) uint32 lane states derived from a 32-bit seed."""
    words = WORDS[engine]
    lane = np.arange(LANES, dtype=np.uint64)[:, None]
    word = np.arange(words, dtype=np.uint64)[None, :]
    tag = np.uint64(1 if engine == "vector" else 2)
    with np.errstate(over="ignore"):
        z = _mix(np.uint64(seed & _M32) * np.uint64(1 << 32) + lane * np.uint64(64) + word)
        z = _mix(z ^ tag)
    state = (z >> np.uint64(32)).astype(np.uint32)
    x = state.reshape(LANES, -1, 6)
    dead = ~x[:, :, :5].any(axis=2)  # xorshift needs a non-zero x0..x4
    x[:, :, 0][dead] = 1
    return state


def _state(ctx: Ctx, engine: str) -> np.ndarray:
    key = f"xorwow.{engine}"
    st = ctx.state.get(key)
    if st is None:  # never seeded: undefined on hardware; a fixed function of the instance here
        base = (ctx.config.shuffle_seed or 0) * 1000003 + 7919 * ctx.core
        for i in ctx.instance:
            base = base * 31 + int(i)
        st = seeded_state(base, engine)
        ctx.state[key] = st
    return st


def xorwow(state: np.ndarray, n: int) -> np.ndarray:
    """``n`` outputs of every lane generator of ``state`` (lanes, 6 * g) uint32, generator
    ``i % g`` producing element i; ``state`` advances in place. Returns (lanes, n) uint32."""
    lanes, g = state.shape[0], state.shape[1] // 6
    x = state.reshape(lanes, g, 6)
    out = np.empty((lanes, n), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for i in range(n):
            k = i % g
            s, t = x[:, k, 0].copy(), x[:, k, 4].copy()
            x[:, k, 1:5] = x[:, k, 0:4].copy()
            t ^= t >> np.uint32(2)
            t ^= t << np.uint32(1)
            t ^= s ^ (s << np.uint32(4))
            x[:, k, 0] = t
            x[:, k, 5] += WEYL
            out[:, i] = t + x[:, k, 5]
    return out


def _draw(ctx: Ctx, instr: Instr) -> np.ndarray:
    dst = dst_of(instr)
    p = dst.shape[0]
    n = int(np.prod(dst.shape[1:], dtype=np.int64))
    st = _state(ctx, instr.attr("engine"))
    lanes = st[:p]
    bits = xorwow(lanes, n)
    st[:p] = lanes
    return bits


@executes("isa", "rng")
def _rng(instr: Instr, ctx: Ctx) -> None:
    bits = _draw(ctx, instr)
    store(instr, ctx, bits.astype(np.int64), bitvec=True)  # the low bits of each draw


@executes("isa", "rand2")
def _rand2(instr: Instr, ctx: Ctx) -> None:
    lo, hi = np.float32(src_const(instr, 0).value), np.float32(src_const(instr, 1).value)
    u = (_draw(ctx, instr).astype(np.float64) * 2.0**-32).astype(np.float32)
    store(instr, ctx, (lo + u * (hi - lo)).astype(np.float32))


@executes("isa", "set_rng_seed")
def _set_rng_seed(instr: Instr, ctx: Ctx) -> None:
    seed = int(np.asarray(ctx.read(src_tile(instr, 0))).astype(np.int64).ravel()[0])
    for engine in WORDS:
        ctx.state[f"xorwow.{engine}"] = seeded_state(seed, engine)


@executes("isa", "rand_set_state")
def _rand_set_state(instr: Instr, ctx: Ctx) -> None:
    src = src_tile(instr, 0)
    p = src.shape[0]
    st = _state(ctx, instr.attr("engine"))
    st[:p] = np.asarray(ctx.read(src)).reshape(p, -1).astype(np.uint32)


@executes("isa", "rand_get_state")
def _rand_get_state(instr: Instr, ctx: Ctx) -> None:
    dst = dst_of(instr)
    st = _state(ctx, instr.attr("engine"))
    store(instr, ctx, st[: dst.shape[0]].astype(np.int64), bitvec=True)


@executes("isa", "dropout")
def _dropout(instr: Instr, ctx: Ctx) -> None:
    data, prob = src_tile(instr, 0), instr.srcs[1]
    p = data.shape[0]
    raw = ctx.read(data).reshape(p, -1)
    rng = ctx.state.get("dropout.rng")
    if rng is None:
        seed = ctx.config.shuffle_seed or 0
        rng = np.random.default_rng([seed, *ctx.instance, ctx.core])
        ctx.state["dropout.rng"] = rng
    pr = operand(ctx, prob, p)
    keep = rng.random(raw.shape, dtype=np.float32) >= pr
    x = raw if raw.dtype.kind in "iu" else numerics.to_compute(raw)
    store(instr, ctx, np.where(keep, x, np.zeros((), dtype=x.dtype)))
