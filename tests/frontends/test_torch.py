"""PyTorch frontend: both output conventions, dtypes, zero-copy, autograd, custom op."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fe_kernels import (  # noqa: E402
    add_rows,
    add_rows_legacy,
    axpy,
    axpy_bwd,
    dot_pairs,
    dot_pairs_ref,
    mul,
    mul_bwd,
)

import nki.language as nl  # noqa: E402
from frontends import KernelPair  # noqa: E402
from frontends import torch as ft  # noqa: E402
from nki.errors import NKIError, NKITypeError  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dt", DTYPES)
def test_returned_outputs(dt):
    a, b = torch.randn(256, 64, dtype=dt), torch.randn(256, 64, dtype=dt)
    out = add_rows[2](a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == dt
    assert torch.equal(out, a + b)  # torch rounds the fp32 sum to bf16 like the engine


@pytest.mark.parametrize("dt", DTYPES)
def test_legacy_output_written_in_place(dt):
    k = ft.nki_jit(add_rows_legacy)
    a, b = torch.randn(256, 64, dtype=dt), torch.randn(256, 64, dtype=dt)
    out = torch.zeros(256, 64, dtype=dt)
    ptr = out.data_ptr()
    assert k[2](a, b, out) is None
    assert out.data_ptr() == ptr and torch.equal(out, a + b)


def test_decorator_forms():
    k1 = ft.nki_jit(platform_target="trn2")(add_rows_legacy)
    a, b = torch.randn(128, 8), torch.randn(128, 8)
    out = torch.zeros(128, 8)
    k1(a, b, out)
    assert torch.equal(out, a + b)


def test_non_contiguous_inputs_and_outputs():
    a = torch.randn(64, 256).t()  # (256, 64), non-contiguous
    b = torch.randn(256, 64)
    assert torch.equal(add_rows[2](a, b), a + b)
    out = torch.zeros(64, 256).t()
    ft.nki_jit(add_rows_legacy)[2](a, b, out)
    assert torch.equal(out, a + b)


def _scale_and_stash(a, stash):
    """Returns 2 * a and also writes a + 1 into the parameter ``stash`` (a current-API
    kernel writes its inputs back to the caller)."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(stash, nl.add(x, 1.0))
    nl.store(c, nl.multiply(x, 2.0))
    return c


def test_a_written_non_contiguous_parameter_is_copied_back():
    a = torch.randn(16, 8)
    for stash in (torch.zeros(16, 8), torch.zeros(8, 16).t()):
        got = ft.nki_jit(_scale_and_stash)(a, stash)
        assert torch.equal(got, a * 2) and torch.equal(stash, a + 1)


def test_zero_copy_views():
    for dt in DTYPES:
        t = torch.randn(4, 8, dtype=dt)
        arr = ft.to_numpy(t)
        assert arr.__array_interface__["data"][0] == t.data_ptr()
        back = ft.from_numpy(arr)
        assert back.data_ptr() == t.data_ptr() and torch.equal(back, t)
    nc = torch.randn(8, 4).t()
    assert np.array_equal(ft.to_numpy(nc), nc.numpy())


def test_boundary_errors():
    a = torch.randn(128, 8)
    with pytest.raises(NKIError) as e:
        add_rows[1](torch.empty(128, 8, device="meta"), a)
    assert e.value.code == "err_unsupported_device" and "meta" in str(e.value)
    assert e.value.loc.file == __file__
    for bad in (torch.float64, torch.complex64, torch.int64):
        with pytest.raises(NKITypeError) as e:
            add_rows[1](a.to(bad), a.to(bad))
        assert e.value.code == "err_unsupported_dtype" and str(bad) in str(e.value)
    with pytest.raises(NKIError) as e:
        add_rows[0](a, a)
    assert e.value.code == "err_invalid_grid"


@pytest.mark.parametrize("dt", DTYPES)
def test_autograd_function_kernel_backward(dt):
    F = ft.autograd_function(mul, mul_bwd)
    a = torch.randn(128, 64, dtype=dt, requires_grad=True)
    b = torch.randn(128, 64, dtype=dt, requires_grad=True)
    y = (F.apply(a, b) + a).sin().sum()
    y.backward()
    ga, gb = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    y2 = (a * b + a).sin().sum()
    y2.backward()
    assert torch.equal(y, y2) and torch.equal(ga, a.grad) and torch.equal(gb, b.grad)


def test_autograd_function_python_backward_and_arity_error():
    F = ft.autograd_function(add_rows, lambda a, b, g: (g, 2 * g), grid=lambda a, b: (2,))
    a = torch.randn(256, 16, requires_grad=True)
    b = torch.randn(256, 16, requires_grad=True)
    F.apply(a, b).sum().backward()
    assert torch.equal(a.grad, torch.ones_like(a)) and torch.equal(b.grad, 2 * torch.ones_like(b))
    G = ft.autograd_function(mul, lambda a, b, g: g * b)
    x = torch.randn(8, 8, requires_grad=True)
    with pytest.raises(NKITypeError, match="returned 1 gradient"):
        G.apply(x, x).sum().backward()


def test_custom_op_scalar_arguments():
    """Scalar kernel parameters with defaults are optional float/int/bool op arguments, passed
    to the forward kernel and to the backward (a kernel or a Python function)."""
    fwd = ft.custom_op("nkisim_tests::axpy", axpy, axpy_bwd)
    py = ft.custom_op("nkisim_tests::axpy_py", axpy, lambda a, b, g, alpha=1.0: (alpha * g, g))
    a, b = torch.randn(128, 16), torch.randn(128, 16)
    schema = str(fwd._opoverload._schema)
    assert "Tensor b, float alpha=1." in schema and "bool negate=False" in schema, schema
    torch.testing.assert_close(fwd(a, b), a + b)
    torch.testing.assert_close(fwd(a, b, 2.5), 2.5 * a + b)
    torch.testing.assert_close(fwd(a, b, alpha=0.5, negate=True), -(0.5 * a + b))
    for op in (fwd, py):
        x = a.clone().requires_grad_()
        y = b.clone().requires_grad_()

        def f(x, y, op=op):
            return (op(x, y, alpha=3.0) * y).sum()

        for fn in (f, torch.compile(f, fullgraph=True)):
            x.grad = y.grad = None
            fn(x, y).backward()
            torch.testing.assert_close(x.grad, 3.0 * b)  # d/dx sum((3x + y) y) = 3y
            torch.testing.assert_close(y.grad, 3.0 * a + 2.0 * b, rtol=1e-5, atol=1e-5)
    m = fwd(torch.empty(128, 16, device="meta"), torch.empty(128, 16, device="meta"), 2.0)
    assert m.shape == (128, 16) and m.device.type == "meta"


def test_custom_op_eager_and_compiled():
    op = ft.custom_op("nkisim_tests::mul_pair", KernelPair(mul, mul_bwd))
    a = torch.randn(128, 32, requires_grad=True)
    b = torch.randn(128, 32, requires_grad=True)

    def f(a, b):
        return (op(a, b) * a).sum()

    def ref(a, b):
        return (a * b * a).sum()

    for fn in (f, torch.compile(f, fullgraph=True)):
        a.grad = b.grad = None
        y = fn(a, b)
        y.backward()
        ga, gb = a.grad.clone(), b.grad.clone()
        a.grad = b.grad = None
        ref(a, b).backward()
        torch.testing.assert_close(y, ref(a, b), rtol=1e-5, atol=1e-4)  # sum order
        torch.testing.assert_close(ga, a.grad)
        torch.testing.assert_close(gb, b.grad)
    # fake (meta) implementation from the kernel's trace
    m = op(torch.empty(128, 32, device="meta"), torch.empty(128, 32, device="meta"))
    assert m.shape == (128, 32) and m.device.type == "meta"


def test_lists_of_tensors_at_any_depth_are_arguments():
    # [(a, b), ...] pairs and a flat list of torch tensors (one not contiguous): each tensor is
    # one of the kernel's HBM tensors; the result is a torch tensor
    g = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randn(128, 32, generator=g), torch.randn(32, 128, generator=g).T) for _ in range(3)
    ]
    extra = [torch.randn(128, 32, generator=g, dtype=torch.bfloat16) for _ in range(2)]
    want = dot_pairs_ref(
        [tuple(x.numpy() for x in p) for p in pairs], [e.float().numpy() for e in extra]
    )
    got = dot_pairs(pairs, extra)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)


def _scale(a, alpha=2.0):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, nl.multiply(nl.load(a), alpha))
    return c


def _exp(a):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, nl.exp(nl.load(a)))
    return c


def _prod_and_sum(a, b):
    p = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(p, nl.multiply(x, y))
    nl.store(s, nl.add(x, y))
    return p, s


def test_autograd_function_takes_python_scalar_arguments():
    scale = ft.autograd_function(ft.nki_jit(_scale), lambda a, alpha, g: (g * alpha, None))
    a = torch.rand(64, 32, requires_grad=True)
    y = scale.apply(a, 3.0)
    y.sum().backward()
    assert torch.allclose(y, 3 * a.detach()) and torch.equal(a.grad, torch.full_like(a, 3.0))


def test_custom_op_uses_the_outputs_of_a_ready_kernel_pair():
    exp_pair = KernelPair(ft.nki_jit(_exp), lambda a, y, g: (g * y,), save_outputs=True)
    x = torch.rand(16, 8, requires_grad=True)
    ft.custom_op("nkisim_tests::exp_pair_saved", exp_pair)(x).sum().backward()
    assert torch.allclose(x.grad, torch.exp(x.detach()))
    pair = KernelPair(
        ft.nki_jit(_prod_and_sum), lambda a, b, gp, gs: (gp * b + gs, gp * a + gs), num_outputs=2
    )
    a, b = torch.rand(16, 8), torch.rand(16, 8)
    p, s = ft.custom_op("nkisim_tests::prod_and_sum_pair", pair)(a, b)
    assert torch.allclose(p, a * b) and torch.allclose(s, a + b)


def test_a_launch_grid_survives_partial_and_default_grids():
    # autograd_function of nki.jit(k[2]) / functools.partial(k[2], ...) launches the grid (2,)
    import functools

    from fe_kernels import add_rows, scale_rows

    import nki

    a, b = torch.randn(256, 64), torch.randn(256, 64)
    f = ft.autograd_function(nki.jit(add_rows[2]), lambda a, b, g: (g, g))
    torch.testing.assert_close(f.apply(a, b), a + b, rtol=0, atol=0)
    g = ft.autograd_function(functools.partial(scale_rows[2], alpha=3.0), lambda a, g: (3 * g,))
    torch.testing.assert_close(g.apply(a), a * 3.0, rtol=0, atol=0)


def test_custom_op_takes_a_non_finite_scalar_default():
    # a torch schema's numbers are finite: hi=inf is registered as an optional argument
    import math

    import nki

    @nki.jit
    def clamp_max(a, hi=math.inf):
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(c, value=nl.minimum(nl.load(a), hi))
        return c

    op = ft.custom_op("nki_test_inf::clamp_max", clamp_max)
    x = torch.randn(128, 64)
    torch.testing.assert_close(op(x), x, rtol=0, atol=0)
    torch.testing.assert_close(op(x, hi=0.5), x.clamp(max=0.5), rtol=0, atol=0)


def test_a_written_argument_whose_elements_share_memory_is_an_error():
    import nki

    @nki.jit
    def legacy_add(a, b, c):
        nl.store(c, value=nl.add(nl.load(a), nl.load(b)))

    a, b = torch.randn(128, 64), torch.randn(128, 64)
    with pytest.raises(NKIError, match=r"argument 'c', a view whose elements share memory") as e:
        legacy_add(a, b, torch.zeros(1, 64).expand(128, 64))
    assert e.value.code == "err_readonly_output"
    assert e.value.loc.file == __file__
