"""(a + b) * a * b in JAX under jax.jit with the addition done by an NKI kernel (nki_call), then
trained with jax.custom_vjp + jax.grad; values and gradients are checked against native JAX.

Run: python tutorials/custom_op/custom_op_jax.py"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from add_kernel import grid, nki_tensor_add_kernel  # noqa: E402

from frontends.jax import custom_vjp, nki_call  # noqa: E402


def nki_tensor_add(a, b):
    return nki_call(
        nki_tensor_add_kernel,
        a,
        b,
        grid=grid(a, b),
        out_shape=jax.ShapeDtypeStruct(a.shape, dtype=a.dtype),
    )


@jax.jit
def forward(a, b):
    return nki_tensor_add(a, b) * a * b


nki_add = custom_vjp(nki_tensor_add_kernel, lambda a, b, g: (g, g), grid=grid)


def loss_nki(a, b):
    return jnp.sum(nki_add(a, b) * a * b)


def loss_ref(a, b):
    return jnp.sum((a + b) * a * b)


def main() -> int:
    ok = True
    for dtype in (jnp.float32, jnp.bfloat16):
        rng = np.random.default_rng(0)
        a = jnp.asarray(rng.standard_normal((256, 1024)), dtype)
        b = jnp.asarray(rng.standard_normal((256, 1024)), dtype)
        same_val = np.array_equal(forward(a, b), (a + b) * a * b)
        got = jax.jit(jax.grad(loss_nki, argnums=(0, 1)))(a, b)
        want = jax.jit(jax.grad(loss_ref, argnums=(0, 1)))(a, b)
        # XLA may fuse/reorder the native graph's multiplies differently: allow 1 ulp-ish
        same_grad = all(
            np.allclose(np.float32(g), np.float32(w), rtol=1e-6, atol=1e-6)
            for g, w in zip(got, want)
        )
        ok &= same_val and same_grad
        name = jnp.dtype(dtype).name
        print(
            f"{name:9s} values: NKI and JAX {'match' if same_val else 'DIFFER'}; "
            f"gradients: {'match' if same_grad else 'DIFFER'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
