"""One of two torch.distributed (gloo) processes, each simulating two of the four ranks of a
tensor-parallel model (``NxDModel(start_rank=..., local_ranks_size=2)``); the collectives
exchange the ranks' values through the process group. Each process checks its ranks' outputs
against the whole model on the CPU, and the two processes' outputs against each other (every
rank holds the same all-reduced result, bit for bit). Run by test_model_builder.py as
``distributed_ranks.py <rendezvous dir> <process>``; prints RANKS AGREE."""

import os
import sys

import torch
import torch.distributed as dist

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

tmp, proc = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=proc, world_size=2)
torch.manual_seed(0)
cpu, x = MLP(), torch.rand(6, 16)
with NxDParallelState(world_size=4, tensor_model_parallel_size=4):
    art = trace(MLP(parallel=True), args=x)
    comp = compile(art.hlo, art.metaneff, compiler_workdir=os.path.join(tmp, str(proc)))
with NxDParallelState(4, 4), init_on_device(torch.device("meta")):
    shards = shard_checkpoint(cpu.state_dict(), MLP(parallel=True))
model = NxDModel(world_size=4, start_rank=2 * proc, local_ranks_size=2).add("b", art, comp)
model.set_weights(shards)  # every rank's shards: this process takes its own two
model.to_neuron()
mine = model(x=[x, x], forward_mode="ranked")[0]
torch.testing.assert_close(mine[0], cpu(x), rtol=1e-5, atol=1e-5)
every = [torch.empty_like(mine[0]) for _ in range(2)]
dist.all_gather(every, mine[1])
assert torch.equal(every[0], every[1]) and torch.equal(mine[0], mine[1]), "ranks differ"
dist.destroy_process_group()
print(f"RANKS AGREE (process {proc}: ranks {2 * proc}, {2 * proc + 1})")
