"""nki-compat aliases for the model-level reference APIs: ``neuronx_distributed`` (ModelBuilder)
and ``pybuda`` (the pipeline runtime), and the reference documents' examples run unmodified.

The examples are extracted from ``shared/reference/seeds/`` at run time (never copied here);
without those documents the example test is skipped. By default the examples of at most two
ranks run, in one nki-compat process; ``NKI_REFERENCE_EXAMPLES=all`` adds the 32-rank ones
(minutes of simulation), as ``python tests/frontends/reference_examples.py`` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import reference_examples as ref

from frontends import compat

from helpers import ROOT


def test_aliases_forward_the_reference_names():
    compat.install()
    try:
        import neuronx_distributed.trace.model_builder as mb_alias
        import pybuda
        from neuronx_distributed import ModelBuilder, NxDModel, NxDParallelState
        from neuronx_distributed.parallel_layers.layers import ColumnParallelLinear
        from neuronx_distributed.trace.model_builder import compile, trace
        from neuronx_distributed.trace.model_builder_utils import ModelBuilderConstants
        from neuronx_distributed.trace.nxd_model.base_nxd_model import StateInitializer
        from neuronx_distributed.utils.model_utils import init_on_device
        from pybuda._C.backend_api import BackendDevice
        from pybuda.op.loss import CrossEntropyLoss

        import frontends.model_builder as mb
        import frontends.pipeline as pl

        assert ModelBuilder is mb.ModelBuilder and NxDModel is mb.NxDModel
        assert NxDParallelState is mb.NxDParallelState and init_on_device is mb.init_on_device
        assert ColumnParallelLinear is mb.ColumnParallelLinear
        assert trace is mb.trace and compile is mb.compile and mb_alias.trace is mb.trace
        assert StateInitializer is mb.StateInitializer
        assert ModelBuilderConstants.DEFAULT_COMPILER_ARGS.startswith("--")
        assert pybuda.TTDevice is pl.NeuronCoreDevice and pybuda.PyBudaModule is pl.OpModule
        assert pybuda.op.Matmul is pl.ops.Matmul and CrossEntropyLoss is pl.loss.CrossEntropyLoss
        assert pybuda.config.set_configuration_options is pl.set_configuration_options
        assert BackendDevice is pl.BackendDevice and pybuda._C.DataFormat is pl.DataFormat
        with pytest.raises(AttributeError, match="nki-sim alias of frontends.pipeline"):
            pybuda.not_a_name  # noqa: B018
    finally:
        compat.uninstall()
    assert "pybuda" not in sys.modules and "neuronx_distributed" not in sys.modules


def test_pybuda_script_runs_unmodified():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = Path(__file__).with_name("pybuda_script.py")
    proc = subprocess.run(
        [sys.executable, "-m", "frontends.compat", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0 and "PYBUDA OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(ref.seeds_dir() is None, reason="the reference documents are absent")
def test_reference_examples_are_found():
    found = ref.examples()
    sections = {e.name.split(":")[0] for e in found}
    assert sections == {"E2E with ModelBuilder APIs", "E2E with Fundamental Units"}
    assert len(found) == 10 and all("import" in e.code for e in found)


@pytest.mark.skipif(ref.seeds_dir() is None, reason="the reference documents are absent")
def test_reference_examples_run_unmodified_and_match(tmp_path):
    every = os.environ.get("NKI_REFERENCE_EXAMPLES") == "all"
    picked = [e for e in ref.examples() if every or e.world_size <= 2]
    assert len(picked) >= 6
    ok, tail, _ = ref.run(picked, tmp_path)
    assert ok, tail
