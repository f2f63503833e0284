"""The error-code catalogue: every code an ``NKIError`` can carry, with its one-line meaning.

Codes follow the classic NKI compiler's names where one exists (so a code can be looked up in
the NKI documentation); the rest name the rule broken in the same style. Every code raised in
``nki/``, ``simulator/`` and ``frontends/`` is listed here (a test checks it), and the README's
error-code list is generated from this table (:func:`markdown`)."""

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
    "incompatible with) the value written into it",
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


def meaning(code: str) -> str:
    """The one-line meaning of ``code`` ('' for a code not in the catalogue)."""
    return ERROR_CODES.get(code, "")


def markdown() -> str:
    """The catalogue as a Markdown table in catalogue order; the README's error-code list is
    generated from it."""
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| `{code}` | {text} |" for code, text in ERROR_CODES.items()]
    return "\n".join(rows)
