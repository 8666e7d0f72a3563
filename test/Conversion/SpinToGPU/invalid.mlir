// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu --verify-diagnostics

// f32 keys have no tensor-core path (tf32 would change the scores).
func.func @rejects_f32_keys(%q: tensor<1x1x8x32xbf16> {spin.input = "q"},
    %w: tensor<1x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xf32> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: keys must be bf16, f16 or fp8 e4m3 and queries bf16, f16 or fp8 e4m3 (got 'f32' keys, 'bf16' queries)}}
  %z = spin.dense_indexer q(%q : tensor<1x1x8x32xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x32xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

func.func @rejects_head_count_not_multiple_of_8(%q: tensor<1x1x4x32xbf16> {spin.input = "q"},
    %w: tensor<1x1x4xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xbf16> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: heads must be a multiple of 8 and the head dim a multiple of 32 (got H = 4, Dh = 32)}}
  %z = spin.dense_indexer q(%q : tensor<1x1x4x32xbf16>)
      w(%w : tensor<1x1x4xf32>) keys(%keys : tensor<?x16x32xbf16>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

func.func @rejects_bf16_keys_with_f16_queries(%q: tensor<1x1x8x32xf16> {spin.input = "q"},
    %w: tensor<1x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xbf16> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: bf16 keys need bf16 queries}}
  %z = spin.dense_indexer q(%q : tensor<1x1x8x32xf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x32xbf16>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

// expected-error @below {{GPU path: argument 5 has no spin role attribute (spin.input, ...)}}
func.func @rejects_arguments_without_role(%q: tensor<1x1x8x32xbf16>,
    %w: tensor<1x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xbf16> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"},
    %unused: tensor<1xi32>) -> tensor<1x1x64xf32> {
  %z = spin.dense_indexer q(%q : tensor<1x1x8x32xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x32xbf16>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

func.func @rejects_dynamic_batch(%q: tensor<?x1x8x32xbf16> {spin.input = "q"},
    %w: tensor<?x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xbf16> {spin.input = "keys"},
    %table: tensor<?x4xi32> {spin.input = "block_table"},
    %lengths: tensor<?x1xi32> {spin.input = "lengths"}) -> tensor<?x1x64xf32> {
  // expected-error @below {{needs static query, block-table, page and head-dim sizes on the GPU path}}
  %z = spin.dense_indexer q(%q : tensor<?x1x8x32xbf16>)
      w(%w : tensor<?x1x8xf32>) keys(%keys : tensor<?x16x32xbf16>)
      block_table(%table : tensor<?x4xi32>)
      lengths(%lengths : tensor<?x1xi32>) -> tensor<?x1x64xf32>
  return %z : tensor<?x1x64xf32>
}

// -----

// The select kernel's code is unrolled over a block: blocks are bounded.
func.func @rejects_huge_blocks(%positions: tensor<2x1xi32> {spin.positions},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  // expected-error @below {{GPU path: block_size must be at most 4096 (got 2147483617)}}
  %m = spin.fused_select %s positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>)
      {block_size = 2147483617 : i64, pooling = #spin.pooling<max>,
       sparsity = 5.0e-01, topk = 8 : i64}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  %r = spin.block_sparsity %m lengths(%lengths : tensor<2x1xi32>)
      {block_size = 2147483617 : i64} : tensor<2x8xi1> -> tensor<2x1xf32>
  return %r : tensor<2x1xf32>
}

// -----

// The GPU select kernel explores by hash rank only; the policies that rank
// blocks by age (SPIN_SPEC §7.1) run on the CPU path.
func.func @rejects_age_exploration_policy(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
    %w: tensor<2x1x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %positions: tensor<2x1xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  // expected-error @below {{GPU path: only random exploration is supported (got explore_policy block_age; staleness_score and block_age run on the CPU path)}}
  %m = spin.fused_select %s positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>)
      {block_size = 16 : i64, explore = 2.5e-01, pooling = #spin.pooling<max>,
       sparsity = 5.0e-01, topk = 8 : i64,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x8xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x1xi32>)
      mask(%m : tensor<2x8xi1>)
      state(%s : !spin.state<layer = 0, last_observed = true>)
      positions(%positions : tensor<2x1xi32>)
      {block_size = 16 : i64, decay = 5.0e-01, k = 8 : i64,
       update = #spin.update<ema>}
      -> tensor<2x1x8xi32>, tensor<2x1x128xf32>, !spin.state<layer = 0, last_observed = true>
  return %t : tensor<2x1x8xi32>
}

// -----

// MTP with block-level (A2) state runs on the CPU path only.
func.func @commit_rejects_block_level_state(
    %lengths: tensor<2x2xi32> {spin.input = "lengths"},
    %positions: tensor<2x2xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids},
    %accepted: tensor<2xi32> {spin.accepted}) -> tensor<2x8xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, level = block>
  // expected-error @below {{GPU path: block-level state (the A2 reduction) is not supported; MTP with A2 runs on the CPU path}}
  %c = spin.commit %s accepted(%accepted : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0, level = block>
  %m = spin.fused_select %c positions(%positions : tensor<2x2xi32>)
      lengths(%lengths : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       reduction = #spin.reduction<a2>}
      : !spin.state<layer = 0, level = block> -> tensor<2x8xi1>
  return %m : tensor<2x8xi1>
}

// -----

// The GPU state pool keeps no last_observed (the block-age policies).
func.func @commit_rejects_last_observed_state(
    %lengths: tensor<2x2xi32> {spin.input = "lengths"},
    %positions: tensor<2x2xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids},
    %accepted: tensor<2xi32> {spin.accepted}) -> tensor<2x8xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  // expected-error @below {{GPU path: states with last_observed (the block-age exploration policies) are not supported}}
  %c = spin.commit %s accepted(%accepted : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0, last_observed = true>
  %m = spin.fused_select %c positions(%positions : tensor<2x2xi32>)
      lengths(%lengths : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x8xi1>
  return %m : tensor<2x8xi1>
}

// -----

// The replay's row stride is the buffering step's row count.
func.func @commit_rejects_a_graph_without_an_mtp_step(
    %lengths: tensor<2x2xi32> {spin.input = "lengths"},
    %positions: tensor<2x2xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids},
    %accepted: tensor<2xi32> {spin.accepted}) -> tensor<2x8xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  // expected-error @below {{GPU path: a commit needs the graph's MTP step (spin.observe or spin.fused_score with update = observe) to size the buffer}}
  %c = spin.commit %s accepted(%accepted : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %m = spin.fused_select %c positions(%positions : tensor<2x2xi32>)
      lengths(%lengths : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  return %m : tensor<2x8xi1>
}

// -----

// One state pool buffers one row count: two MTP layers of one graph must
// agree on it.
func.func @observe_rejects_mtp_layers_with_different_rows(
    %q2: tensor<2x2x16x64xbf16> {spin.input = "q"},
    %w2: tensor<2x2x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %n2: tensor<2x2xi32> {spin.input = "lengths"},
    %p2: tensor<2x2xi32> {spin.positions},
    %n3: tensor<2x3xi32> {spin.input = "lengths_1"},
    %p3: tensor<2x3xi32> {spin.input = "positions_1"},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x2x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p2 : tensor<2x2xi32>)
      lengths(%n2 : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  // expected-error @below {{GPU path: MTP steps of one graph must have the same number of rows (this one has 2, another 3): the state pool buffers one row count}}
  %t, %z, %s1 = spin.fused_score q(%q2 : tensor<2x2x16x64xbf16>)
      w(%w2 : tensor<2x2x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%n2 : tensor<2x2xi32>)
      mask(%m : tensor<2x8xi1>) state(%s : !spin.state<layer = 0>)
      positions(%p2 : tensor<2x2xi32>)
      {block_size = 16 : i64, k = 8 : i64, update = #spin.update<observe>, decay = 5.0e-01}
      -> tensor<2x2x8xi32>, tensor<2x2x128xf32>, !spin.state<layer = 0>
  %t1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %z3 = tensor.empty() : tensor<2x3x128xf32>
  %m1 = spin.fused_select %t1 positions(%p3 : tensor<2x3xi32>)
      lengths(%n3 : tensor<2x3xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 1> -> tensor<2x8xi1>
  %o = spin.observe %t1 scores(%z3 : tensor<2x3x128xf32>)
      positions(%p3 : tensor<2x3xi32>) lengths(%n3 : tensor<2x3xi32>)
      mask(%m1 : tensor<2x8xi1>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 1>
  return %t : tensor<2x2x8xi32>
}

// -----

// The sparse scores of a fused step live in selected-block order in a
// scratch buffer: a graph that returns them gets an error, not an output
// that no kernel writes.
// expected-error @below {{GPU path: result 1 ("scores") is not computed by any kernel; a GPU graph may return top-K indices, block sparsity and a dense indexer's scores}}
func.func @rejects_returning_sparse_scores(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
    %w: tensor<2x1x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %positions: tensor<2x1xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> (tensor<2x1x8xi32>, tensor<2x1x128xf32>) {
  %state = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %mask = spin.fused_select %state positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>) {block_size = 16 : i64,
      pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  %indices, %scores = spin.fused_score q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x1xi32>)
      mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64}
      -> tensor<2x1x8xi32>, tensor<2x1x128xf32>
  return %indices, %scores : tensor<2x1x8xi32>, tensor<2x1x128xf32>
}

// -----

// The copying warpgroup's kernel takes fp8 queries only (the configure pass
// sets copy_warpgroup only where the kernel applies; set by hand here).
func.func @rejects_copy_warpgroup_with_bf16_queries(%q: tensor<1x1x64x128xbf16> {spin.input = "q"},
    %w: tensor<1x1x64xf32> {spin.input = "w"},
    %keys: tensor<?x64x128xf8E4M3FN> {spin.input = "keys"},
    %scales: tensor<?x64xf32> {spin.input = "scales"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x256xf32> {
  // expected-error @below {{GPU path: copy_warpgroup scores fp8 keys with fp8 queries, Dh = 128, pages of a multiple of 64 slots and at most 256 heads x rows a CTA (got Dh = 128, pages of 64, 1 rows x 64 heads, fp8 keys yes, fp8 queries no)}}
  %z = spin.dense_indexer q(%q : tensor<1x1x64x128xbf16>)
      w(%w : tensor<1x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>)
      {spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 8, m_tiles = 1, wgmma = true, copy_warpgroup = true>}
      -> tensor<1x1x256xf32>
  return %z : tensor<1x1x256xf32>
}

// -----

// A ring tile of the copying warpgroup (64 slots) must lie in one selected
// block (set by hand here: the configure pass keeps blocks of 32 on the
// other kernel).
func.func @rejects_copy_warpgroup_with_small_blocks(%q: tensor<2x1x64x128xf8E4M3FN> {spin.input = "q"},
    %w: tensor<2x1x64xf32> {spin.input = "w"},
    %keys: tensor<?x64x128xf8E4M3FN> {spin.input = "keys"},
    %scales: tensor<?x64xf32> {spin.input = "scales"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %positions: tensor<2x1xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>)
      {block_size = 32 : i64, pooling = #spin.pooling<max>,
       sparsity = 5.0e-01, topk = 8 : i64}
      : !spin.state<layer = 0> -> tensor<2x16xi1>
  // expected-error @below {{GPU path: copy_warpgroup scores blocks of a multiple of 64 slots (got block_size = 32)}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x64x128xf8E4M3FN>)
      w(%w : tensor<2x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x1xi32>)
      mask(%m : tensor<2x16xi1>)
      {block_size = 32 : i64, k = 8 : i64,
       spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 8, m_tiles = 1, wgmma = true, copy_warpgroup = true>}
      -> tensor<2x1x8xi32>, tensor<2x1x512xf32>
  return %t : tensor<2x1x8xi32>
}

// -----

// A multi-row selection runs on one CTA a request or on one per row.
func.func @rejects_row_ctas_other_than_rows(%q: tensor<2x3x8x64xbf16> {spin.input = "q"},
    %w: tensor<2x3x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x3xi32> {spin.input = "lengths"},
    %positions: tensor<2x3xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x3x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  // expected-error @below {{GPU path: #spin.select_config's row_ctas must be 1 or the step's rows (3), got 2}}
  %m = spin.fused_select %s positions(%positions : tensor<2x3xi32>)
      lengths(%lengths : tensor<2x3xi32>)
      {block_size = 16 : i64, pooling = #spin.pooling<max>,
       sparsity = 5.0e-01, topk = 8 : i64,
       spin.select_config = #spin.select_config<prefetch_on_miss = false, row_ctas = 2>}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t, %z = spin.fused_score q(%q : tensor<2x3x8x64xbf16>)
      w(%w : tensor<2x3x8xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x3xi32>)
      mask(%m : tensor<2x8xi1>)
      {block_size = 16 : i64, k = 8 : i64}
      -> tensor<2x3x8xi32>, tensor<2x3x128xf32>
  return %t : tensor<2x3x8xi32>
}

// -----

// The kernels address the step's scores with 32-bit offsets: 2048 rows of
// 2^20 slots are 2^31 entries.
func.func @rejects_scores_past_32_bit_offsets(%q: tensor<2048x1x8x32xbf16> {spin.input = "q"},
    %w: tensor<2048x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x64x32xbf16> {spin.input = "keys"},
    %table: tensor<2048x16384xi32> {spin.input = "block_table"},
    %lengths: tensor<2048x1xi32> {spin.input = "lengths"}) -> tensor<2048x1x1048576xf32> {
  // expected-error @below {{GPU path: the step's scores, B x R x slots = 2048 x 1 x 1048576, must be at most 2^31 - 1 entries (the kernels' offsets are 32-bit)}}
  %z = spin.dense_indexer q(%q : tensor<2048x1x8x32xbf16>)
      w(%w : tensor<2048x1x8xf32>) keys(%keys : tensor<?x64x32xbf16>)
      block_table(%table : tensor<2048x16384xi32>)
      lengths(%lengths : tensor<2048x1xi32>) -> tensor<2048x1x1048576xf32>
  return %z : tensor<2048x1x1048576xf32>
}

// -----

func.func @rejects_a_topk_past_32_bit_offsets(%z: tensor<1024x2x1048576xf32> {spin.input = "scores"},
    %lengths: tensor<1024x2xi32> {spin.input = "lengths"}) -> tensor<1024x2x16xi32> {
  // expected-error @below {{GPU path: the step's scores, B x R x slots = 1024 x 2 x 1048576, must be at most 2^31 - 1 entries (the kernels' offsets are 32-bit)}}
  %t = spin.topk %z lengths(%lengths : tensor<1024x2xi32>) {k = 16 : i64}
      : tensor<1024x2x1048576xf32> -> tensor<1024x2x16xi32>
  return %t : tensor<1024x2x16xi32>
}
