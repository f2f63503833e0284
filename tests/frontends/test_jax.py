"""JAX frontend: nki_call eagerly / under jit / vmap, custom_vjp gradients, boundary errors."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from fe_kernels import add_rows, add_rows_legacy, dot_pairs, dot_pairs_ref, mul, mul_bwd  # noqa: E402

import nki.language as nl  # noqa: E402
from frontends import jax as fj  # noqa: E402
from nki import jit as nki_jit  # noqa: E402
from nki.errors import NKIError, NKIShapeError, NKITypeError  # noqa: E402

DTYPES = [jnp.float32, jnp.bfloat16]


def _arr(shape, dt, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_nki_call_eager_jit_legacy(dt):
    a, b = _arr((256, 64), dt, 0), _arr((256, 64), dt, 1)
    sds = jax.ShapeDtypeStruct(a.shape, a.dtype)
    out = fj.nki_call(add_rows, a, b, grid=(2,), out_shape=sds)
    assert out.dtype == dt and np.array_equal(out, a + b)
    jitted = jax.jit(lambda x, y: fj.nki_call(add_rows, x, y, grid=(2,), out_shape=sds) * x)
    assert np.array_equal(jitted(a, b), (a + b) * a)
    legacy = fj.nki_call(add_rows_legacy, a, b, grid=(2,), out_shape=sds)
    assert np.array_equal(legacy, a + b)
    # an @nki.jit kernel called directly with jax arrays (out_shape found by tracing)
    assert np.array_equal(jax.jit(lambda x, y: add_rows[2](x, y))(a, b), a + b)


def test_nki_call_vmap():
    x = _arr((3, 128, 32), jnp.float32, 2)
    y = _arr((128, 32), jnp.float32, 3)
    f = jax.vmap(lambda p, q: fj.nki_call(mul, p, q), in_axes=(0, None))
    assert np.array_equal(f(x, y), x * y)
    g = jax.jit(jax.vmap(lambda p, q: fj.nki_call(mul, p, q), in_axes=(2, 2), out_axes=2))
    z = jnp.moveaxis(x, 0, 2)
    assert np.array_equal(g(z, z), z * z)


@pytest.mark.parametrize("dt", DTYPES)
def test_custom_vjp_grad_matches_native(dt):
    f = fj.custom_vjp(mul, mul_bwd)
    a, b = _arr((128, 64), dt, 4), _arr((128, 64), dt, 5)

    def loss(a, b):
        return jnp.sum(jnp.sin(f(a, b) + a))

    def ref(a, b):
        return jnp.sum(jnp.sin(a * b + a))

    assert np.array_equal(loss(a, b), ref(a, b))
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
    want = jax.grad(ref, argnums=(0, 1))(a, b)
    for g, w in zip(got, want):
        assert g.dtype == dt and np.array_equal(g, w)


def test_custom_vjp_python_backward():
    f = fj.custom_vjp(add_rows, lambda a, b, g: (g, None), grid=lambda a, b: (a.shape[0] // 128,))
    a, b = _arr((256, 8), jnp.float32, 6), _arr((256, 8), jnp.float32, 7)
    ga, gb = jax.grad(lambda a, b: jnp.sum(f(a, b) * 3.0), argnums=(0, 1))(a, b)
    assert np.array_equal(ga, jnp.full_like(a, 3.0)) and np.array_equal(gb, jnp.zeros_like(b))


def test_boundary_errors():
    a = _arr((128, 8), jnp.float32, 8)
    with pytest.raises(NKIShapeError) as e:
        fj.nki_call(mul, a, a, out_shape=jax.ShapeDtypeStruct((128, 4), jnp.float32))
    assert e.value.code == "err_out_shape_mismatch" and "[128, 4]" in str(e.value)
    assert e.value.loc.file == __file__
    with pytest.raises(NKIShapeError, match="bfloat16"):
        fj.nki_call(mul, a, a, out_shape=jax.ShapeDtypeStruct((128, 8), jnp.bfloat16))
    with pytest.raises(NKIShapeError, match="declares 2 output"):
        sds = jax.ShapeDtypeStruct((128, 8), jnp.float32)
        fj.nki_call(mul, a, a, out_shape=(sds, sds))
    for grid in (2, (0,), (2, -1), (1.5,), (True,), ()):
        with pytest.raises(NKIError) as e:
            fj.nki_call(add_rows, a, a, grid=grid)
        assert e.value.code == "err_invalid_grid" and "tuple of positive ints" in str(e.value)
    c = a.astype(jnp.complex64)
    with pytest.raises(NKITypeError) as e:
        fj.nki_call(mul, c, c)
    assert e.value.code == "err_unsupported_dtype" and "complex64" in str(e.value)
    with pytest.raises(NKIError, match="custom_vjp"):
        jax.grad(lambda x: jnp.sum(fj.nki_call(mul, x, x)))(a)


def test_lists_of_arrays_at_any_depth_are_operands():
    # [(a, b), ...] pairs and a flat list: each array is one of the kernel's HBM tensors,
    # eagerly, under jit (tracers) and called on the kernel directly
    pairs = [
        (_arr((128, 32), jnp.float32, i), _arr((128, 32), jnp.float32, 9 + i)) for i in range(3)
    ]
    extra = [_arr((128, 32), jnp.float32, 20), _arr((128, 32), jnp.float32, 21)]
    want = dot_pairs_ref([tuple(map(np.asarray, p)) for p in pairs], [np.asarray(e) for e in extra])
    np.testing.assert_array_equal(fj.nki_call(dot_pairs, pairs, extra), want)
    np.testing.assert_array_equal(
        jax.jit(lambda p, e: fj.nki_call(dot_pairs, p, e))(pairs, extra), want
    )
    np.testing.assert_array_equal(jax.jit(lambda p, e: dot_pairs(p, e))(pairs, extra), want)


def test_a_launch_grid_survives_partial_and_default_grids():
    # nki.jit(k[2]) and functools.partial(k[2], ...) keep the grid (2,): every row is computed
    import functools

    from fe_kernels import scale_rows

    import nki

    a, b = _arr((256, 64), jnp.float32, 0), _arr((256, 64), jnp.float32, 1)
    assert np.array_equal(fj.nki_call(nki.jit(add_rows[2]), a, b), a + b)
    got = fj.nki_call(functools.partial(scale_rows[2], alpha=3.0), a)
    assert np.array_equal(got, a * np.float32(3.0))
    with pytest.raises(NKIError, match="already launched over grid"):
        fj.nki_call(nki.jit(add_rows[2]), a, b, grid=(2,))


@nki_jit
def _val_and_sign(a):
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(y, value=nl.multiply(x, 2.0))
    nl.store(m, value=nl.greater(x, 0.0, dtype=nl.int32))
    return y, m


@nki_jit
def _val_and_sign_bwd(a, gy, gm):
    # gm: the int output's cotangent, zeros of its dtype (JAX's float0 is no kernel dtype)
    ga = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(ga, value=nl.add(nl.multiply(nl.load(gy), 2.0), nl.load(gm)))
    return ga


@nki_jit
def _sum_list(xs):
    c = nl.ndarray(xs[0].shape, dtype=xs[0].dtype, buffer=nl.shared_hbm)
    acc = nl.load(xs[0])
    for x in xs[1:]:
        acc = nl.add(acc, nl.load(x))
    nl.store(c, value=acc)
    return c


def test_custom_vjp_with_an_int_output_and_a_list_argument():
    a = _arr((128, 64), jnp.float32, 3)
    f = fj.custom_vjp(_val_and_sign, _val_and_sign_bwd)
    g = jax.grad(lambda x: f(x)[0].sum())(a)
    assert np.array_equal(g, np.full(a.shape, 2.0, np.float32))
    s = fj.custom_vjp(_sum_list, lambda xs, g: ([g for _ in xs],))
    g = jax.grad(lambda x: s([x, 2 * x]).sum())(a)
    assert np.array_equal(g, np.full(a.shape, 3.0, np.float32))
    bad = fj.custom_vjp(_sum_list, lambda xs, g: ([g],))
    with pytest.raises(NKIError, match="returned 1 gradient array"):
        jax.grad(lambda x: bad([x, 2 * x]).sum())(a)
