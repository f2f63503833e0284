"""A library of NKI kernels for the operators a framework needs (used by the ``torch.compile``
backend in ``frontends/torch_backend.py``, and usable on their own with NumPy arrays or torch
tensors). Each kernel's docstring states its shapes, dtypes and limits."""

from .attention import attention_backward_kernel, attention_kernel
from .batch_norm import batch_norm_backward_kernel, batch_norm_kernel
from .collectives import all_gather_kernel, all_reduce_kernel
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
    COMPARE_KERNELS,
    COMPARE_SCALAR_KERNELS,
    EXACT_KERNELS,
    GRAD_KERNELS,
    INT_EXACT,
    SCALAR_KERNELS,
    UNARY_KERNELS,
    cast_kernel,
    where_kernel,
)
from .embedding import embedding_backward_kernel, embedding_kernel, transpose_kernel
from .fused import fused_elementwise_kernel, matmul_epilogue_kernel
from .index import (
    arange_kernel,
    cat_kernel,
    fill_kernel,
    flat_index_kernel,
    pad_kernel,
    topk_kernel,
    tril_kernel,
)
from .loss import nll_loss_backward_kernel, nll_loss_kernel
from .matmul import (
    addmm_kernel,
    bmm_kernel,
    matmul_kernel,
    matmul_pairs_kernel,
    matmul_shared_kernel,
    sum_rows_kernel,
)
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
    sum_middle_kernel,
)

__all__ = [
    "all_gather_kernel",
    "all_reduce_kernel",
    "arange_kernel",
    "attention_backward_kernel",
    "attention_kernel",
    "amax_kernel",
    "avg_pool2d_backward_kernel",
    "avg_pool2d_kernel",
    "batch_norm_backward_kernel",
    "batch_norm_kernel",
    "cast_kernel",
    "cat_kernel",
    "conv2d_input_grad_kernel",
    "conv2d_kernel",
    "conv2d_weight_grad_kernel",
    "cumsum_kernel",
    "embedding_backward_kernel",
    "embedding_kernel",
    "fill_kernel",
    "flat_index_kernel",
    "fused_elementwise_kernel",
    "matmul_epilogue_kernel",
    "layer_norm_backward_kernel",
    "layer_norm_kernel",
    "log_softmax_backward_kernel",
    "log_softmax_kernel",
    "max_pool2d_backward_kernel",
    "max_pool2d_indices_kernel",
    "max_pool2d_kernel",
    "mean_kernel",
    "nll_loss_backward_kernel",
    "nll_loss_kernel",
    "pad_kernel",
    "rms_norm_backward_kernel",
    "rms_norm_kernel",
    "softmax_backward_kernel",
    "softmax_kernel",
    "sum_kernel",
    "sum_middle_kernel",
    "topk_kernel",
    "transpose_kernel",
    "tril_kernel",
    "BINARY_KERNELS",
    "COMPARE_KERNELS",
    "COMPARE_SCALAR_KERNELS",
    "EXACT_KERNELS",
    "GRAD_KERNELS",
    "INT_EXACT",
    "SCALAR_KERNELS",
    "UNARY_KERNELS",
    "addmm_kernel",
    "bmm_kernel",
    "matmul_kernel",
    "matmul_pairs_kernel",
    "matmul_shared_kernel",
    "sum_rows_kernel",
    "where_kernel",
]
