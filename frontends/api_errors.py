"""Errors of the model-level APIs (``frontends.model_builder``, ``frontends.pipeline``): each is
an ``NKIError`` with a catalogue code, located at the caller's line (the first frame outside
nki-sim and torch), naming the argument and the values involved."""

from __future__ import annotations

from nki.errors import NKIError, NKIShapeError, NKITypeError, NKIUnsupportedError

from .common import boundary_loc


class ModelKeyError(NKIError, KeyError):
    """A name that is not there: a bucket, a state buffer, a weight, a device parameter. Also a
    ``KeyError`` (the reference APIs raise ``KeyError`` for these)."""

    default_code = "err_invalid_argument"


def invalid(message: str) -> NKIError:
    """Bad input: a value outside the ones the call accepts (``err_invalid_argument``)."""
    return NKIError(message, code="err_invalid_argument", loc=boundary_loc())


def invalid_type(message: str) -> NKITypeError:
    """An argument of the wrong type (also a ``TypeError``)."""
    return NKITypeError(message, code="err_invalid_argument", loc=boundary_loc())


def invalid_shape(message: str) -> NKIShapeError:
    """A tensor of the wrong shape (also a ``ValueError``)."""
    return NKIShapeError(message, code="err_invalid_argument", loc=boundary_loc())


def missing_key(message: str) -> ModelKeyError:
    return ModelKeyError(message, loc=boundary_loc())


def call_order(message: str) -> NKIError:
    """A call made before the call it depends on (``err_invalid_call_order``)."""
    return NKIError(message, code="err_invalid_call_order", loc=boundary_loc())


def bad_artifact(message: str) -> NKIError:
    """A corrupted, foreign or mismatched artifact (``err_invalid_artifact``)."""
    return NKIError(message, code="err_invalid_artifact", loc=boundary_loc())


def not_applicable(what: str, why: str) -> NKIUnsupportedError:
    """A hardware-only option with no meaning on the simulator (``err_not_applicable``)."""
    return NKIUnsupportedError(
        f"{what} is not applicable here: {why}", code="err_not_applicable", loc=boundary_loc()
    )


def names(items: object) -> str:
    """``'a', 'b'`` for error messages (sorted, quoted)."""
    return ", ".join(repr(x) for x in sorted(items)) or "(none)"  # type: ignore[call-overload]
