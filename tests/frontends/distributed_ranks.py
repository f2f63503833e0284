"""Two torch.distributed (gloo) processes, each simulating two of the four ranks of a
tensor-parallel model (``NxDModel(start_rank=..., local_ranks_size=2)``); the collectives
exchange the ranks' values through the process group. Each process checks its ranks'
outputs against the same model run with all four ranks in one process (bit for bit) and
against the whole model on the CPU. Run by test_model_builder.py; prints RANKS AGREE."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_model_builder import MLP  # noqa: E402

from frontends.model_builder import (  # noqa: E402
    NxDModel,
    NxDParallelState,
    compile,
    init_on_device,
    shard_checkpoint,
    trace,
)


def worker(proc: int, tmp: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=proc, world_size=2)
    torch.manual_seed(0)
    cpu, x = MLP(), torch.rand(6, 16)
    with NxDParallelState(world_size=4, tensor_model_parallel_size=4):
        art = trace(MLP(parallel=True), args=x)
        comp = compile(art.hlo, art.metaneff, compiler_workdir=os.path.join(tmp, str(proc)))
    with NxDParallelState(4, 4), init_on_device(torch.device("meta")):
        shards = shard_checkpoint(cpu.state_dict(), MLP(parallel=True))
    mine = NxDModel(world_size=4, start_rank=2 * proc, local_ranks_size=2).add("b", art, comp)
    mine.set_weights(shards)
    mine.to_neuron()
    whole = NxDModel(world_size=4).add("b", art, comp)
    whole.set_weights(shards)
    whole.to_neuron()
    got = mine(x=[x, x], forward_mode="ranked")[0]
    want = whole(x=[x] * 4, forward_mode="ranked")[0][2 * proc : 2 * proc + 2]
    assert all(torch.equal(g, w) for g, w in zip(got, want)), "ranks differ"
    torch.testing.assert_close(got[0], cpu(x), rtol=1e-5, atol=1e-5)
    dist.destroy_process_group()
    print(f"process {proc}: ranks {2 * proc}, {2 * proc + 1} agree", flush=True)


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2, join=True)
    print("RANKS AGREE")
