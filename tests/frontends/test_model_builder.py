"""ModelBuilder / NxDModel on simulated NeuronCores: buckets, routing, tensor parallelism with
the simulator's collective kernels, weights and state buffers, artifacts, save / load, and the
errors for bad input. References: eager torch on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
import zipfile

import pytest
import torch
from model_checks import fails
from torch import nn

from frontends.model_builder import (
    ColumnParallelLinear,
    ModelBuilder,
    NxDModel,
    NxDParallelState,
    RowParallelLinear,
    StateInitializer,
    artifacts,
    compile,
    init_on_device,
    shard_checkpoint,
    trace,
)
from frontends.model_builder.collectives import run_all_gather, run_all_reduce

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, parallel: bool = False, gather: bool = False) -> None:
        super().__init__()
        if parallel:
            self.up = ColumnParallelLinear(16, 32, gather_output=gather)
            self.down = RowParallelLinear(32, 8, input_is_parallel=not gather)
        else:
            self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


@pytest.fixture(scope="module")
def two_buckets():
    model = MLP()
    nxd = (
        ModelBuilder(model)
        .trace(args=torch.rand(4, 16), tag="small")
        .trace(args=torch.rand(12, 16), tag="large")
        .compile()
    )
    nxd.to_neuron()  # one rank: the weights it was traced with
    return model, nxd


def test_buckets_route_by_shape_and_match_torch(two_buckets):
    model, nxd = two_buckets
    for rows, key in ((12, "large"), (4, "small")):
        x = torch.rand(rows, 16)
        torch.testing.assert_close(nxd(x), model(x), rtol=1e-5, atol=1e-5)
        assert nxd.last_run.bucket == key and nxd.last_run.device_us[0] > 0
    est = nxd.buckets["large"].estimate
    assert est["device_us"] > 0 and est["kernels"] >= 2
    bundle = artifacts.unpack(nxd.get_neff("small"), artifacts.NEFF, "small")
    assert bundle.text("kernels.txt").startswith("kernel ")  # the kernels' IR
    assert "addmm" in bundle.text("report.txt")  # the torch backend's report
    assert "aten.linear" in str(nxd.get_hlo("small"))  # the traced graph
    assert [n for n, _ in nxd.get_metaneff("small").weights] == list(two_buckets[0].state_dict())


def test_unknown_bucket_and_unmatched_inputs_name_the_buckets(two_buckets):
    _, nxd = two_buckets
    with fails("err_invalid_argument", "no bucket matches", "'small'", "float32[4, 16]"):
        nxd(torch.rand(5, 16))
    with fails("err_invalid_argument", "no bucket 'medium'", "'large', 'small'", cls=KeyError):
        nxd(torch.rand(4, 16), model_name="medium")
    with fails("err_invalid_argument", "unknown argument 'y'"):
        nxd(torch.rand(4, 16), model_name="small", y=torch.rand(4, 16))


def _parallel(gather: bool, world: int = 4):
    cpu = MLP()
    with NxDParallelState(world_size=world, tensor_model_parallel_size=world):
        nxd = (
            ModelBuilder(MLP(parallel=True, gather=gather)).trace(args=torch.rand(6, 16)).compile()
        )
    with NxDParallelState(world, world), init_on_device(torch.device("meta")):
        shards = shard_checkpoint(cpu.state_dict(), MLP(parallel=True, gather=gather))
    nxd.set_weights(shards)
    nxd.to_neuron()
    return cpu, nxd, shards


@pytest.mark.parametrize("gather", [False, True], ids=["row-parallel-input", "gathered"])
def test_tensor_parallel_matches_the_whole_model(gather):
    cpu, nxd, shards = _parallel(gather)
    assert shards[1]["up.weight"].shape == (8, 16)  # rank 1's rows 8..15 of the whole weight
    torch.testing.assert_close(shards[1]["up.weight"], cpu.state_dict()["up.weight"][8:16])
    x = torch.rand(6, 16)
    torch.testing.assert_close(nxd(x), cpu(x), rtol=1e-5, atol=1e-5)
    ranked = nxd(x=[x] * 4, forward_mode="ranked")
    assert len(ranked) == 1 and len(ranked[0]) == 4  # [output][rank]
    for r in range(4):  # every rank holds the all-reduced result
        assert torch.equal(ranked[0][r], ranked[0][0])
    parts = nxd.buckets[next(iter(nxd.buckets))].program.describe()
    assert "collective all_reduce" in parts and ("all_gather" in parts) == gather
    assert ("scatter" in parts) == gather


def test_collective_kernels_are_exact():
    xs = [torch.randn(5, 3) for _ in range(4)]
    xs[2][0, 0] = -0.0
    gathered = run_all_gather(xs, dim=1)
    for g in gathered:
        assert torch.equal(g, torch.cat(xs, dim=1))
    assert torch.signbit(gathered[0][0, 6])  # rank 2's -0.0 kept
    want = xs[0].clone()
    for x in xs[1:]:  # fp32, in rank order
        want = want + x
    for s in run_all_reduce(xs):
        assert torch.equal(s, want)


class Cache(nn.Module):
    """A KV-cache-like state: the forward writes position `pos` of the cache buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 3))
        self.proj = nn.Linear(3, 3)

    def forward(self, x, pos):
        self.cache = self.cache * (1 - pos) + self.proj(x) * pos
        return self.cache.sum(dim=0, keepdim=True)


class Outer(nn.Module):
    """The cache in a submodule (torch.export alone would not write it back)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Cache()

    def forward(self, x, pos):
        return self.inner(x, pos) * 2


@pytest.mark.parametrize("nested", [False, True], ids=["root-buffer", "submodule-buffer"])
def test_state_buffers_persist_and_can_be_read_and_written(nested):
    model = Outer() if nested else Cache()
    key = "inner.cache" if nested else "cache"
    nxd = ModelBuilder(model).trace(args=(torch.rand(1, 3), torch.zeros(4, 1))).compile()
    assert [n for n, _ in nxd.get_metaneff(next(iter(nxd.buckets))).states] == [key]
    nxd.to_neuron()
    ref = Outer() if nested else Cache()
    ref.load_state_dict(model.state_dict())
    for p in range(3):
        x, pos = torch.rand(1, 3), nn.functional.one_hot(torch.tensor(p), 4).float()[:, None]
        torch.testing.assert_close(nxd(x, pos), ref(x, pos), rtol=1e-5, atol=1e-5)
    ref_cache = ref.inner.cache if nested else ref.cache
    torch.testing.assert_close(nxd.read_from_neuron_buffer(key, 0), ref_cache)
    nxd.write_to_neuron_buffer(torch.ones(4, 3), key, 0)
    assert torch.equal(nxd.read_from_neuron_buffer(key, 0), torch.ones(4, 3))
    if nested:
        return
    with fails("err_invalid_argument", "shape (2, 3)", "(4, 3)"):
        nxd.write_to_neuron_buffer(torch.ones(2, 3), "cache", 0)
    with fails("err_invalid_argument", "no state buffer 'kv'", "'cache'", cls=KeyError):
        nxd.read_from_neuron_buffer("kv", 0)
    with fails("err_invalid_argument", "rank 1"):
        nxd.read_from_neuron_buffer("cache", 1)


def test_weights_are_checked_by_name_shape_and_rank():
    model = MLP()
    nxd = ModelBuilder(model).trace(args=torch.rand(4, 16)).compile()
    sd = model.state_dict()
    with fails("err_invalid_call_order", "to_neuron() first"):
        nxd(torch.rand(4, 16))
    with fails("err_invalid_argument", "missing 'down.bias'"):
        nxd.set_weights([{k: v for k, v in sd.items() if k != "down.bias"}])
    with fails("err_invalid_argument", "not in the model 'extra'"):
        nxd.set_weights([{**sd, "extra": torch.zeros(1)}])
    with fails("err_invalid_argument", "'up.weight' has shape (16, 32)", "(32, 16)"):
        nxd.set_weights([{**sd, "up.weight": torch.zeros(16, 32)}])
    with fails("err_invalid_argument", "2 state dict(s) for a model of 1 rank"):
        nxd.set_weights([sd, sd])
    with fails("err_invalid_argument", "do not convert exactly"):
        nxd.set_weights([{**sd, "up.bias": sd["up.bias"].double() + 1e-12}])
    nxd.set_weights([sd])
    nxd.to_neuron()
    with fails("err_invalid_call_order", "replace_weights"):
        nxd.set_weights([sd])
    new = {k: v * 2 for k, v in sd.items()}
    nxd.replace_weights([new])
    model.load_state_dict(new)
    x = torch.rand(4, 16)
    torch.testing.assert_close(nxd(x), model(x), rtol=1e-5, atol=1e-5)


def test_tensor_parallel_needs_sharded_weights():
    with NxDParallelState(world_size=2, tensor_model_parallel_size=2):
        nxd = ModelBuilder(MLP(parallel=True)).trace(args=torch.rand(2, 16)).compile()
    with fails("err_invalid_call_order", "set_weights(shard_checkpoint"):
        nxd.to_neuron()
    with NxDParallelState(2, 2), init_on_device(torch.device("meta")):
        meta = MLP(parallel=True)
        sd = MLP().state_dict()
        with fails("err_invalid_argument", "checkpoint['up.weight'] has shape (16, 16)"):
            shard_checkpoint({**sd, "up.weight": torch.zeros(16, 16)}, meta)
        with fails("err_invalid_argument", "missing 'down.weight'"):
            shard_checkpoint({k: v for k, v in sd.items() if k != "down.weight"}, meta)
        with fails("err_not_applicable", "load_on_device=True"):
            shard_checkpoint(sd, meta, load_on_device=True)


def test_save_load_round_trips_bit_exactly_and_rejects_corruption(two_buckets, tmp_path):
    model, nxd = two_buckets
    path = tmp_path / "model.nxd"
    nxd.save(path, save_weights=True)
    loaded = NxDModel.load(path)
    loaded.to_neuron()
    for rows in (4, 12):
        x = torch.rand(rows, 16)
        assert torch.equal(loaded(x), nxd(x))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped inside a member: the zip's CRC
    bad = tmp_path / "bad.nxd"
    bad.write_bytes(bytes(data))
    with fails("err_invalid_artifact", "is corrupted"):
        NxDModel.load(bad)
    # a member swapped for other well-formed bytes: the manifest's SHA-256
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(bad, "w") as out:
        for info in z.infolist():
            body = z.read(info)
            out.writestr(
                info.filename, body + b"\0" if info.filename.startswith("weights/") else body
            )
    with fails("err_invalid_artifact", "member 'weights/rank0.pt' is corrupted"):
        NxDModel.load(bad)
    (tmp_path / "junk.nxd").write_bytes(b"not a model")
    with fails("err_invalid_artifact", "not a readable zip"):
        NxDModel.load(tmp_path / "junk.nxd")
    neff = tmp_path / "bucket.neff"
    neff.write_bytes(nxd.get_neff("small"))
    with fails("err_invalid_artifact", "'nki-sim/compiled-bucket' archive, expected"):
        NxDModel.load(neff)


def test_fundamental_units_write_the_artifact_set(tmp_path):
    def func(a, b):
        return a * b + a

    art = trace(func, kwargs={"a": torch.rand(3, 5), "b": torch.rand(3, 5)})
    assert [p.param_name for p in art.model_params] == ["a", "b"]
    comp = compile(art.hlo, art.metaneff, compiler_workdir=tmp_path, key="fn")
    out = os.path.dirname(comp.neff_filepath)
    for name in (
        "model/graph.hlo",
        "graph.neff",
        "metaneff.pb",
        "command.txt",
        "log-neuron-cc.txt",
    ):
        assert os.path.exists(os.path.join(out, name)), name
    assert "aten::mul" in open(os.path.join(out, "log-neuron-cc.txt")).read()
    nxd = NxDModel(world_size=1).add("fn", art, comp)
    nxd.to_neuron()
    a, b = torch.rand(3, 5), torch.rand(3, 5)
    torch.testing.assert_close(nxd(a, b), func(a, b))  # positional, traced by keyword
    with fails("err_invalid_artifact", "world_size=1", "world_size=2"):
        NxDModel(world_size=2).add("fn", art, comp)


def test_compiler_flags_apply_or_are_clear_errors(tmp_path):
    art = trace(lambda x: x + 1, args=torch.rand(2, 2))
    compile(art.hlo, art.metaneff, tmp_path, compiler_args="--target=trn1 --auto-cast=none")
    with fails("err_not_applicable", "'--fast-math'"):
        compile(art.hlo, art.metaneff, tmp_path, compiler_args="--fast-math")
    with fails("err_not_applicable", "--auto-cast=all"):
        compile(art.hlo, art.metaneff, tmp_path, compiler_args="--auto-cast=all")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compile(art.hlo, art.metaneff, tmp_path, compiler_args="-O2")
    assert any("-O2" in str(x.message) for x in w)


def test_trace_checks_the_model_and_its_inputs():
    def star(*xs):
        return xs[0]

    with fails("err_invalid_argument", "*args / **kwargs", "xs"):
        ModelBuilder(star)
    with fails("err_invalid_argument", "at least one parameter"):
        ModelBuilder(lambda: torch.zeros(1))
    with fails("err_invalid_argument", "required parameter(s) 'b'"):
        trace(lambda a, b: a + b, args=torch.rand(2))
    with fails("err_invalid_argument", "example input 'a' must be a torch.Tensor"):
        trace(lambda a: a, kwargs={"a": 3.0})
    with fails("err_invalid_argument", "given both by position and by keyword"):
        trace(lambda a: a, args=torch.rand(2), kwargs={"a": torch.rand(2)})
    builder = ModelBuilder(lambda a: a * 2).trace(args=torch.rand(2), tag="t")
    with fails("err_invalid_argument", "already traced"):
        builder.trace(args=torch.rand(3), tag="t")
    with fails("err_invalid_argument", "priority_model_key='u'", "'t'"):
        builder.compile(priority_model_key="u")
    with fails("err_not_applicable", "world_size must equal"):
        NxDParallelState(world_size=4, tensor_model_parallel_size=2)


def test_ranks_in_torch_distributed_processes(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "distributed_ranks.py")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(script))))
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(tmp_path), str(p)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in (0, 1)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0 and "RANKS AGREE" in out, out


class Ones(StateInitializer):
    def forward(self):
        return [{"cache": torch.ones(4, 3)} for _ in range(self.local_ranks_size)]


def test_state_initializer_values_survive_save_and_load(tmp_path):
    art = trace(Cache(), args=(torch.rand(1, 3), torch.zeros(4, 1)))
    comp = compile(art.hlo, art.metaneff, compiler_workdir=tmp_path, key="c")
    init = Ones({"cache": [4, 3]}, {"cache": torch.float32}, 1)
    nxd = NxDModel(world_size=1, state_initializer=init).add("c", art, comp)
    nxd.to_neuron()
    assert torch.equal(nxd.read_from_neuron_buffer("cache", 0), torch.ones(4, 3))
    x, pos = torch.rand(1, 3), torch.zeros(4, 1)
    first = nxd(x, pos)
    nxd.save(tmp_path / "m.nxd", save_weights=True)
    loaded = NxDModel.load(tmp_path / "m.nxd")
    loaded.to_neuron()
    assert torch.equal(loaded.read_from_neuron_buffer("cache", 0), torch.ones(4, 3))
    assert torch.equal(loaded(x, pos), first)
    with fails("err_invalid_argument", "must be a list of 1 tensor(s), one per rank"):
        loaded(x=x, pos=pos, forward_mode="ranked")
