"""The NKI addition kernel shared by the custom-op tutorials: c = a + b, one [128, 512] tile per
instance of a 2-D launch grid."""

import nki
import nki.language as nl


@nki.jit
def nki_tensor_add_kernel(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
    return c_output


def grid(a_input, b_input):
    """One instance per [128, 512] tile."""
    return (a_input.shape[0] // 128, a_input.shape[1] // 512)
