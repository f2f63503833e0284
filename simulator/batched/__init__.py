"""The batched backend: each IR instruction runs once for a whole batch of SPMD instances and
independent ``affine_range`` iterations, as NumPy operations over leading batch axes.

``backend`` (the walk and ``execute``), ``context`` (one batch's state and storage), ``plan``
(batch axes, hosted instructions), ``ops`` (the batched executors), ``host`` (instructions run
per position by the interpreter's executors), ``subtrees`` (device loops and views), ``hbm``
(the proof that no position meets another's HBM writes), ``select`` (the selecting
instructions' executors), ``matmuls`` (the matmuls' executors) and ``gemm`` (their products)."""

from . import matmuls, select  # noqa: F401  (register their executors)
from .backend import execute

__all__ = ["execute"]
