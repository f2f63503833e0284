"""Framework adapters: run NKI kernels on PyTorch tensors and JAX arrays.

* ``frontends.torch``: ``nki_jit``, ``autograd_function``, ``custom_op`` (needs torch).
* ``frontends.jax``: ``nki_call``, ``custom_vjp`` (needs jax).
* ``frontends.compat``: ``neuronxcc.nki`` / ``torch_neuronx`` / ``jax_neuronx`` aliases and
  ``python -m frontends.compat script.py`` (``nki-compat script.py``); also ``neuronx_distributed``
  and ``pybuda`` for the model-level APIs below.
* ``frontends.model_builder``: ModelBuilder / NxDModel (buckets, tensor parallelism, state
  buffers, save / load) on simulated NeuronCores (needs torch).
* ``frontends.pipeline``: a pipeline runtime of NeuronCore and CPU devices (inference,
  training, the named op set) (needs torch).

torch and jax are imported only when one of their frontends is used, so ``import frontends``
works without either. ``frontends.torch`` and ``frontends.jax`` register themselves with
``nki.frameworks.register_frontend`` on import; ``nki.frameworks`` imports them through the
``nki.frontends`` entry-point group (pyproject.toml) when a kernel first receives torch tensors or
JAX arrays.
"""

from __future__ import annotations

from .pair import KernelPair

__all__ = ["KernelPair"]
