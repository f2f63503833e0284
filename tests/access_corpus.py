"""Kernels for the access model's tests (``tests/core/test_access_model.py``): one per operand
kind, and a corpus runner.

Run as a script (``python tests/access_corpus.py OUT``), it runs a broad corpus of kernels on
the reference interpreter and pickles, per traced kernel, the IR and what the interpreter
really read, wrote and touched (by storage tensor) for each instruction it executed: the
Python examples of the README and the site's pages and the tutorials that need no framework,
one valid call of every ``nki.isa`` instruction in each of its calling forms
(``benchmarks/fuzz_invalid.py``'s argument builder with no mistake planted) and the kernels
below. It runs in a process of its own: the snippets and tutorials may change process-wide
settings (environment, hypothesis profiles)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import os
import pickle
import re
import runpy
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt

ROOT = Path(__file__).resolve().parents[1]

# ---- one kernel per operand kind ---------------------------------------------------------------


def k_direct(a, b):
    """Direct accesses: two loads, an add of their tiles, a store."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


def k_indirect(table: nt.mutable_tensor, idx):
    """Indirect accesses: a gather of table rows named by an index tile, and a scatter back."""
    i_p = nl.arange(8)[:, None]
    i_f = nl.arange(4)[None, :]
    ix = nl.load(idx[i_p, 0])
    rows = nl.load(table[ix, i_f])
    nl.store(table[ix, i_f], value=nl.multiply(rows, 2.0))
    return table


def k_atomic(table: nt.mutable_tensor, idx, vals):
    """An atomic scatter-add through an index tile."""
    i_p = nl.arange(8)[:, None]
    i_f = nl.arange(4)[None, :]
    ix = nl.load(idx[i_p, 0])
    nl.atomic_rmw(table[ix, i_f], value=nl.load(vals), op=np.add)
    return table


def k_atomic_direct(a, out: nt.mutable_tensor):
    """Every grid instance atomically adds its tile into the same elements of ``out``."""
    nl.atomic_rmw(out[0:128, 0:4], value=nl.load(a[0:128, 0:4]), op=np.add)
    return out


def k_atomic_loop(a, out: nt.mutable_tensor):
    """Every affine_range iteration atomically adds into the same elements of ``out``."""
    for _ in nl.affine_range(4):
        nl.atomic_rmw(out[0:128, 0:4], value=nl.load(a[0:128, 0:4]), op=np.add)
    return out


def k_accumulate(acc: nt.mutable_tensor, x, w):
    """Accumulating writes: a DMA with ``dst_rmw_op`` and ``+=`` of a matmul into PSUM."""
    t = nl.load(x)
    nisa.dma_copy(dst=acc[0:64, 0:32], src=t, dst_rmw_op=np.add)
    res = nl.zeros((32, 32), dtype=nl.float32, buffer=nl.psum)
    res += nl.matmul(nl.load(w), t, transpose_x=True)
    nl.store(acc[64:96, 0:32], value=res)
    return acc


def k_reduce_res(x):
    """A secondary output in an attribute: ``reduce_res`` of an activation."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nisa.activation_reduce(nl.exp, nl.load(x), reduce_op=nl.add, reduce_res=acc, scale=0.5)
    nl.store(out, r)
    nl.store(red, acc)
    return out, red


def k_match_replace(x):
    """A secondary output in an attribute: the matched indices ``dst_idx`` of
    ``nisa.nc_match_replace8``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    found = nl.ndarray((x.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    t = nl.load(x)
    idx = nl.ndarray((x.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
    r = nisa.nc_match_replace8(data=t, vals=nisa.max8(src=t), imm=-1000.0, dst_idx=idx)
    nl.store(out, r)
    nl.store(found, idx)
    return out, found


def _sbuf_copy(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    return t


def k_topk(src, vals0, idx0):
    """A second destination in an attribute: ``idx_dst`` of ``nisa.topk``."""
    vout = nl.ndarray(vals0.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    iout = nl.ndarray(idx0.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    s, v, i = _sbuf_copy(src), _sbuf_copy(vals0), _sbuf_copy(idx0)
    nisa.topk(v, i, s, 16)
    nisa.dma_copy(vout, v)
    nisa.dma_copy(iout, i)
    return vout, iout


def k_quantize_mx(x):
    """A secondary output in an attribute: the scales ``dst_scale`` of ``nisa.quantize_mx``."""
    p, f = x.shape
    rows = 32 * (p // 32 - 1) + 4
    q_out = nl.ndarray((p, f // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
    s_out = nl.ndarray((rows, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.shared_hbm)
    q = nl.ndarray((p, f // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.ndarray((rows, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.memset(s, 1.0)
    nisa.quantize_mx(q, _sbuf_copy(x), s)
    nisa.dma_copy(q_out, q)
    nisa.dma_copy(s_out, s)
    return q_out, s_out


def k_select_reduce(pred, on_true):
    """``reduce_res`` of the destination-first ``nisa.select_reduce``."""
    red = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(on_true.shape, dtype=on_true.dtype, buffer=nl.sbuf)
    m = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    p, t, reset = nl.load(pred), nl.load(on_true), nisa.reduce_cmd.reset_reduce
    nisa.select_reduce(
        dst=dst, predicate=p, on_true=t, on_false=-1.0, reduce_res=m, reduce_cmd=reset
    )
    nl.store(red, m)
    return red


def k_lnc_exchange(a):
    """LNC=2: each core stores its half, swaps tiles with the other (``nisa.sendrecv``), meets
    it at a barrier and reads the other core's half back."""
    pid = nl.program_id(0)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    mine = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[pid * 128 : pid * 128 + 128, :])
    nisa.sendrecv(mine, theirs, 1 - pid, 1 - pid, 0)
    nisa.dma_copy(dst=out[pid * 128 : pid * 128 + 128, :], src=theirs)
    nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=mine, src=out[(1 - pid) * 128 : (2 - pid) * 128, :])
    return out


def k_masked(a):
    """A masked store (its mask selects rows by an affine condition) and a masked add."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < a.shape[0]))
    u = nl.add(t, 1.0, mask=(i_p < a.shape[0]))
    nl.store(out[i_p, i_f], value=u, mask=(i_p < a.shape[0]))
    return out


@nki.jit(api="classic")  # kernel[2]: a grid axis (a current-API kernel would run on two cores)
def k_loops(a):
    """Symbols of every kind: a grid axis, affine and sequential loops, a device loop."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    j = nl.program_id(0)
    for i in nl.affine_range(2):
        for k in nl.sequential_range(1, 4, 2):
            t = nl.load(a[i * 64 : i * 64 + 64, j * 8 + k : j * 8 + k + 1])
            nl.store(out[i * 64 : i * 64 + 64, j * 8 + k : j * 8 + k + 1], value=t)
    return out


def k_per_core_loops(a):
    """LNC=2 (``kernel[2]``): core 0 copies two 32-row tiles, core 1 four (a Python branch on
    the program id: one trace per core)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    first, n = (0, 2) if nl.program_id(0) == 0 else (64, 4)
    for i in nl.affine_range(n):
        t = nl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[first + i * 32 : first + i * 32 + 32, :])
        nisa.dma_copy(dst=out[first + i * 32 : first + i * 32 + 32, :], src=t)
    return out


def k_device_loop(x, n):
    """A device loop whose trip count is read into a register at run time: row i of the
    result is exp(row i of x) for the first n[0, 0] rows, 0 below."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.zeros(x.shape, dtype=nl.float32))
    trips = nisa.register_alloc()
    nisa.register_load(trips, nl.load(n))
    pattern = [[x.shape[1], 1], [1, x.shape[1]]]

    def body(i):
        row = nl.exp(nl.load(x.ap(pattern, offset=0, scalar_offset=i)))
        nl.store(out.ap(pattern, offset=0, scalar_offset=i), value=row)

    nl.fori_loop(0, trips, body)
    return out


def k_current_tiles(a_t, b):
    """Current API in symbolic loops: a tiled matmul accumulating over K in a PSUM tile
    (accumulate=None), its Tensor-engine transpose, and a row softmax of the product."""
    k_dim, m_dim = a_t.shape
    n = b.shape[1]
    out = nl.ndarray((m_dim, n), dtype=nl.float32, buffer=nl.shared_hbm)
    out_t = nl.ndarray((n, m_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        acc = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.psum)
        for k in range(k_dim // 128):
            at = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, n), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
            nisa.dma_copy(dst=bt, src=b[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
        res = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        tp = nl.ndarray((n, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=tp, data=res, engine=nisa.tensor_engine)
        tr = nl.ndarray((n, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tr, src=tp)
        nisa.dma_copy(dst=out_t[:, m * 128 : (m + 1) * 128], src=tr)
        neg, total, inv = (nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf) for _ in "abc")
        e = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg, op=nl.maximum, data=res, axis=1, negate=True)
        nisa.activation(dst=e, op=nl.exp, data=res, bias=neg)
        nisa.tensor_reduce(dst=total, op=nl.add, data=e, axis=1)
        nisa.reciprocal(dst=inv, data=total)
        nisa.tensor_scalar(dst=e, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, :], src=e)
    return out, out_t


def k_kv_scatter(cache, new, idx):
    """Current API: rows of an input written through an indirect destination, then a ragged
    copy of the cache whose loop is unrolled for its min()."""
    p, d = new.shape
    t = nl.ndarray((p, d), dtype=new.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=new)
    it = nl.ndarray((p, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=it, src=idx)
    nisa.dma_copy(dst=cache.ap([[d, p], [1, d]], offset=0, vector_offset=it, indirect_dim=0), src=t)
    rows = cache.shape[0]
    out = nl.ndarray(cache.shape, dtype=cache.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range((rows + 127) // 128):
        n = min(128, rows - r * 128)
        buf = nl.ndarray((128, d), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf[0:n, :], src=cache[r * 128 : r * 128 + n, :])
        nisa.dma_copy(dst=out[r * 128 : r * 128 + n, :], src=buf[0:n, :])
    return out


RNG = np.random.default_rng(22)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# (name, kernel, grid, target, arguments)
KERNELS: list[tuple[str, Any, Any, str, tuple]] = [
    ("direct", k_direct, None, "trn2", (_f32(128, 64), _f32(128, 64))),
    ("indirect", k_indirect, None, "trn2",
     (_f32(16, 4), np.array([[3], [1], [7], [0], [12], [5], [9], [14]], np.int32))),
    ("atomic", k_atomic, None, "trn2",
     (_f32(16, 4), np.array([[3], [1], [3], [0], [12], [5], [3], [14]], np.int32),
      _f32(8, 4))),
    ("atomic_direct", k_atomic_direct, 4, "trn2", (_f32(128, 4), np.zeros((128, 4), np.float32))),
    ("atomic_loop", k_atomic_loop, None, "trn2", (_f32(128, 4), np.zeros((128, 4), np.float32))),
    ("accumulate", k_accumulate, None, "trn2", (_f32(96, 48), _f32(64, 32), _f32(64, 32))),
    ("reduce_res", k_reduce_res, None, "trn2", (_f32(64, 100),)),
    ("topk", k_topk, None, "trn2",
     (_f32(32, 64).astype(nl.bfloat16), _f32(32, 16).astype(nl.bfloat16),
      np.zeros((32, 16), np.uint32))),
    ("quantize_mx", k_quantize_mx, None, "trn3", ((_f32(64, 16) * 3).astype(nl.bfloat16),)),
    ("match_replace", k_match_replace, None, "trn2", (_f32(32, 40),)),
    ("select_reduce", k_select_reduce, None, "trn2",
     ((RNG.random((32, 24)) > 0.3).astype(np.uint8), _f32(32, 24))),
    ("lnc_exchange", k_lnc_exchange, 2, "trn2", (_f32(256, 16),)),
    ("masked", k_masked, None, "trn2", (_f32(100, 24),)),
    ("loops", k_loops, 2, "trn2", (_f32(128, 16),)),
    ("per_core_loops", k_per_core_loops, 2, "trn2", (_f32(192, 16),)),
    ("device_loop", k_device_loop, None, "trn2",
     (_f32(8, 64), np.array([[5]], dtype=np.int32))),
    ("current_tiles", k_current_tiles, None, "trn2", (_f32(256, 256), _f32(256, 64))),
    ("kv_scatter", k_kv_scatter, None, "trn2",
     (_f32(300, 16), _f32(4, 16), np.array([[3], [290], [0], [131]], np.int32))),
]  # fmt: skip


def arguments(name: str) -> list[np.ndarray]:
    """Fresh copies of the arguments of kernel ``name`` of ``KERNELS``."""
    return [np.copy(a) for a in next(k for k in KERNELS if k[0] == name)[4]]


def launch(name: str) -> Any:
    """The kernel ``name`` of ``KERNELS`` launched on its arguments (its IR: ``last_ir``)."""
    _, fn, grid, target, _ = next(k for k in KERNELS if k[0] == name)
    kernel = nki.jit(fn).configure(target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a scatter leaves outputs partly unwritten)
        (kernel if grid is None else kernel[grid])(*arguments(name))
    return kernel


# ---- the corpus --------------------------------------------------------------------------------

_FRAMEWORKS = re.compile(r"^\s*(import|from)\s+(torch|jax|frontends)\b", re.M)


def _doc_snippets() -> list[tuple[str, str]]:
    """(label, code) of the runnable ```python blocks of the README and the site's pages that
    need no framework."""
    from snippets import README, label, site_pages, snippets

    return [
        (label(path, line), "\n" * (line - 1) + code)
        for path in (README, *site_pages())
        for line, code in snippets(path.read_text())[0]
        if not _FRAMEWORKS.search(code)
    ]


def _tutorials() -> list[Path]:
    return sorted(
        p
        for p in (ROOT / "tutorials").rglob("*.py")
        if "__main__" in p.read_text() and not _FRAMEWORKS.search(p.read_text())
    )


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _instruction_calls() -> list[tuple[str, Any]]:
    """(label, call) of valid calls of the nki.isa instructions: every classic one as
    ``tests/isa/test_spec.py`` calls it (``_result_of``), and each instruction in each calling
    form with the plausible arguments of ``benchmarks/fuzz_invalid.py`` where they fit."""
    import nki.isa_spec as isa_spec

    sys.path.insert(0, str(ROOT / "tests"))
    spec_tests = _module(ROOT / "tests" / "isa" / "test_spec.py")
    out: list[tuple[str, Any]] = [
        (f"nisa.{name} (tests/isa/test_spec.py)", lambda n=name: spec_tests._result_of(n))
        for name in spec_tests._RESULT_CALLS
    ]
    fuzz = _module(ROOT / "benchmarks" / "fuzz_invalid.py")
    args = (np.ones((128, 64), np.float32), np.ones((128, 64), np.float32))
    for form in (isa_spec.CLASSIC, isa_spec.CURRENT):
        for name in isa_spec.names(form):
            if hasattr(nisa, name):
                p = dict(instr=name, form=form, mut="none", tp=128, cg=16, rows=128, pick=0,
                         seed=0, unknown="")  # fmt: skip
                kernel = nki.jit(fuzz.build_args(p).fn).configure(target="trn3")
                out.append((f"nisa.{name} ({form})", lambda k=kernel: k(*args)))
    return out


class _Observer:
    """What the reference interpreter reads, writes and touches (``Ctx.array``) per executed
    instruction, by storage tensor."""

    def __init__(self) -> None:
        self.by_instr: dict[int, tuple[set[str], set[str], set[str]]] = {}
        self.current: list[Any] = []

    def install(self) -> None:
        from simulator import interpreter, memory

        run_one = interpreter._exec_instr

        def exec_instr(instr: Any, ctx: Any) -> None:
            self.current.append(instr)
            try:
                run_one(instr, ctx)
            finally:
                self.current.pop()

        interpreter._exec_instr = exec_instr
        for method, slot in (("read", 0), ("write", 1), ("array", 2)):
            setattr(memory.Ctx, method, self._spy(getattr(memory.Ctx, method), slot))

    def _spy(self, fn: Any, slot: int) -> Any:
        def spied(ctx: Any, what: Any, *args: Any, **kwargs: Any) -> Any:
            if self.current:
                sets = self.by_instr.setdefault(id(self.current[-1]), (set(), set(), set()))
                sets[slot].add(ctx.ir.storage_of(what if isinstance(what, str) else what.tensor))
            return fn(ctx, what, *args, **kwargs)

        return spied


def collect() -> list[tuple[str, Any, list]]:
    """(source, IR, per instruction of ``ir.instructions()``: (read, written, touched) storage
    tensors, None when it did not run) of every kernel launched by the corpus."""
    jit_module = importlib.import_module("nki.jit")
    observer = _Observer()
    observer.install()
    launched: list[tuple[str, Any]] = []
    label = [""]
    run_launch = jit_module.simulator_launch

    def recording(ir: Any, arguments: Any, config: Any) -> Any:
        if all(ir is not seen for _, seen in launched):
            launched.append((label[0], ir))
        return run_launch(ir, arguments, dataclasses.replace(config, backend="numpy"))

    jit_module.simulator_launch = recording
    sources: list[tuple[str, Any]] = list(_doc_snippets())
    sources += [(str(p.relative_to(ROOT)), p) for p in _tutorials()]
    sources += _instruction_calls()
    sources += [(f"access_corpus.{k[0]}", k[0]) for k in KERNELS]
    for label[0], what in sources:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if isinstance(what, str) and what in {k[0] for k in KERNELS}:
                    launch(what)
                elif isinstance(what, str):
                    page = str(ROOT / label[0].rpartition(":")[0])  # the snippet's own file
                    exec(compile(what, page, "exec"), {"__name__": "__snippet__"})
                elif isinstance(what, Path):
                    sys.path.insert(0, str(what.parent))
                    runpy.run_path(str(what), run_name="__main__")
                else:
                    what()
            except (SystemExit, Exception):  # noqa: BLE001 - a source that fails adds no kernel
                pass
    out = []
    for source, ir in launched:
        seen = [observer.by_instr.get(id(instr)) for instr, _ in ir.instructions()]
        out.append((source, ir, seen))
    return out


if __name__ == "__main__":
    os.environ.setdefault("NKI_HYPOTHESIS_PROFILE", "ci")
    corpus = collect()
    with open(sys.argv[1], "wb") as f:
        pickle.dump(corpus, f)
