"""Executors of nki.language randomness: ``nl.random_seed``, ``nl.rand`` and ``nl.dropout``
(one generator per instance, seeded from its grid position unless set)."""

from __future__ import annotations

import numpy as np

from nki.ir import Access, Const, Instr

from ..executors import executes
from ..memory import Ctx
from .common import is_int_access


def _rng(ctx: Ctx) -> np.random.Generator:
    g = ctx.state.get("nl.rng")
    if g is None:
        g = np.random.Generator(np.random.PCG64([0x6E6B69, *ctx.instance]))
        ctx.state["nl.rng"] = g
    return g


@executes("seed")
def _seed(instr: Instr, ctx: Ctx) -> None:
    src = instr.srcs[0]
    if isinstance(src, Access):
        seed = int(np.asarray(ctx.read(src)).astype(np.int64).ravel()[0])
    else:
        assert isinstance(src, Const)
        seed = int(src.value)
    ctx.state["nl.rng"] = np.random.Generator(np.random.PCG64(seed & 0xFFFFFFFF))


@executes("rand")
def _rand(instr: Instr, ctx: Ctx) -> None:
    assert instr.dst is not None
    vals = _rng(ctx).random(instr.dst.shape, dtype=np.float32)
    ctx.write(instr.dst, vals, ctx.mask(instr), instr.accumulate)


@executes("dropout")
def _dropout(instr: Instr, ctx: Ctx) -> None:
    xa, r = instr.srcs
    assert isinstance(xa, Access) and instr.dst is not None
    exact = is_int_access(xa, ctx)
    x = ctx.value(xa, None, exact_int=exact)
    rate = ctx.value(r)
    u = _rng(ctx).random(xa.shape, dtype=np.float32)
    out = np.where(u < rate, np.zeros((), dtype=x.dtype), x)
    ctx.write(instr.dst, out, ctx.mask(instr), instr.accumulate)
