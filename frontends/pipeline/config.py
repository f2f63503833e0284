"""Configuration of the pipeline runtime (PyBuda's ``pybuda.config`` and ``pybuda._C``):
data formats, math fidelity, device kinds, and ``set_configuration_options``.

Every option is a row of :data:`OPTIONS`: either it changes what runs here (``applied``), or
it is a hardware placement / compiler knob with no meaning on the simulator, and setting it is
an ``err_not_applicable`` error naming it (never a silent no-op)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch

from ..api_errors import invalid, names, not_applicable

__all__ = [
    "BackendDevice",
    "BackendType",
    "CompilerConfig",
    "DataFormat",
    "DeviceMode",
    "MathFidelity",
    "OPTIONS",
    "PerfTraceLevel",
    "set_chip_break",
    "set_configuration_options",
    "set_epoch_break",
    "override_op_size",
]


class DataFormat(enum.Enum):
    """Tensor data formats; Float32, Float16 and Float16_b (bfloat16) are simulated."""

    Float32 = 0
    Float16 = 1
    Bfp8 = 2
    Bfp4 = 3
    Bfp2 = 4
    Float16_b = 5
    Bfp8_b = 6
    Bfp4_b = 7
    Bfp2_b = 8
    Lf8 = 9
    UInt16 = 10
    Int8 = 11
    RawUInt8 = 12
    RawUInt16 = 13
    RawUInt32 = 14
    Int32 = 15
    Invalid = 16


TORCH_DTYPES = {
    DataFormat.Float32: torch.float32,
    DataFormat.Float16: torch.float16,
    DataFormat.Float16_b: torch.bfloat16,
    DataFormat.Int8: torch.int8,
    DataFormat.Int32: torch.int32,
}


def torch_dtype_of(df: Any, what: str) -> torch.dtype:
    """The torch dtype of a data format (block floating point formats are not simulated)."""
    if isinstance(df, torch.dtype):
        return df
    if df not in TORCH_DTYPES:
        raise not_applicable(
            f"{what}({df})", f"the simulated formats are {', '.join(d.name for d in TORCH_DTYPES)}"
        )
    return TORCH_DTYPES[df]


class MathFidelity(enum.Enum):
    """Multiplier fidelity; the simulator multiplies in full fp32 (HiFi4)."""

    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4
    Invalid = 255


class BackendDevice(enum.Enum):
    """Device generations: the simulated NeuronCores (Trn1, Trn2, Trn3); the Tenstorrent
    chips are not applicable."""

    Trn1 = "trn1"
    Trn2 = "trn2"
    Trn3 = "trn3"
    Grayskull = "grayskull"
    Wormhole_B0 = "wormhole_b0"
    Blackhole = "blackhole"


SIMULATED = (BackendDevice.Trn1, BackendDevice.Trn2, BackendDevice.Trn3)


class BackendType(enum.Enum):
    """Where a device runs: ``Golden`` (a reference model: the simulator); silicon is not
    applicable."""

    Golden = 0
    Model = 1
    Versim = 2
    Emulation = 3
    NoBackend = 4
    Silicon = 5


class DeviceMode(enum.Enum):
    CompileAndRun = 0
    CompileOnly = 1
    RunOnly = 2


class PerfTraceLevel(enum.Enum):
    NONE = 0
    LIGHT = 1
    BASIC = 2
    VERBOSE = 3


@dataclass(frozen=True)
class Option:
    """A configuration option: ``applied`` (what it changes here) or a knob that is not
    applicable (``why``); ``accepts`` lists values that mean "what the simulator does"."""

    name: str
    applied: str = ""
    why: str = ""
    accepts: tuple = ()


_PLACEMENT = "placement, streaming and scheduling on Tenstorrent chips do not exist here"
_BACKEND = "there is no device backend to configure; the simulator runs in this process"
OPTIONS: dict[str, Option] = {
    o.name: o
    for o in [
        Option("performance_trace", applied="write the pipeline's Perfetto trace after a run"),
        Option("backend_output_dir", applied="directory of the Perfetto trace"),
        Option(
            "math_fidelity",
            why="the simulator multiplies in fp32 (HiFi4)",
            accepts=(MathFidelity.HiFi4,),
        ),
        Option(
            "accumulate_df", why="matmuls accumulate in fp32 (PSUM)", accepts=(DataFormat.Float32,)
        ),
        Option(
            "default_df_override",
            why="modules run in their own dtypes; cast the module",
            accepts=(DataFormat.Float32,),
        ),
        Option("enable_stable_softmax", why="softmax is always the stable form", accepts=(True,)),
        *(
            Option(n, why=_PLACEMENT)
            for n in (
                "enable_recompute balancer_policy place_on_one_row enable_t_streaming "
                "manual_t_streaming enable_consteval enable_auto_fusing enable_conv_prestride "
                "amp_level harvested_rows enable_auto_transposing_placement "
                "use_interactive_placer op_intermediates_to_save enable_enumerate_u_kt "
                "enable_device_tilize dram_placement_algorithm chip_placement_policy "
                "enable_forked_dram_inputs input_queues_on_host output_queues_on_host"
            ).split()
        ),
        *(
            Option(n, why=_BACKEND)
            for n in (
                "backend_opt_level backend_device_descriptor_path backend_cluster_descriptor_path "
                "backend_runtime_params_path backend_runtime_args store_backend_db_to_yaml "
                "device_config"
            ).split()
        ),
    ]
}


@dataclass
class CompilerConfig:
    """The options in effect (those that apply here)."""

    performance_trace: Any = None
    backend_output_dir: str | None = None


CONFIG = CompilerConfig()


def set_configuration_options(**options: Any) -> None:
    """Set global options (``None`` leaves one unchanged). Options that apply here change
    the run; placement / backend knobs set to anything but a value the simulator already
    honours are an ``err_not_applicable`` error naming the option."""
    for key, value in options.items():
        if key not in OPTIONS:
            raise invalid(
                f"set_configuration_options: unknown option {key!r}; the options are "
                f"{names(OPTIONS)}"
            )
        if value is None:
            continue
        opt = OPTIONS[key]
        if opt.applied:
            setattr(CONFIG, key, value)
        elif value not in opt.accepts:
            raise not_applicable(f"set_configuration_options({key}={value!r})", opt.why)


def _placement(api: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> None:
        raise not_applicable(api, _PLACEMENT)

    call.__name__ = api
    call.__doc__ = f"``{api}``: not applicable ({_PLACEMENT})."
    return call


set_epoch_break = _placement("set_epoch_break")
set_chip_break = _placement("set_chip_break")
override_op_size = _placement("override_op_size")


def _get_global_compiler_config() -> CompilerConfig:
    return CONFIG
