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
