"""RMS normalisation in the current NKI API, on one core and on the two cores of an LNC=2
launch, checked against NumPy.

``y = x / sqrt(mean(x**2) + eps) * gamma`` for each row of ``x [N, D]``:

* ``gamma`` is read once into every partition through an HBM **view**:
  ``gamma.reshape((1, D)).broadcast(0, 128)`` repeats its one row 128 times (stride 0), so one
  ``dma_copy`` fills a ``(128, D)`` tile;
* the sum of squares comes out of the Scalar engine's accumulator registers in the same
  ``activation(op=nl.square)`` that squares the tile (``reduce_cmd=reset_reduce``);
* ``tensor_scalar`` computes ``sum / D + eps`` in one instruction (two ALU stages), and
  ``activation(op=nl.rsqrt)`` its inverse square root;
* ``scalar_tensor_tensor`` multiplies each row by its own scale and then by ``gamma``.

With ``rmsnorm[2](x, gamma)`` the kernel runs on two cores: ``nl.num_programs(0)`` is 2 and
``nl.program_id(0)`` picks each core's half of the rows.

Run: ``python tutorials/current_api/rmsnorm.py``"""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

P = nl.tile_size.pmax


@nki.jit
def rmsnorm(x, gamma, eps=1e-6):
    """x [N, D] with N a multiple of 128 * cores, gamma [D]."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.reshape((1, d)).broadcast(0, P))

    share = n // nl.num_programs(0)  # rows per core
    for i in range(share // P):
        r0 = nl.program_id(0) * share + i * P
        t = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r0 : r0 + P, :])

        sq = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=t, reduce_op=nl.add, reduce_res=ss,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)  # fmt: skip
        ms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(ms, ss, nl.multiply, 1.0 / d, op1=nl.add, operand1=eps)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=ms)

        y = nl.ndarray((P, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=t, op0=nl.multiply, operand0=rstd,
                                  op1=nl.multiply, operand1=g)  # fmt: skip
        nisa.dma_copy(dst=out[r0 : r0 + P, :], src=y)
    return out


def rmsnorm_np(x, gamma, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * gamma


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 384)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 384).astype(np.float32)
    want = rmsnorm_np(x, gamma)
    ok = True
    for name, run in (("LNC=1", rmsnorm), ("LNC=2", rmsnorm[2])):
        got = nki.simulate(run)(x, gamma)
        err = float(np.max(np.abs(got - want)))
        ok &= err < 1e-5
        print(f"{name}: max |error| vs NumPy {err:.2e}")
    print("PASS" if ok else "FAIL")
