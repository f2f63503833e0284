"""The error-code catalogue: every code an ``NKIError`` can carry, with its one-line meaning.

Codes follow the classic NKI compiler's names where one exists (so a code can be looked up in
the NKI documentation); the rest name the rule broken in the same style. Every code raised in
``nki/``, ``simulator/`` and ``frontends/`` is listed here (a test checks it). ``FIXES`` says
how to fix a kernel that raised each code; the documentation site's error-code page shows both,
generated from these tables (:func:`catalogue_markdown`)."""

from __future__ import annotations

ERROR_CODES: dict[str, str] = {
    # ---- indexing, masks and control flow (trace time) -------------------------------------------
    "err_1d_arange_not_supported": "a 1-D `nl.arange` indexes a multi-dimensional tile; "
    "give it a second axis (`nl.arange(n)[:, None]`) or use `nl.mgrid`",
    "err_too_many_indices": "more indices than the tensor has dimensions",
    "err_index_shape_mismatch": "index expressions whose shapes do not broadcast together",
    "err_unsupported_index_expression": "an index that is not an integer, slice, `nl.ds`, "
    "program id, loop iterator or affine `nl.arange` expression",
    "err_unsupported_mixing_basic_advanced_tensor_indexing": "slices mixed with `nl.arange` "
    "indices in one subscript",
    "err_indirect_indices_free_dim": "a tile-valued (indirect) index on a dimension other than "
    "the partition / first one",
    "err_tensor_access_out_of_bound": "an access outside the tensor (static index ranges, or "
    "data-dependent indices at run time)",
    "err_cannot_assign_to_index": "an index expression assigned as a value; materialise it with "
    "`nisa.iota`",
    "err_unsupported_expression_in_mask": "a `mask=` that is not an affine predicate over "
    "indices, loop iterators and program ids combined with `&`",
    "err_mask_shape_mismatch": "a mask whose shape does not match the tile it masks",
    "err_control_flow_condition_depending_on_arange": "Python control flow on a traced value "
    "(an index, iterator or predicate)",
    "err_dynamic_control_flow_not_supported": "Python `int()` / `if` / `range()` on a value "
    "known only at run time (a program id or loop iterator)",
    "err_loop_too_large_to_unroll": "a current-API loop Python needs as ints (`if`, `min`, a "
    "list index) unrolled beyond the traced-iteration limit",
    "err_ambiguous_tensor_truth_value": "a tile used as a Python truth value or iterated",
    "err_local_variable_used_out_of_scope": "a tile created inside a loop body used after the "
    "loop ended",
    "err_outside_kernel": "a kernel-only call (`nl.*`, `nisa.*`) made outside a traced kernel",
    # ---- shapes, ranks and partition limits ------------------------------------------------------
    "err_num_partition_exceed_arch_limit": "a tile or operand with more partitions than the "
    "target has (128)",
    "err_num_partition_mismatch": "operands of one instruction with different partition counts",
    "err_partition_mismatch": "data and index tiles with different partition counts",
    "err_free_size_mismatch": "operands that need the same number of elements per partition "
    "but do not have it",
    "err_size_of_dimension_exceed_arch_limit": "a free dimension larger than the instruction "
    "accepts",
    "err_exceed_max_supported_dimension": "an operand of higher rank than the instruction accepts",
    "err_insufficient_rank": "an on-chip tile without a partition and a free dimension",
    "err_unsupported_tile_rank": "an operand that must be a 2-D tile has another rank",
    "err_readonly_output": "a read-only array passed for a parameter the kernel writes",
    "err_kernel_recursion": "a kernel that calls itself without end",
    "err_invalid_shape": "a tensor shape that is not a tuple of integers",
    "err_broadcast_shape_mismatch": "operand shapes that do not broadcast together",
    "err_store_dst_shape_smaller_than_other_shape": "a destination smaller than (or "
    "incompatible with) the value written into it, or an instruction's result smaller than its "
    "dst= (an instruction does not broadcast its result)",
    "err_reshape_size_mismatch": "a reshape or dtype view that changes the number of elements "
    "or the partition dimension",
    "err_assert_shape": "`tile.assert_shape(shape)` found another shape",
    "err_expand_dims_non_trailing_axis": "`nl.expand_dims` on an axis that is not trailing",
    "err_scalar_or_vector_operand_shape": "an operand that must be a scalar or a (P, 1) vector "
    "is a wider tile",
    "err_reduce_res_shape": "a `reduce_res` tile whose shape is not (P, 1)",
    "err_bn_aggr_free_size": "`nisa.bn_aggr` data whose elements per partition are not "
    "(count, mean, var*count) triples",
    "err_dma_element_count_mismatch": "a DMA whose source and destination hold different "
    "numbers of elements",
    "err_annotation_shape_mismatch": "an argument whose shape differs from its `nki.typing` "
    "annotation",
    # ---- matmul and transpose --------------------------------------------------------------------
    "err_matmul_contraction_mismatch": "matmul operands whose contraction dimensions differ",
    "err_matmul_tile_size_exceeds_limit": "a matmul operand beyond the Tensor engine's "
    "stationary / moving tile limits",
    "err_matmul_shape": "an `nc_matmul` operand with the wrong shape for the requested mode "
    "(perf mode, transpose)",
    "err_matmul_transpose_needs_identity": "`nc_matmul(is_transpose=True)` with a `moving` "
    "operand that is not the identity",
    "err_transpose_tile_size_exceeds_limit": "a transpose tile larger than the engine supports",
    "err_invalid_tile_position": "a `tile_position` / `tile_size` the Tensor engine cannot use",
    "err_unsupported_perf_mode": "a matmul `perf_mode` the target does not have",
    "err_unsupported_matmul_dtype": "a matmul operand dtype the Tensor engine does not accept",
    "err_unsupported_transpose_axes": "DMA transpose axes not supported for the operand's rank",
    # ---- memories and capacity -------------------------------------------------------------------
    "err_unsupported_memory": "an operand in a memory the call cannot read or write (HBM vs "
    "SBUF vs PSUM)",
    "err_unsupported_start_partition": "a compute-engine access that starts at a partition the "
    "engines cannot address for that many partitions",
    "err_sbuf_capacity_exceeded": "live SBUF allocations exceed the bytes per partition of the "
    "target",
    "err_psum_capacity_exceeded": "live PSUM tiles exceed the PSUM of the target",
    "err_psum_tile_exceeds_bank": "a PSUM tile that does not fit one 2 KiB bank per partition",
    "err_hbm_capacity_exceeded": "the kernel's HBM tensors exceed the device's HBM",
    "err_host_memory_exhausted": "a tensor larger than the host's available memory",
    "err_hbm_tensor_with_init_value_not_supported": "an HBM tensor created with an initial "
    "value (`nl.zeros(..., buffer=nl.shared_hbm)`)",
    "err_shared_hbm_must_in_kernel_level": "a `shared_hbm` tensor created inside a loop",
    "err_invalid_allocation": "invalid arguments to a direct allocation (`nki.compiler` "
    "`alloc` / `mod_alloc`)",
    "err_invalid_view": "a tensor view (`slice`, `select`, `permute`, `broadcast`, "
    "`expand_dim`, `squeeze_dim`, `ap`) that breaks the view's rules",
    "err_runtime_loop_limit": "an `nl.while_loop` whose condition register never becomes 0",
    "err_device_loop_in_no_reorder": "a register-bounded device loop (`nl.fori_loop`, "
    "`nl.while_loop`, `nl.dynamic_range`) inside a `with nl.no_reorder():` block",
    "err_address_overlap": "two live on-chip tensors placed with `nl.ndarray(address=...)` "
    "share partitions and bytes",
    # ---- dtypes, ops, engines and instructions ---------------------------------------------------
    "err_unsupported_dtype": "a dtype the call (or the simulator) does not accept",
    "err_invalid_operand_dtype": "an operand dtype the instruction does not accept",
    "err_dtype_mismatch": "operands that must share a dtype do not",
    "err_memset_value_dtype": "a `nisa.memset` value whose type does not match the "
    "destination's dtype (a float into an integer tile; x4 packed dtypes only take 0)",
    "err_bitvec_op_requires_integer_dtype": "a bit-vector op on a float tile",
    "err_unsupported_op": "an op the call cannot apply",
    "err_not_simulated": "a call of the real NKI that nki-sim does not simulate (yet)",
    "err_unsupported_reduce_op": "a reduce op the instruction cannot apply",
    "err_unsupported_activation": "an activation function the Scalar engine does not have",
    "err_unsupported_engine_for_op": "an op the chosen engine cannot run",
    "err_tensor_scalar_op_class_mismatch": "`op0` / `op1` of `nisa.tensor_scalar` mixing "
    "bit-vector and arithmetic ops",
    "err_activation_bias_invalid_type": "an activation `bias` that is not a (P, 1) vector on "
    "a target without scalar biases",
    "err_activation_bias_unsupported": "an activation that cannot take a bias on the target",
    "err_activation_scale_invalid_type": "an activation `scale` of the wrong type",
    "err_activation_scale_scalar_or_vector": "an activation `scale` that is not a float32 "
    "scalar or a (P, 1) vector",
    "err_invalid_engine": "an `engine=` value that names no engine",
    "err_unsupported_instruction_for_target": "an instruction introduced with a later "
    "NeuronCore generation than the target",
    "err_unsupported_dge_mode": "a DMA `dge_mode` the target does not have",
    "err_invalid_argument": "an argument value outside the ones the call accepts",
    "err_missing_operand": "an op given without its operand, or an operand without its op",
    "err_unsupported_operand": "an argument of a type the call cannot use as an operand",
    "err_invalid_axis": "an `axis=` the instruction cannot reduce over",
    "err_unsupported_reduction_axis": "a reduction over the partition axis",
    "err_invalid_shuffle_mask": "a shuffle mask with out-of-range or misplaced entries",
    "err_unsupported_attribute": "an attribute NKI tiles and tensors do not have, or a "
    "parameter value the instruction does not support (yet)",
    "err_unexpected_keyword_argument": "a keyword argument the call does not take (a misspelt "
    "name is never ignored; the message names the closest valid one)",
    "err_mixed_api_generations": "a kernel that mixes classic-API and current-API constructs "
    "(the message names both lines)",
    "err_invalid_dependency": "an `NkiInstruction.depends_on` edge to something that is not "
    "an earlier instruction handle of the same kernel (or to itself)",
    "err_dependency_crosses_device_loop": "an `NkiInstruction.depends_on` edge out of an "
    "`nl.fori_loop` / `while_loop` that does not hold its consumer",
    # ---- kernels, grids, parameters and outputs --------------------------------------------------
    "err_invalid_grid": "a launch grid that is not a tuple of positive ints within the limits",
    "err_invalid_program_axis": "a program axis outside the launch grid (or named twice)",
    "err_nested_kernel_with_spmd_grid": "a kernel called from inside another kernel with an "
    "SPMD grid",
    "err_kernel_output_must_be_hbm": "a kernel that returns something other than HBM tensors",
    "err_output_tensor_must_be_shared_hbm": "a returned private-HBM (`nl.hbm`) tensor: from a "
    "grid kernel, or from any current-API kernel (outputs are `nl.shared_hbm`)",
    "err_cannot_update_immutable_parameter": "a write to an input that is not "
    "`nt.mutable_tensor` in a kernel that returns its outputs",
    "err_mutable_parameter_not_returned": "a `nt.mutable_tensor` parameter the kernel does not "
    "return",
    "err_invalid_mode": "an `nki.jit` mode (or decorated object) that is not supported",
    "err_invalid_config": "an unknown or invalid simulator configuration option",
    "err_invalid_platform_target": "a platform target that is not trn1, trn2 or trn3",
    "err_deprecated_platform_target": "`nki.jit(platform_target=...)` on a current-API kernel "
    "(deprecated since nki 0.3: set `NEURON_PLATFORM_TARGET_OVERRIDE` or "
    "`kernel.configure(target=...)`)",
    "err_unsupported_device": "a framework tensor on a device other than the CPU",
    "err_out_shape_mismatch": "an `out_shape` that disagrees with what the kernel returns",
    # ---- analyses and run time -------------------------------------------------------------------
    "err_unexpected_output_dependencies": "two `affine_range` iterations write the same "
    "elements (a loop-carried dependency)",
    "err_spmd_write_race": "two grid instances write the same shared-HBM elements",
    "err_core_race": "the two cores of an LNC=2 launch access the same shared-HBM elements "
    "with no `nisa.core_barrier` between: one reads what the other writes, or both write "
    "different values",
    "err_uninitialized_read": "a value read (or stored to HBM) before anything wrote it "
    '(`checks="full"`)',
    "err_unwritten_output": "an element of a kernel output that no instruction wrote "
    '(`checks="full"`; NaN in the result)',
    "err_collective_mismatch": "instances of a collective's group that do not all reach it",
    "err_runtime": "an instruction failed while the simulator executed it",
    "err_internal": "an internal inconsistency in the simulator (please report the kernel)",
    # ---- model-level APIs (frontends.model_builder, frontends.pipeline) ------------------------
    "err_invalid_call_order": "a model-level call made before the call it depends on (a forward "
    "before `to_neuron()`, `set_weights` after it, a pipeline run before its devices exist)",
    "err_invalid_artifact": "a saved or compiled model artifact that is corrupted, of another "
    "format version, or does not match the call that loads it",
    "err_not_applicable": "a hardware-only option or call (NEFF / HLO bytes, placement, chip and "
    "compiler knobs) that has no meaning on the simulator",
}

# How to fix a kernel that raised each code (one line each; the site's error-code page shows it
# beside the meaning). Every catalogued code has one (a test checks it).
FIXES: dict[str, str] = {
    "err_1d_arange_not_supported": "index with `nl.arange(n)[:, None]` / `[None, :]`, or with "
    "`nl.mgrid[0:p, 0:f]`",
    "err_too_many_indices": "give one index per dimension of the tensor (check the tensor's "
    "rank, e.g. a view made by `reshape`)",
    "err_index_shape_mismatch": "make the index expressions broadcast: one `nl.arange` axis "
    "per tile dimension (`[:, None]` for partitions, `[None, :]` for the free axis)",
    "err_unsupported_index_expression": "build the index from ints, slices, `nl.ds(start, "
    "size)`, program ids, loop iterators and `nl.arange`; load data-dependent indices into a "
    "tile and index with it",
    "err_unsupported_mixing_basic_advanced_tensor_indexing": "index every dimension the same "
    "way: all slices / `nl.ds`, or all `nl.arange` / `nl.mgrid` expressions",
    "err_indirect_indices_free_dim": "put the tile of indices on the first (partition) "
    "dimension, or gather along the free axis with `nl.gather_flattened` / `nisa.nc_n_gather`",
    "err_tensor_access_out_of_bound": "keep the index range inside the tensor: bound the loop "
    "by the shape, clip the last tile with `min`, or mask the partial tile (`mask=`)",
    "err_cannot_assign_to_index": "materialise the index as values with `nisa.iota` and "
    "assign the resulting tile",
    "err_unsupported_expression_in_mask": "write the mask as comparisons of indices, loop "
    "iterators and program ids with constants, joined with `&` (or Python `and` / `or`)",
    "err_mask_shape_mismatch": "build the mask from the same index expressions as the "
    "access it masks, so the shapes agree",
    "err_control_flow_condition_depending_on_arange": "use a mask (`mask=`) or `nl.where` "
    "instead of Python `if` on an index or predicate",
    "err_dynamic_control_flow_not_supported": "decide the branch with a mask or `nl.where`, "
    "use `nl.static_range` to unroll, or a runtime loop (`nl.fori_loop`, `nl.while_loop`)",
    "err_loop_too_large_to_unroll": "keep the loop's iterator symbolic: bound partial tiles with "
    "slices computed without `min()` or an `if` on the iterator, and index with the iterator "
    "instead of a Python list",
    "err_ambiguous_tensor_truth_value": "compare element-wise and use the result as a mask "
    "or in `nl.where`; iterate over index ranges, not over a tile",
    "err_local_variable_used_out_of_scope": "allocate the tile before the loop (and write "
    "into it inside), or use its value inside the loop body",
    "err_outside_kernel": "call `nl.*` / `nisa.*` only inside a function decorated with "
    "`@nki.jit` (or one it calls)",
    "err_num_partition_exceed_arch_limit": "tile the partition dimension in pieces of at "
    "most `nl.tile_size.pmax` (128)",
    "err_num_partition_mismatch": "give the operands the same number of partitions (slice "
    "or tile them alike)",
    "err_partition_mismatch": "give the data and index tiles the same partition count",
    "err_free_size_mismatch": "make the operands hold the same number of elements per "
    "partition (reshape or slice one of them)",
    "err_size_of_dimension_exceed_arch_limit": "tile the free dimension in pieces within the "
    "instruction's limit (the message gives it; see the nki.isa table)",
    "err_exceed_max_supported_dimension": "reshape the operand to a rank the instruction "
    "accepts (usually a partition axis and one or two free axes)",
    "err_insufficient_rank": "give on-chip tiles a partition and at least one free "
    "dimension, e.g. `(128, 1)` instead of `(128,)`",
    "err_unsupported_tile_rank": "reshape or slice the operand to a 2-D `(P, F)` tile",
    "err_readonly_output": "pass a writable array (`np.array(x)` copies a read-only view)",
    "err_kernel_recursion": "give the recursion a base case that Python decides at trace time",
    "err_invalid_shape": "pass the shape as a tuple of Python ints",
    "err_broadcast_shape_mismatch": "make the shapes broadcast: equal, or 1 on the "
    "dimensions to repeat (`(P, 1)` columns broadcast along the free axis)",
    "err_store_dst_shape_smaller_than_other_shape": "slice the value to the destination's "
    "shape, or write into a destination as large as the value; for a smaller result, slice dst "
    "to the result's shape or broadcast the source with a stride-0 view (`.broadcast_to`, `.ap`)",
    "err_reshape_size_mismatch": "keep the number of elements and the partition dimension "
    "when reshaping or viewing as another dtype",
    "err_assert_shape": "fix the computation that produced the tile, or the expected shape",
    "err_expand_dims_non_trailing_axis": "in a classic kernel add the new axis at the end "
    "(`axis=ndim`); a current-API kernel may add free axes anywhere after the partition axis",
    "err_scalar_or_vector_operand_shape": "pass a scalar or a `(P, 1)` tile (one value per "
    "partition); reduce a wider tile first",
    "err_reduce_res_shape": "allocate `reduce_res` as a `(P, 1)` tile with the data's "
    "partition count",
    "err_bn_aggr_free_size": "pass `bn_stats` outputs (or data laid out like them): a whole "
    "number of (count, mean, var*count) triples per partition",
    "err_dma_element_count_mismatch": "give source and destination the same number of "
    "elements (slice both to the same region)",
    "err_annotation_shape_mismatch": "pass an argument of the annotated shape, or change "
    "the `nki.typing` annotation",
    "err_matmul_contraction_mismatch": "give both operands the same contraction size (the "
    "partition dimension of `stationary` and `moving`)",
    "err_matmul_tile_size_exceeds_limit": "tile the matmul: contraction and stationary free "
    "size <= 128, moving free size <= 512 (trn1 / trn2), accumulating in PSUM",
    "err_matmul_shape": "use the operand shapes the chosen mode needs (see `nc_matmul`'s "
    "docstring: perf modes and transposes have their own)",
    "err_matmul_transpose_needs_identity": "pass the identity matrix as `moving` "
    "(`nl.shared_identity_matrix`), or use `nisa.nc_transpose`",
    "err_transpose_tile_size_exceeds_limit": "transpose in tiles of at most the size the "
    "message names (128 x 128 for `nl.transpose`)",
    "err_invalid_tile_position": "use a `tile_size` the target lists and a `tile_position` "
    "that is a multiple of it, inside the 128 x 128 PE array, both (row, column) pairs",
    "err_unsupported_perf_mode": "choose a `perf_mode` the target has (trn2+), or drop it",
    "err_unsupported_matmul_dtype": "cast the operands to a dtype the Tensor engine "
    "accepts (the message lists them) before the matmul",
    "err_unsupported_transpose_axes": "use the axes the DMA transpose supports for the "
    "operand's rank, or transpose on the Tensor engine",
    "err_unsupported_memory": "move the operand to the memory the call needs: `nl.load` / "
    "`dma_copy` HBM into SBUF before computing; matmul writes PSUM; GpSimd cannot touch PSUM",
    "err_unsupported_start_partition": "start compute accesses on a 32-partition quadrant "
    "(0, 32, 64, 96; at 0 for more than 64 partitions), or copy the data there first",
    "err_sbuf_capacity_exceeded": "use smaller tiles, fewer live tiles, or reuse buffers "
    "(allocate scratch tiles inside the loop that uses them)",
    "err_psum_capacity_exceeded": "keep at most 8 banks of PSUM tiles live: copy results to "
    "SBUF and let PSUM tiles go out of scope",
    "err_psum_tile_exceeds_bank": "keep a PSUM tile within 2 KiB per partition (512 fp32) "
    "on trn1 / trn2: tile the matmul's free dimension",
    "err_hbm_capacity_exceeded": "allocate smaller HBM tensors (or fewer per instance)",
    "err_host_memory_exhausted": "run smaller shapes (or fewer instances), or free memory "
    "on the host",
    "err_hbm_tensor_with_init_value_not_supported": "allocate the HBM tensor with "
    "`nl.ndarray` and store an on-chip tile of the value into it",
    "err_shared_hbm_must_in_kernel_level": "create `shared_hbm` tensors at the top level "
    "of the kernel, outside loops",
    "err_invalid_allocation": "give `alloc` / `mod_alloc` the base address, partitions and "
    "sizes the message names as valid",
    "err_invalid_view": "keep the view inside the tensor and its rules (the message names "
    "the rule); reshape or copy when a view cannot express the layout",
    "err_device_loop_in_no_reorder": "move the device loop out of the `nl.no_reorder()` block "
    "(static loops, `range` / `nl.affine_range` / `nl.sequential_range`, are allowed in it)",
    "err_runtime_loop_limit": "make the loop's condition register reach 0 (check the update "
    "in the loop body)",
    "err_address_overlap": "give the tensors disjoint `address=` ranges, or let the "
    "allocator place them (no `address=`)",
    "err_unsupported_dtype": "use a dtype the call accepts (the message lists them); cast "
    "with `nl.copy(..., dtype=)` or `nisa.tensor_copy` first",
    "err_invalid_operand_dtype": "cast the operand to a dtype the instruction accepts",
    "err_dtype_mismatch": "cast the operands to one dtype",
    "err_memset_value_dtype": "give a value of the tile's kind: an integer for an integer tile "
    "(`2`, not `2.0`), `0` for an x4 packed dtype",
    "err_bitvec_op_requires_integer_dtype": "apply bit-vector ops to integer tiles (view "
    "float data as an integer dtype of the same width first)",
    "err_unsupported_op": "use an op the call supports (see the op table's engines and kinds)",
    "err_not_simulated": "write the kernel with the calls the message names instead (the "
    "compatibility page lists what is not simulated)",
    "err_unsupported_reduce_op": "reduce with add, maximum or minimum (or an op the "
    "instruction lists)",
    "err_unsupported_activation": "use an activation function of the Scalar engine (the "
    "op table's `scalar` engine), or compute it with several instructions",
    "err_unsupported_engine_for_op": "run the op on an engine the op table lists for it "
    "(`engine=`), or pick another op",
    "err_tensor_scalar_op_class_mismatch": "use two arithmetic ops or two bit-vector ops "
    "in one `tensor_scalar`; split it into two calls otherwise",
    "err_activation_bias_invalid_type": "pass `bias` as a `(P, 1)` float32 tile",
    "err_activation_bias_unsupported": "add the bias in a separate instruction for this "
    "activation on this target",
    "err_activation_scale_invalid_type": "pass `scale` as a float or a `(P, 1)` float32 tile",
    "err_activation_scale_scalar_or_vector": "pass `scale` as a float32 scalar or a `(P, 1)` tile",
    "err_invalid_engine": "use one of `nisa.engine`'s members (or the `*_engine` aliases)",
    "err_unsupported_instruction_for_target": "target a generation that has the "
    "instruction (`platform_target=`), or use an instruction the target has",
    "err_unsupported_dge_mode": "use a `dge_mode` the target has (`hwdge` needs trn2+)",
    "err_invalid_argument": "pass one of the values the message lists",
    "err_missing_operand": "give each op its operand (and each operand its op)",
    "err_unsupported_operand": "pass a tile, a Python number or a `(P, 1)` vector, as the "
    "call documents",
    "err_invalid_axis": "reduce over contiguous free axes ending at the last one (at most "
    "4), given as an int or a tuple of ints",
    "err_unsupported_reduction_axis": "reduce over free axes; for the partition axis use "
    "`nisa.tensor_partition_reduce`, or transpose first",
    "err_invalid_shuffle_mask": "give 32 entries, each a source partition of the quadrant "
    "(0-31) that `src` has, or 255 to leave the destination partition alone",
    "err_unsupported_attribute": "use the tile's documented attributes (`shape`, `dtype`, "
    "views, ...)",
    "err_unexpected_keyword_argument": "use the keyword the message suggests (the call's "
    "real signature)",
    "err_mixed_api_generations": "write the kernel in one API: destination-first `nisa` "
    "calls (current) or returned tiles (classic); see the porting guide",
    "err_invalid_dependency": "pass the handles earlier `nisa` calls of this kernel returned "
    "(the producers come first in the kernel)",
    "err_dependency_crosses_device_loop": "make the edge inside the device loop, or from a "
    "producer before the loop to a consumer inside it",
    "err_invalid_grid": "launch with positive ints (`kernel[4]`, `kernel[2, 3]`); a current "
    "kernel takes `kernel[1]` or `kernel[2]`",
    "err_invalid_program_axis": "ask `nl.program_id` / `nl.num_programs` for an axis of the "
    "launch grid (0 .. ndim - 1), each once",
    "err_nested_kernel_with_spmd_grid": "call the inner kernel without a grid (as a "
    "function), or launch it from the host",
    "err_kernel_output_must_be_hbm": "return `nl.shared_hbm` tensors (store on-chip results "
    "into one first)",
    "err_output_tensor_must_be_shared_hbm": "allocate returned tensors with `buffer=nl.shared_hbm`",
    "err_cannot_update_immutable_parameter": "annotate the parameter `nt.mutable_tensor` "
    "and return it, or write into a new output tensor",
    "err_mutable_parameter_not_returned": "return the `nt.mutable_tensor` parameter (or "
    "drop the annotation)",
    "err_invalid_mode": "use one of the modes the message lists, and decorate a function",
    "err_invalid_config": "use the settings `kernel.configure` documents (the message "
    "names the closest)",
    "err_invalid_platform_target": "use `trn1`, `trn2` or `trn3` (or gen2 / gen3 / gen4)",
    "err_deprecated_platform_target": "drop `platform_target=` and set "
    "`NEURON_PLATFORM_TARGET_OVERRIDE` or call `kernel.configure(target=...)`",
    "err_unsupported_device": "move the tensor to the CPU (`.cpu()`) before calling the kernel",
    "err_out_shape_mismatch": "make `out_shape` match what the kernel returns (count, "
    "shapes and dtypes)",
    "err_unexpected_output_dependencies": "make the iterations write disjoint elements, "
    "accumulate with `+=`, or use `nl.sequential_range` when the order matters",
    "err_spmd_write_race": "index the writes by `nl.program_id` so each instance writes its "
    "own part of the output",
    "err_core_race": "split the work so the cores touch different elements, or put a "
    "`nisa.core_barrier` between the write and the other core's access",
    "err_uninitialized_read": "write the tile before reading it (initialise accumulators, "
    "mask the partial tile), or compute only on written lanes",
    "err_unwritten_output": "write every element of the output (check the last partial "
    "tile and the loop bounds)",
    "err_collective_mismatch": "make every member of the group call the same collectives "
    "in the same order",
    "err_runtime": "read the message: the instruction's inputs at the named line were "
    "invalid for it at run time",
    "err_internal": "report the kernel to nki-sim's maintainers (this is a simulator bug)",
    "err_invalid_call_order": "make the calls in the documented order (the message names "
    "the call that must come first)",
    "err_invalid_artifact": "rebuild or re-save the artifact with this version, and load "
    "it with the call that matches how it was saved",
    "err_not_applicable": "drop the hardware-only option: it means nothing on the simulator",
}


def fix(code: str) -> str:
    """How to fix a kernel that raised ``code`` ('' for a code not in the catalogue)."""
    return FIXES.get(code, "")


def meaning(code: str) -> str:
    """The one-line meaning of ``code`` ('' for a code not in the catalogue)."""
    return ERROR_CODES.get(code, "")


def catalogue_markdown() -> str:
    """The catalogue as a Markdown table with each code's meaning and fix (the documentation
    site's error-code page); each code's cell carries an anchor named after the code."""
    rows = ["| code | meaning | how to fix |", "|---|---|---|"]
    rows += [
        f'| <span id="{code}"></span>`{code}` | {text} | {FIXES[code]} |'
        for code, text in ERROR_CODES.items()
    ]
    return "\n".join(rows)
