"""Helpers shared by the ModelBuilder and pipeline tests: a located-error check."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import pytest

from nki.errors import NKIError


@contextlib.contextmanager
def fails(code: str, *fragments: str, cls: type = NKIError) -> Iterator[pytest.ExceptionInfo]:
    """The one-line statement right after the ``with`` raises ``cls`` with ``code``, a message
    containing every fragment, located at that statement of the test file."""
    frame = inspect.currentframe().f_back.f_back  # the test's frame, at its `with` line
    where = (frame.f_code.co_filename, frame.f_lineno + 1)
    with pytest.raises(cls) as ei:
        yield ei
    e = ei.value
    assert e.code == code, (e.code, str(e))
    for f in fragments:
        assert f in e.message, (f, e.message)
    assert e.loc is not None and (e.loc.file, e.loc.line) == where, (e.loc, where, str(e))
