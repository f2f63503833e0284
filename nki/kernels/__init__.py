"""A library of NKI kernels for the operators a framework needs (used by the ``torch.compile``
backend in ``frontends/torch_backend.py``, and usable on their own with NumPy arrays or torch
tensors). Each kernel's docstring states its shapes, dtypes and limits."""

from .elementwise import BINARY_KERNELS, GRAD_KERNELS, SCALAR_KERNELS, UNARY_KERNELS, where_kernel
from .matmul import addmm_kernel, bmm_kernel, matmul_kernel, sum_rows_kernel

__all__ = [
    "BINARY_KERNELS",
    "GRAD_KERNELS",
    "SCALAR_KERNELS",
    "UNARY_KERNELS",
    "addmm_kernel",
    "bmm_kernel",
    "matmul_kernel",
    "sum_rows_kernel",
    "where_kernel",
]
