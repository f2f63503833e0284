"""A classic NKI script (neuronxcc / torch_neuronx / jax_neuronx imports), run unmodified by
tests/frontends/test_compat.py through ``python -m frontends.compat``."""

import sys

import jax
import jax.numpy as jnp
import neuronxcc.nki.language as nl
import numpy as np
import torch
from jax_neuronx import nki_call
from neuronxcc import nki
from torch_neuronx import nki_jit


def add_kernel(a_input, b_input, c_output):
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))


@nki.jit
def add_returning(a_input, b_input):
    c = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    nl.store(c[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
    return c


a = torch.randn(256, 1024)
b = torch.randn(256, 1024)
c = torch.zeros(256, 1024)
nki_jit(add_kernel)[2, 2](a, b, c)
ok_torch = torch.equal(c, a + b)
ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
jc = nki_call(add_kernel, ja, jb, grid=(2, 2), out_shape=jax.ShapeDtypeStruct(ja.shape, ja.dtype))
jr = add_returning[2, 2](ja, jb)
ok_jax = np.array_equal(jc, ja + jb) and np.array_equal(jr, ja + jb)
print(f"args={sys.argv[1:]} torch={ok_torch} jax={ok_jax}")
sys.exit(0 if ok_torch and ok_jax else 1)
