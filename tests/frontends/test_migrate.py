"""The migration assistant (``nki-compat --migrate``): the project's classic tutorials are
rewritten at test time, the rewritten kernels run under the current API and match NumPy (and
the classic originals); what needs a person is reported at its line; untouched code stays byte
for byte; unreadable files are clear errors with exit status 2."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import types
import warnings

import ml_dtypes
import numpy as np
import pytest

import nki
from frontends.migrate import MigrationError, migrate_file, migrate_source

from helpers import ROOT

TUTORIALS = ROOT / "tutorials"


def _migrated(rel: str) -> tuple[types.ModuleType, object]:
    """Migrate a tutorial and import the result as a module (its kernels as written)."""
    m = migrate_file(str(TUTORIALS / rel))
    return _module("migrated_" + rel.replace("/", "_")[:-3], m.new, TUTORIALS / rel), m


def _module(name: str, source: str, path) -> types.ModuleType:
    """``source`` run as module ``name`` whose file is ``path`` (the kernels' source lines)."""
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)
    return mod


def _current(kernel):
    """The migrated kernel, forced to the current API (nki.jit(api="current"))."""
    return nki.jit(kernel.fn, api="current")


def _run_current(kernel, *args):
    k = _current(kernel)
    out = k(*args)
    assert k.last_ir.generation == "current"
    return out


def _line(rel: str, text: str) -> int:
    lines = (TUTORIALS / rel).read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


# ---- the tutorials' kernels, rewritten, under the current API ----------------------------------
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (ml_dtypes.bfloat16, 6e-2)])
def test_layernorm_tutorial_migrated(dtype, tol):
    mod, m = _migrated("layernorm/layernorm.py")
    assert not m.manual, m.report()
    assert "nl.arange" not in m.new and "nisa.memset(dst=eps, value=EPS)" in m.new
    assert "gamma.ap([[0, 128], [1, d]], offset=0)" in m.new  # the broadcast row
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((256, 700)) * 2 + 1).astype(dtype)
    g = rng.uniform(0.5, 1.5, (1, 700)).astype(dtype)
    b = rng.uniform(-1, 1, (1, 700)).astype(dtype)
    got = _run_current(mod.layernorm_kernel, x, g, b).astype(np.float32)
    xf = x.astype(np.float64)
    want = (xf - xf.mean(1, keepdims=True)) / np.sqrt(xf.var(1, keepdims=True) + 1e-5)
    want = want * g.astype(np.float64) + b.astype(np.float64)
    np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max(), rtol=0)
    classic: dict = {}
    exec(compile(m.old, "layernorm_classic.py", "exec"), classic)
    original = nki.jit(classic["layernorm_kernel"].fn, api="classic")(x, g, b)
    np.testing.assert_array_equal(got, original.astype(np.float32))  # the same instructions


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (ml_dtypes.bfloat16, 3e-2)])
def test_causal_attention_tutorial_migrated(dtype, tol):
    mod, m = _migrated("attention/causal_attention.py")
    assert not m.manual, m.report()
    assert "pattern=[[-1, sk]], channel_multiplier=1" in m.new  # i_q >= i_k as a pattern
    rng = np.random.default_rng(5)
    q, k = (rng.standard_normal((64, 128)).astype(dtype) for _ in range(2))
    v = rng.standard_normal((128, 64)).astype(dtype)
    got = _run_current(mod.causal_attention_kernel, q, k, v).astype(np.float32)
    qf, kf, vf = (a.astype(np.float64) for a in (q, k, v))
    s = qf.T @ kf / math.sqrt(64)
    s = np.where(np.tril(np.ones_like(s, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(1, keepdims=True)) @ vf, atol=tol, rtol=0)


def test_tiled_matmul_tutorial_migrated():
    mod, m = _migrated("matmul/tiled_matmul.py")
    assert not m.manual, m.report()
    assert "nisa.nc_matmul(dst=acc, stationary=a_t, moving=b_tile)" in m.new  # acc += matmul
    assert "import nki.isa as nisa\n" in m.new
    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 384)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((384, 1024)).astype(ml_dtypes.bfloat16)
    got = _run_current(mod.tiled_matmul, a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[1] * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(got - want) <= bound + 1e-30)


@pytest.mark.parametrize("rows", [128, 200, 385])
def test_masked_tensor_add_tutorial_migrated(rows):
    # mask=(rows < n) on a ragged last tile becomes min()-bounded slices
    mod, m = _migrated("property_testing/property_testing.py")
    assert "min(TILE_P, n - t * TILE_P)" in m.new and "mask=" not in m.new.split("def main")[0]
    rng = np.random.default_rng(rows)
    a, b = (rng.standard_normal((rows, 40)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(_run_current(mod.tensor_add, a, b), a + b)


def test_off_by_one_mask_keeps_its_bug_when_migrated():
    mod, _ = _migrated("property_testing/property_testing.py")
    a = np.random.default_rng(1).standard_normal((200, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the last row is never written (the bug)
        got = _run_current(mod.tensor_add_off_by_one, a, a)
    np.testing.assert_array_equal(got[:-1], a[:-1] + a[:-1])


def test_sequential_cumsum_tutorial_migrated():
    mod, m = _migrated("property_testing/property_testing.py")
    assert "nisa.tensor_tensor(dst=acc, data1=acc, data2=x_tile, op=nl.add)" in m.new
    x = np.random.default_rng(2).uniform(-1, 1, (512, 8)).astype(np.float32)
    want = np.cumsum(x.reshape(-1, 128, 8), axis=0).reshape(x.shape)
    np.testing.assert_allclose(_run_current(mod.block_cumsum, x), want, rtol=1e-6, atol=1e-6)


# ---- what needs a person -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "rel,texts",
    [
        ("tensor_addition/spmd_tensor_addition.py", ["nl.program_id(0)", "nl.program_id(1)",
                                                     "tensor_add_tile[grid]"]),
        ("custom_op/add_kernel.py", ["nl.program_id(0)", "nl.program_id(1)"]),
        ("property_testing/property_testing.py", ["i = nl.program_id(0)"]),
        ("tensor_addition/spmd_multiple_nc_tensor_addition.py", ["dim0 = nl.spmd_dim(grid_x"]),
    ],
)  # fmt: skip
def test_launch_grids_are_left_to_a_person_at_their_lines(rel, texts):
    m = migrate_file(str(TUTORIALS / rel))
    lines = {n.line for n in m.manual}
    for t in texts:
        assert _line(rel, t) in lines, (t, m.report())
    assert all("kernel[lnc]" in n.reason for n in m.manual), m.report()
    for n in m.manual:
        assert f"{TUTORIALS / rel}:{n.line}: needs a human: " in m.report()


def test_a_leading_par_dim_is_dropped_and_the_kernel_runs(tmp_path):
    # (nl.par_dim(P), F) is the current API's (P, F); a par_dim after a block dim needs a person
    src = (
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "from neuronxcc.nki.language import par_dim\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
        "    z = nl.full((par_dim(a.shape[0]), 64), 2.0, dtype=nl.float32)\n"
        "    t[...] = nl.load(a)\n"
        "    nl.store(out, nl.multiply(t, z))\n"
        "    return out\n"
        "\n"
        "def blocks(a):\n"
        "    return nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
    )
    m = migrate_source(src, "k.py")
    assert "nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)" in m.new
    assert "nl.full((a.shape[0], 64), 2.0" in m.new
    assert "par_dim" not in m.new.split("@nki.jit")[0]  # (its import goes with its uses)
    assert [n.line for n in m.manual] == [14], m.report()
    path = tmp_path / "k.py"
    path.write_text(m.new)
    mod = _module("migrated_par_dim", m.new, path)
    a = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(_run_current(mod.k, a), a * np.float32(2.0))


def test_an_instruction_assigned_into_a_tile_is_a_check_note():
    # classic `t[...] = nisa.op(...)` broadcast a smaller result; the dst= form writes the
    # result's own shape, which the assistant cannot see: the report says to check it
    src = (
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    col = nl.load(a)\n"
        "    t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)\n"
        "    t[...] = nisa.activation(op=nl.exp, data=col)\n"
        "    nl.store(out, t)\n"
        "    return out\n"
    )
    m = migrate_source(src, "k.py")
    assert not m.manual and "nisa.activation(dst=t[...]" in m.new
    assert "k.py:10: check: t[...]: written with dst=" in m.report()
    assert "stride-0 view" in m.report()


def test_a_two_axis_mask_keeps_a_column_operand_to_its_column(tmp_path):
    # mask=(pi < n) & (fi < m) bounds the free axis of each operand by its own size too: a
    # [P, 1] bias broadcast along the masked free axis keeps its one column
    src = (
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "\n"
        "@nki.jit\n"
        "def k(x, b):\n"
        "    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    pi, fi = nl.mgrid[0:128, 0:512]\n"
        "    ip = nl.arange(128)[:, None]\n"
        "    i0 = nl.arange(1)[None, :]\n"
        "    mask = (pi < x.shape[0]) & (fi < x.shape[1])\n"
        "    data = nl.load(x[pi, fi], mask=mask)\n"
        "    col = nl.load(b[ip, i0], mask=(ip < x.shape[0]))\n"
        "    r = nisa.activation(op=nl.exp, data=data, bias=col, scale=1.0, mask=mask)\n"
        "    nl.store(y[pi, fi], r, mask=mask)\n"
        "    return y\n"
    )
    m = migrate_source(src, "k.py")
    assert not m.manual, m.report()
    path = tmp_path / "k.py"
    path.write_text(m.new)
    mod = _module("migrated_mask", m.new, path)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((100, 300)).astype(np.float32)
    b = rng.standard_normal((100, 1)).astype(np.float32)
    np.testing.assert_allclose(_run_current(mod.k, x, b), np.exp(x + b), rtol=1e-6)


def test_report_names_each_unported_construct_with_its_reason():
    src = (
        "import numpy as np\n"
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "from neuronxcc.nki.language import par_dim\n"
        "\n"
        "@nki.jit\n"
        "def k(a, idx):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    buf = nl.ndarray((2, par_dim(128), 64), dtype=a.dtype)\n"
        "    i_p = nl.arange(128)[:, None]\n"
        "    i_f = nl.arange(64)[None, :]\n"
        "    ix = nl.load(idx)\n"
        "    t = nl.load(a[ix[i_p, 0], i_f])\n"
        "    s = nl.loop_reduce(t, op=np.add, loop_indices=())\n"
        "    nl.store(out, helper(t))\n"
        "    return out\n"
        "\n"
        "def helper(t):\n"
        "    return t.astype(nl.float32) * 2.0\n"
    )
    m = migrate_source(src, "k.py")
    by_line = {n.line: n.reason for n in m.manual}
    assert "par_dim" in by_line[4] and "par_dim" in by_line[9]
    assert "indirect DMA" in by_line[13] and "vector_offset" in by_line[13]
    assert "nl.loop_reduce is gone" in by_line[14]
    assert "astype is gone" in by_line[19]  # the helper cannot tell that t is a tile
    assert 10 in by_line and 11 in by_line  # the aranges the indirect load still uses
    assert "import nki\n" in m.new and "import nki.language as nl\n" in m.new


# ---- single rules, each run against NumPy ------------------------------------------------------
CLASSIC_RULES = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


@nki.jit(mode="simulation", platform_target="trn2")
def rules(a, b, acc_in: nt.mutable_tensor):
    n, m = a.shape
    out = nl.ndarray((n, m), dtype=nl.float32, buffer=nl.hbm)
    idx = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
    i_p, i_f = nl.mgrid[0:128, 0:m]
    for t in nl.affine_range((n + 127) // 128):
        x = nl.load(a[t * 128 + i_p, i_f], mask=(n > t * 128 + i_p))
        y = nl.load(b[t * 128 + i_p, i_f], mask=(t * 128 + i_p <= n - 1))
        z = nisa.tensor_tensor(x, y, op=np.multiply, mask=(t * 128 + i_p < n))
        z *= 2.0
        z += y
        nl.store(out[t * 128 + i_p, i_f], value=-z + 1.0, mask=(t * 128 + i_p < n))
    ramp = nisa.iota(nl.arange(128)[:, None] * 3 + nl.arange(64)[None, :] + 5, dtype=nl.int32)
    nl.store(idx, ramp.astype(nl.float32))
    ones = nisa.memset((128, 64), 1.0, nl.float32)
    nisa.dma_copy(dst=acc_in[0:128, 0:64], src=ones, dst_rmw_op=np.add)
    return out, idx


def launch(a, b, acc):
    return nki.simulate_kernel(rules, a, b, acc)
"""


def test_each_rewrite_rule_runs_under_the_current_api():
    m = migrate_source(CLASSIC_RULES, "rules.py")
    assert not m.manual, m.report()
    new = m.new
    for expected in (
        "@nki.jit\n",
        "def rules(a, b, acc_in):",
        "buffer=nl.shared_hbm)",  # a returned nl.hbm output
        "for t in range((n + 127) // 128):",
        "min(128, n - t * 128)",  # the mask n > t*128 + i_p
        "nisa.iota(dst=ramp, pattern=[[1, 64]], offset=5, channel_multiplier=3)",
        "astype_out = nl.ndarray(ramp.shape, dtype=nl.float32, buffer=nl.sbuf)",
        "nisa.tensor_copy(dst=astype_out, src=ramp)",
        "nisa.memset(dst=ones, value=1.0)",
        "nisa.dma_compute(dst=acc_in[0:128, 0:64], srcs=[ones, acc_in[0:128, 0:64]], "
        "reduce_op=nl.add)",
        "nisa.tensor_scalar(dst=z, data=z, op0=nl.multiply, operand0=2.0)",
        "nisa.tensor_tensor(dst=z, data1=z, data2=y, op=nl.add)",
        "nl.add(nl.negative(z[0:min(128, n - t * 128)]), 1.0)",
        "return nki.simulate(rules)(a, b, acc)",
    ):
        assert expected in new, (expected, m.diff())
    ns: dict = {}
    exec(compile(new, "rules.py", "exec"), ns)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((300, 64)).astype(np.float32) for _ in range(2))
    acc = rng.standard_normal((128, 64)).astype(np.float32)
    acc0 = acc.copy()
    out, idx = _run_current(ns["rules"], a, b, acc)
    np.testing.assert_allclose(out, -(a * b * 2 + b) + 1, rtol=1e-6, atol=1e-6)
    p, f = np.mgrid[0:128, 0:64]
    np.testing.assert_array_equal(idx, (3 * p + f + 5).astype(np.float32))
    np.testing.assert_array_equal(acc, acc0 + 1)  # the input written back


# ---- byte-identical where nothing changes ------------------------------------------------------
@pytest.mark.parametrize("rel", ["current_api/softmax.py", "current_api/attention.py"])
def test_current_api_sources_are_left_as_they_are(rel):
    m = migrate_file(str(TUTORIALS / rel))
    assert m.new == m.old and m.diff() == "" and not m.notes


@pytest.mark.parametrize(
    "rel", sorted(str(p.relative_to(TUTORIALS)) for p in TUTORIALS.rglob("*.py"))
)
def test_migrating_twice_changes_nothing_more(rel):
    first = migrate_file(str(TUTORIALS / rel))
    compile(first.new, rel, "exec")
    again = migrate_source(first.new, rel)
    assert again.new == first.new, again.diff()


def test_untouched_code_is_byte_identical():
    rel = "layernorm/layernorm.py"
    m = migrate_file(str(TUTORIALS / rel))
    old, new = m.old.splitlines(keepends=True), m.new.splitlines(keepends=True)
    start = _line(rel, "def layernorm_kernel")
    end = _line(rel, "    return y")
    assert new[:start] == old[:start]  # docstring, imports, decorator, signature
    tail = len(old) - end + 1
    assert new[-tail:] == old[-tail:]  # from `return y` on: reference and main untouched
    assert "  # gamma / beta broadcast to every partition\n" in m.new  # comments kept


# ---- the command line --------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "frontends.compat", "--migrate", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_cli_prints_a_diff_and_exits_0_when_nothing_is_left():
    proc = _cli(str(TUTORIALS / "attention" / "causal_attention.py"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"--- {TUTORIALS / 'attention' / 'causal_attention.py'}\n")
    assert "(current API)" in proc.stdout.splitlines()[1]
    assert "+    nisa.dma_copy(dst=q_sb, src=q)" in proc.stdout


def test_cli_lists_what_needs_a_person_and_exits_1():
    path = TUTORIALS / "tensor_addition" / "spmd_tensor_addition.py"
    proc = _cli(str(path))
    assert proc.returncode == 1, proc.stderr
    line = _line("tensor_addition/spmd_tensor_addition.py", "nl.program_id(1)")
    assert f"{path}:{line}: needs a human: nl.program_id(1): " in proc.stdout


def test_cli_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.py"
    proc = _cli(str(missing))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        f"nki-compat --migrate: cannot read '{missing}': No such file or directory"
    )


def test_cli_syntax_error_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import nki\n\ndef k(a:\n    return a\n")
    proc = _cli(str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"nki-compat --migrate: {bad}:3:")
    assert "syntax error" in proc.stderr and "valid Python" in proc.stderr
    with pytest.raises(MigrationError, match="bad.py:3:"):
        migrate_file(str(bad))


def test_cli_without_a_file_prints_usage():
    proc = _cli()
    assert proc.returncode == 2 and "usage: nki-compat --migrate file.py" in proc.stderr


MIGRATION_EDGES = """
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


@nki.jit
def products(a, b):
    out = nl.ndarray((4, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    bt = nl.load(b)
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(4):
        at = nl.load(a[i * 128:(i + 1) * 128,
                       0:128])
        ps[...] = nisa.nc_matmul(at, bt)
        nl.store(out[i], value=ps)
    return out


@nki.jit
def annotated(a, b):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[0:128, 0:128])
    y = nl.load(b)
    r: nt.tensor[128, 128] = nl.matmul(x, y, transpose_x=True)
    nl.store(out, value=r)
    return out


@nki.jit
def column(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    c = nl.load(a[0:128, 3])
    nl.store(out, value=c)
    return out
"""


def test_migration_of_overwriting_matmuls_annotated_psum_split_indices_and_int_indices():
    m = migrate_source(MIGRATION_EDGES, "edges.py")
    assert "accumulate=False" in m.new  # (ps[...] = nc_matmul replaces ps on every trip)
    assert "0:128,\n" not in m.new  # (the index split over two lines was migrated)
    (note,) = [n for n in m.manual if "integer-indexed axis" in n.reason]
    assert note.line == MIGRATION_EDGES.splitlines().index("    c = nl.load(a[0:128, 3])") + 1
    ns: dict = {}
    exec(compile(m.new, "edges_migrated.py", "exec"), ns)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((512, 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    got = _run_current(ns["products"], a, b)
    want = np.stack([a[i * 128 : (i + 1) * 128].T @ b for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(_run_current(ns["annotated"], a, b), a[:128].T @ b, rtol=1e-4,
                               atol=1e-3)  # fmt: skip
    np.testing.assert_array_equal(nki.jit(ns["column"].fn)(a), a[:128, 3:4])
