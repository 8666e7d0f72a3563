// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu --verify-diagnostics

// f32 keys have no tensor-core path (tf32 would change the scores).
func.func @rejects_f32_keys(%q: tensor<1x1x8x32xbf16> {spin.input = "q"},
    %w: tensor<1x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xf32> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: keys must be bf16, f16 or fp8 e4m3 and queries bf16 or f16 (got 'f32' keys, 'bf16' queries)}}
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
