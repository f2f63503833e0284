"""A multi-head attention block in the current NKI API: tensor views, ``.ap`` access patterns
moved by a register, and a device loop (``nl.fori_loop``) with an online softmax. Checked
against NumPy.

``out[h] = softmax(q[h] @ k[h].T / sqrt(d)) @ v[h]`` for q, k, v of shape ``[H, S, d]``.

* **Views.** ``q.select(0, h).slice(0, q0, q0 + 128).permute((1, 0))`` is the transposed
  ``(d, 128)`` block of queries; one ``dma_copy`` reads it with a strided access, no copy.
* **Device loop.** ``nl.fori_loop(0, S, body, step=128)`` runs ``body(j)`` on the device for
  each key block; ``j`` is a register (its value exists only at run time), so the body is
  traced once and the key and value blocks are addressed with ``.ap(..., scalar_offset=j,
  indirect_dim=1)``: the start moves by ``j`` rows of the ``[H, S, d]`` base tensor.
* **Online softmax.** State is carried across iterations in SBUF, as the current API requires:
  the running row maximum ``m``, row sum ``l`` and unnormalised output ``o``. Each block
  rescales them by ``exp(m_old - m_new)``; the end divides ``o`` by ``l``.

Run: ``python tutorials/current_api/attention.py``"""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

P = nl.tile_size.pmax


@nki.jit
def attention(q, k, v):
    """q, k, v: [H, S, d] float32, S a multiple of 128, d <= 128."""
    H, S, d = q.shape
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((H, S, d), dtype=nl.float32, buffer=nl.shared_hbm)
    for h in range(H):
        for q0 in range(0, S, P):
            qT = nl.ndarray((d, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=qT, src=q.select(0, h).slice(0, q0, q0 + P).permute((1, 0)))
            m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)  # running row max
            l_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)  # running row sum
            o = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)  # unnormalised output
            nisa.memset(dst=m, value=-1.0e30)
            nisa.memset(dst=l_sum, value=0.0)
            nisa.memset(dst=o, value=0.0)

            def key_block(j, h=h, qT=qT, m=m, l_sum=l_sum, o=o):
                # k[h, j:j+128, :] transposed and v[h, j:j+128, :], addressed at run time
                kT_j = nl.ndarray((d, P), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=kT_j, src=k.ap([[1, d], [d, P]], offset=h * S * d,
                                                 scalar_offset=j, indirect_dim=1))  # fmt: skip
                v_j = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=v_j, src=v.ap([[d, P], [1, d]], offset=h * S * d,
                                                scalar_offset=j, indirect_dim=1))  # fmt: skip
                # scores of this block, scaled: s = q k^T / sqrt(d)
                s_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(s_ps, qT, kT_j)
                s = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=s, data=s_ps, op0=nl.multiply, operand0=scale)
                # new running max and the factor exp(m_old - m_new) for the old state
                m_blk = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=m_blk, op=nl.maximum, data=s, axis=1)
                m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=m_new, data1=m, data2=m_blk, op=nl.maximum)
                diff = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=diff, data1=m, data2=m_new, op=nl.subtract)
                corr = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=corr, op=nl.exp, data=diff)
                neg_m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)
                # p = exp(s - m_new), its row sums through the accumulator registers
                p = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
                p_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                reset = nisa.reduce_cmd.reset_reduce
                nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m, reduce_op=nl.add,
                                reduce_res=p_sum, reduce_cmd=reset)  # fmt: skip
                # l = l * corr + p_sum; o = o * corr + p @ v_j
                nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=corr,
                                          op1=nl.add, operand1=p_sum)  # fmt: skip
                pT_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=pT_ps, data=p)
                pT = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=pT, src=pT_ps)
                pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(pv, pT, v_j)
                nisa.scalar_tensor_tensor(dst=o, data=o, op0=nl.multiply, operand0=corr,
                                          op1=nl.add, operand1=pv)  # fmt: skip
                nisa.tensor_copy(dst=m, src=m_new)

            nl.fori_loop(0, S, key_block, step=P)
            inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv, data=l_sum)
            y = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=y, data=o, op0=nl.multiply, operand0=inv)
            nisa.dma_copy(dst=out.select(0, h).slice(0, q0, q0 + P), src=y)
    return out


def attention_np(q, k, v):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 384, 64)).astype(np.float32) for _ in range(3))
    got = nki.simulate(attention)(q, k, v)
    err = float(np.max(np.abs(got - attention_np(q, k, v))))
    print(f"max |error| vs NumPy: {err:.2e}")
    print("PASS" if err < 1e-5 else "FAIL")
