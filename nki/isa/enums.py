"""nki.isa enumerations: engines, accumulator commands, DMA modes and NeuronCore versions."""

from __future__ import annotations

import enum

from ..errors import NKITypeError, arguments_checked, user_loc
from ..targets import env_target
from ..tracer import current
from ..tracer.api_checks import broken
from ..tracer.dependencies import dependency  # noqa: F401 - nisa.dependency


class engine(enum.IntEnum):  # noqa: N801 - classic name
    """NeuronCore engines an instruction can be placed on (classic numbering)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd(enum.IntEnum):  # noqa: N801
    """What an instruction does with its engine's per-partition accumulator registers."""

    idle = 0  # leave the registers alone
    reset = 1  # set them to the reduction identity
    reduce = 2  # fold this instruction's reduction into them
    reset_reduce = 3  # reset, then fold this instruction's reduction in
    load_reduce = 4  # (newer SDKs) treated like reset_reduce here


class oob_mode(enum.IntEnum):  # noqa: N801
    """Out-of-bounds handling of dynamic (indirect) DMA addresses."""

    error = 0
    skip = 1


class dge_mode(enum.IntEnum):  # noqa: N801
    """DMA descriptor generation mode."""

    unknown = 0  # let the compiler choose
    swdge = 1  # software descriptor generation (GpSimd)
    hwdge = 2  # hardware descriptor generation (NeuronCore-v3+)
    none = 3  # no descriptor generation engine


class nc_version(enum.IntEnum):  # noqa: N801
    """NeuronCore generation: gen2 = trn1/inf2, gen3 = trn2, gen4 = trn3."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


class matmul_perf_mode(enum.Enum):  # noqa: N801
    """nc_matmul performance modes (``double_row_gen3``: fp8, K = 256, NeuronCore-v3+)."""

    none = "none"
    double_row = "double_row"
    double_row_gen3 = "double_row_gen3"


_ENGINE_NAMES = {e.name: e for e in engine}
_ENGINE_NAMES.update({"act": engine.scalar, "pool": engine.gpsimd, "pe": engine.tensor})


def engine_name(e: object) -> str:
    """Canonical engine name of an ``engine=`` argument (enum member, alias or string)."""
    if e is None:
        return "unknown"
    if isinstance(e, engine):
        return e.name
    if isinstance(e, str) and e.lower().replace("_engine", "") in _ENGINE_NAMES:
        return _ENGINE_NAMES[e.lower().replace("_engine", "")].name
    if isinstance(e, int) and not isinstance(e, bool):
        try:
            name = engine(e).name
        except ValueError:
            pass
        else:
            broken("enum.named", f"got engine={e!r}; write nisa.engine.{name}")
            return name
    raise NKITypeError(
        f"unknown engine {e!r}: expected one of nisa.engine.{{vector, scalar, gpsimd, tensor, "
        "unknown} or the aliases nisa.vector_engine, nisa.scalar_engine, ...",
        code="err_invalid_engine",
        loc=user_loc(),
    )


def enum_value(x: object, cls: type[enum.Enum], api: str, role: str) -> enum.Enum:
    """An enum argument given as a member, its name or its value."""
    if isinstance(x, cls):
        return x
    for m in cls:  # type: ignore[attr-defined]
        if x == m.name or x == m.value:
            if isinstance(x, int) and not isinstance(x, bool):
                broken("enum.named", f"'{role}' of '{api}' got {x!r}; write nisa.{cls.__name__}."
                       f"{m.name}")  # fmt: skip
            return m
    names = ", ".join(m.name for m in cls)  # type: ignore[attr-defined]
    raise NKITypeError(
        f"'{role}' of '{api}' must be one of nisa.{cls.__name__}.{{{names}}}, got {x!r}",
        code="err_invalid_argument",
        loc=user_loc(),
    )


@arguments_checked("nisa.get_nc_sub_version")
def get_nc_sub_version() -> int:
    """The silicon revision within the target's NeuronCore generation: 0 (the first revision,
    the only one nki-sim models)."""
    return 0


@arguments_checked("nisa.get_nc_version")
def get_nc_version() -> nc_version:
    """The NeuronCore version of the target being traced (trn1 -> gen2, trn2 -> gen3, trn3 ->
    gen4); outside a kernel, the target selected by ``NEURON_PLATFORM_TARGET_OVERRIDE``."""
    st = current()
    return nc_version((st.target if st is not None else env_target()).gen)
