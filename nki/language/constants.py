"""nki.language.constants: small helpers some classic kernels import directly."""

from __future__ import annotations

from .. import dtypes

__all__ = ["sizeinbytes"]


def sizeinbytes(dtype: object) -> int:
    """Bytes per element of an NKI dtype (``sizeinbytes(nl.bfloat16) == 2``)."""
    return dtypes.itemsize(dtypes.name_of(dtype))
