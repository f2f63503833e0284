"""Tables of the migration assistant (``frontends/migrate.py``): what each classic construct
becomes in the current API, or why a person has to port it.

Sources: the classic -> current table of the Neuron SDK migration guide and the current
``nki.isa`` / ``nki.language`` API reference (paraphrased in the project's
``nki-current-api.md``); the classic result rules come from ``nki.isa_spec``."""

from __future__ import annotations

# classic module paths -> current ones (longest prefix first)
MODULES = (
    ("neuronxcc.nki.language", "nki.language"),
    ("neuronxcc.nki.isa", "nki.isa"),
    ("neuronxcc.nki.typing", "nki.typing"),
    ("neuronxcc.nki.compiler", "nki.compiler"),
    ("neuronxcc.nki", "nki"),
)

# loop helpers that mean Python's range in the current API
LOOPS = ("affine_range", "sequential_range", "static_range")

# NumPy ufuncs passed as ALU ops -> the nl op tokens the current API takes
NUMPY_OPS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "true_divide": "divide", "maximum": "maximum", "minimum": "minimum", "max": "maximum",
    "min": "minimum", "power": "power", "exp": "exp", "log": "log", "tanh": "tanh",
    "sqrt": "sqrt", "abs": "abs", "negative": "negative", "reciprocal": "reciprocal",
    "sin": "sin", "cos": "cos", "equal": "equal", "not_equal": "not_equal",
    "greater": "greater", "greater_equal": "greater_equal", "less": "less",
    "less_equal": "less_equal", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "logical_and": "logical_and", "logical_or": "logical_or",
    "left_shift": "left_shift", "right_shift": "right_shift", "mod": "mod", "fmod": "fmod",
}  # fmt: skip

# Python operators on tiles -> nl wrappers (the current API documents no operators on tiles)
BINOPS = {
    "Add": "add", "Sub": "subtract", "Mult": "multiply", "Div": "divide", "Pow": "power",
    "Mod": "mod",
}  # fmt: skip
AUGOPS = {"Add": "add", "Sub": "subtract", "Mult": "multiply", "Div": "divide"}

# nl functions that do not return a tile (everything else in nl called on tiles does)
NOT_TILES = frozenset({
    "program_id", "num_programs", "program_ndim", "ds", "arange", "mgrid", "par_dim",
    "tile_size", "affine_range", "sequential_range", "static_range", "spmd_dim", "nc",
    "device_print", "finfo", "iinfo", "is_hbm", "is_on_chip", "is_psum", "is_sbuf",
    "store", "random_seed", "fori_loop", "while_loop", "dynamic_range", "range",
})  # fmt: skip
# nl functions whose tile is in PSUM
PSUM_RESULTS = frozenset({"matmul", "transpose"})

# classic names with no current-API equivalent the assistant can write: name -> reason
GONE_NL = {
    "par_dim": "nl.par_dim is gone: dimension 0 of an on-chip tensor is its partition "
    "dimension; a block-first tile (B, par_dim(P), F) becomes a (P, B, F) tensor or a list "
    "of (P, F) tiles, and every index into it changes",
    "spmd_dim": "nl.spmd_dim / nl.nc launch grids are gone: the current API launches "
    "kernel[lnc] (lnc 1 or 2); loop over the old grid inside the kernel",
    "nc": "nl.spmd_dim / nl.nc launch grids are gone: the current API launches kernel[lnc] "
    "(lnc 1 or 2); loop over the old grid inside the kernel",
    "loop_reduce": "nl.loop_reduce is gone: accumulate across the loop explicitly (a "
    "tensor_tensor add into a tile allocated before the loop)",
    "all_reduce": "nl.all_reduce is gone: use nki.collectives.all_reduce",
    "atomic_rmw": "nl.atomic_rmw is gone: use nisa.dma_compute (scatter-add into HBM)",
    "static_cast": "nl.static_cast is gone: nisa.tensor_copy into a tile of the new dtype",
    "finfo": "nl.finfo is gone: write the constant (numpy.finfo gives the same values)",
    "iinfo": "nl.iinfo is gone: write the constant (numpy.iinfo gives the same values)",
    "fp32": "nl.fp32 is gone: use nl.float32",
    "bfp16": "nl.bfp16 is gone: use nl.bfloat16",
    "arange": "nl.arange is gone: index with slices, view methods or .ap(...)",
    "mgrid": "nl.mgrid is gone: index with slices, view methods or .ap(...)",
}
GONE_ISA = {
    "tensor_copy_dynamic_src": "nisa.tensor_copy_dynamic_src is gone: nisa.tensor_copy(dst, "
    "src.ap(pattern, scalar_offset=index, indirect_dim=d)) with the pattern of the copied "
    "region",
    "tensor_copy_dynamic_dst": "nisa.tensor_copy_dynamic_dst is gone: nisa.tensor_copy(dst"
    ".ap(pattern, scalar_offset=index, indirect_dim=d), src) with the pattern of the copied "
    "region",
    "builtin_custom_op": "nisa.builtin_custom_op is gone from the current API",
}
GRID = (
    "in the current API nl.program_id(0) is the logical core of kernel[lnc] (lnc 1 or 2), not "
    "an instance of a launch grid; turn the grid into Python loops inside the kernel (or a "
    "kernel[2] launch whose cores split the work)"
)
LAUNCH = (
    "a classic launch grid: the current API launches kernel(...) or kernel[lnc](...) with lnc "
    "1 or 2; loop over the old grid inside the kernel"
)
TILE_METHODS = {
    "astype": "tile.astype is gone: nisa.tensor_copy into a tile of the new dtype (rewritten "
    "when the function shows that the receiver is a tile)",
    "broadcast_to": "tile.broadcast_to is gone: the view x.broadcast(dim, size) of a size-1 "
    "free dimension; across partitions, broadcast the HBM source as it is copied in: "
    "nisa.dma_copy(dst=t, src=g.reshape((1, n)).broadcast(0, 128))",
    "expand_dims": "tile.expand_dims is gone: the view x.expand_dim(dim)",
    "assert_shape": "tile.assert_shape is gone: assert x.shape == (...)",
}

# classic result shape per instruction, over the rendered operand texts ({data}: the tile
# operand named data); the default is the first tile operand's shape
SHAPES = {
    "nc_matmul": "({stationary}.shape[1], {moving}.shape[1])",
    "nc_transpose": "({data}.shape[1], {data}.shape[0])",
    "bn_stats": "({data}.shape[0], 6)",
    "bn_aggr": "({data}.shape[0], 2)",
    "max8": "({src}.shape[0], 8)",
    "nc_find_index8": "({data}.shape[0], 8)",
    "tensor_partition_reduce": "(1, *{data}.shape[1:])",
    "memset": "{shape}",
    "dma_transpose": "({src}.shape[1], {src}.shape[0])",
}
# instructions whose classic form the assistant does not rewrite, and why
MANUAL_ISA = {
    "local_gather": "its result layout depends on num_valid_indices: allocate dst by hand",
    "sequence_bounds": "allocate its (1, 2, n) dst by hand",
    "range_select": "its classic defaults differ (reduce_cmd idle, on_false_value None): "
    "write the current call by hand",
}
