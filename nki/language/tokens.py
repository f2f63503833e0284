"""Op tokens of the current API that name no element-wise function of the op table: they are
accepted only as the ``op=`` arguments of the instructions that document them (``nl.bypass``
skips a tensor-scalar step of ``nisa.activate2``; ``nl.prelu`` is its parametric-ReLU
activation; ``nl.average`` makes ``nisa.tensor_partition_reduce`` average the partitions)."""

from __future__ import annotations

from ..errors import NKITypeError, user_loc

__all__ = ["average", "bypass", "prelu"]


class OpToken:
    """A named ``op=`` token (``nki_token`` is what instructions read)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self.nki_token = name

    def __repr__(self) -> str:
        return f"nl.{self.__name__}"

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise NKITypeError(
            f"nl.{self.__name__} is an op token, not a function: pass it as the op of the "
            "instructions that take it (nisa.activation / activate2, "
            "nisa.tensor_partition_reduce)",
            code="err_unsupported_op",
            loc=user_loc(),
        )


average = OpToken("average")
bypass = OpToken("bypass")
prelu = OpToken("prelu")
