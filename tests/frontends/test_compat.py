"""Classic imports (neuronxcc.nki, torch_neuronx, jax_neuronx) through the compat aliases."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

pytest.importorskip("torch")
pytest.importorskip("jax")


def test_classic_script_runs_unmodified():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = Path(__file__).with_name("classic_script.py")
    proc = subprocess.run(
        [sys.executable, "-m", "frontends.compat", str(script), "x", "--y"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "args=['x', '--y'] torch=True jax=True" in proc.stdout


def test_install_uninstall_aliases():
    from frontends import compat

    assert "neuronxcc" not in sys.modules
    names = compat.install()
    try:
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl
        from neuronxcc import nki
        from torch_neuronx.xla_impl.ops import nki_jit

        import nki as real

        # neuronxcc.nki is nki with classic-only kernels (nki.jit(api="classic"))
        assert nki.language is real.language and nki.simulate is real.simulate
        assert nki.jit(lambda a: a).api == "classic"
        assert nl is real.language and nisa.__name__ == "nki.isa"
        from frontends.torch import nki_jit as real_jit

        assert nki_jit is real_jit
        assert set(names) >= {"neuronxcc.nki.typing", "torch_neuronx", "jax_neuronx"}
    finally:
        compat.uninstall()
    assert "neuronxcc" not in sys.modules and "jax_neuronx" not in sys.modules


def test_classic_isa_constants_import():
    # the SDK's doc tests import the DMA enums from the classic constants module
    from frontends import compat

    compat.install()
    try:
        from neuronxcc.nki.isa.constants import dge_mode, oob_mode

        import nki.isa as real

        assert dge_mode is real.dge_mode and oob_mode is real.oob_mode
    finally:
        compat.uninstall()
    assert "neuronxcc" not in sys.modules and "jax_neuronx" not in sys.modules


def test_core_imports_without_frameworks():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
        "import nki, frontends, frontends.compat; frontends.compat.install()\n"
        "import neuronxcc.nki.language; print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


XLA_SCRIPT = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def scaled_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for k in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[k * 128 : (k + 1) * 128, :])
        tiles.append(t)
    for k in nl.affine_range(x.shape[0] // 128):
        nisa.tensor_scalar(dst=tiles[k], data=tiles[k], op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[k * 128 : (k + 1) * 128, :], src=tiles[k])
    return out


device = torch_xla.device()
assert device == xm.xla_device() == torch.device("cpu")
x = torch.randn(256, 64).to(device=device)
y = scaled_rows(x)
xm.mark_step()
torch_xla.sync()
xm.wait_device_ops()
assert torch.equal(y.cpu(), 2 * x), "mismatch"
print("xla example ok", scaled_rows.last_ir.generation)
"""


def test_torch_xla_examples_run_on_the_cpu(tmp_path):
    """AWS's torch examples move tensors to the XLA device and mark steps; under the compat
    runner the device is the CPU and the barriers do nothing. The current-API kernel (a list of
    tiles indexed by a loop iterator) stays current although the runner turns classic mode on."""
    script = tmp_path / "xla_example.py"
    script.write_text(XLA_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "frontends.compat", str(script)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "xla example ok current" in proc.stdout


def test_torch_xla_alias_names_what_it_lacks():
    from frontends import compat

    compat.install()
    try:
        import torch_xla.core.xla_model as xm

        with pytest.raises(AttributeError, match="'xla_device_hw'.*mark_step"):
            xm.xla_device_hw  # noqa: B018
    finally:
        compat.uninstall()
    assert "torch_xla" not in sys.modules
