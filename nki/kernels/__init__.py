"""A library of NKI kernels for the operators a framework needs (used by the ``torch.compile``
backend in ``frontends/torch_backend.py``, and usable on their own with NumPy arrays or torch
tensors). Each kernel's docstring states its shapes, dtypes and limits."""

from .attention import attention_backward_kernel, attention_kernel
from .conv import (
    avg_pool2d_backward_kernel,
    avg_pool2d_kernel,
    conv2d_input_grad_kernel,
    conv2d_kernel,
    conv2d_weight_grad_kernel,
    max_pool2d_backward_kernel,
    max_pool2d_indices_kernel,
    max_pool2d_kernel,
)
from .elementwise import (
    BINARY_KERNELS,
    GRAD_KERNELS,
    SCALAR_KERNELS,
    UNARY_KERNELS,
    cast_kernel,
    where_kernel,
)
from .embedding import embedding_backward_kernel, embedding_kernel, transpose_kernel
from .matmul import addmm_kernel, bmm_kernel, matmul_kernel, sum_rows_kernel
from .norm import (
    layer_norm_backward_kernel,
    layer_norm_kernel,
    rms_norm_backward_kernel,
    rms_norm_kernel,
)
from .reduce import (
    amax_kernel,
    cumsum_kernel,
    log_softmax_backward_kernel,
    log_softmax_kernel,
    mean_kernel,
    softmax_backward_kernel,
    softmax_kernel,
    sum_kernel,
)

__all__ = [
    "avg_pool2d_backward_kernel",
    "avg_pool2d_kernel",
    "conv2d_input_grad_kernel",
    "conv2d_kernel",
    "conv2d_weight_grad_kernel",
    "max_pool2d_backward_kernel",
    "max_pool2d_indices_kernel",
    "max_pool2d_kernel",
    "cast_kernel",
    "attention_backward_kernel",
    "attention_kernel",
    "amax_kernel",
    "cumsum_kernel",
    "embedding_backward_kernel",
    "embedding_kernel",
    "layer_norm_backward_kernel",
    "layer_norm_kernel",
    "log_softmax_backward_kernel",
    "log_softmax_kernel",
    "mean_kernel",
    "rms_norm_backward_kernel",
    "rms_norm_kernel",
    "softmax_backward_kernel",
    "softmax_kernel",
    "sum_kernel",
    "transpose_kernel",
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
