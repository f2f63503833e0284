"""nisa engine enums and aliases, and nisa.get_nc_version following the target."""

import nki.isa as nisa
import nki.language as nl

from helpers import hbm_out as _out
from helpers import rand, run


def test_nc_version_follows_target(monkeypatch):
    seen = {}

    def k(x):
        seen["v"] = nisa.get_nc_version()
        out = _out(x.shape, x.dtype)
        nl.store(out, nl.load(x))
        return out

    x = rand((4, 4))
    for tgt, want in (
        ("trn1", nisa.nc_version.gen2),
        ("gen3", nisa.nc_version.gen3),
        ("trn3", nisa.nc_version.gen4),
    ):
        run(k, x, target=tgt)
        assert seen["v"] == want
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen2")
    assert nisa.get_nc_version() == nisa.nc_version.gen2
    import nki

    nki.jit(k)(x)
    assert seen["v"] == nisa.nc_version.gen2
    from simulator.config import SimConfig

    launch = nki.jit(k)[1]
    launch.run_numpy(x, _config=SimConfig(target="trn3"))  # a SimConfig selects the target too
    assert seen["v"] == nisa.nc_version.gen4


def test_engine_enum_and_aliases():
    assert nisa.engine.tensor == 1 and nisa.engine.vector == 5 and nisa.engine.gpsimd == 3
    assert nisa.vector_engine is nisa.engine.vector and nisa.unknown_engine == 0
    assert {c.name for c in nisa.reduce_cmd} >= {"idle", "reset", "reduce", "reset_reduce"}
    assert {m.name for m in nisa.oob_mode} == {"error", "skip"}
    assert {m.name for m in nisa.dge_mode} == {"none", "swdge", "hwdge", "unknown"}
