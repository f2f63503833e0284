"""``nki.meta`` (current API): ``nki.meta.tensor``, the traced tensor type that the classic
``nki.tensor`` became (kernels annotate parameters with it); the same class as ``nki.tensor``."""

from __future__ import annotations

from .tracer import NkiTensor as tensor

__all__ = ["tensor"]
