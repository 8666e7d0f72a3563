// RUN: spin-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// The dialect's discardable attributes (SpinDialect.td): the role markers
// of step-function arguments, state fields named by the compiler-runtime
// contract (spin/Runtime/Abi.def), the launch plan's attributes. One case
// per verifier branch of SpinDialect.cpp.

// CHECK-LABEL: func.func @accepts_every_role
// CHECK-SAME: {spin.input = "q"}
// CHECK-SAME: {spin.positions}
// CHECK-SAME: {spin.request_ids}
// CHECK-SAME: {spin.slots}
// CHECK-SAME: {spin.layer = 0 : i64, spin.state = "obs_z"}
// CHECK-SAME: -> (tensor<2xi32>, tensor<2xf32> {spin.sparsity})
func.func @accepts_every_role(%q: tensor<2xf32> {spin.input = "q"},
                              %p: tensor<2x1xi32> {spin.positions},
                              %ids: tensor<2xi64> {spin.request_ids},
                              %slots: memref<?xi32> {spin.slots},
                              %z: memref<?x?x?xf32> {spin.state = "obs_z", spin.layer = 0 : i64})
    -> (tensor<2xi32>, tensor<2xf32> {spin.sparsity}) {
  %c = arith.constant dense<0> : tensor<2xi32>
  %f = arith.constant dense<0.0> : tensor<2xf32>
  return %c, %f : tensor<2xi32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @accepts_a_launch_plan
// CHECK-SAME: spin.role = "scratch"
// CHECK-SAME: spin.role = "dim"
// CHECK: spin.capacity = 128 : i64
func.func @accepts_a_launch_plan(
    %a: !llvm.ptr<1> {spin.role = "state", spin.name = "v", spin.dtype = "f32",
                      spin.shape = [-1, -1], spin.layer = 0 : i64},
    %b: !llvm.ptr<1> {spin.role = "scratch", spin.name = "scores", spin.bytes = 64 : i64},
    %c: i32 {spin.role = "dim", spin.argument = 0 : i64, spin.dim = 0 : i64})
    attributes {spin.launch_plan, spin.events = 1 : i64, spin.layers = 1 : i64,
                spin.capacity = 128 : i64, spin.block_size = 16 : i64} {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.bogus' is not an argument attribute of the spin dialect}}
func.func @rejects_an_unknown_argument_attribute(%a: tensor<2xi32> {spin.bogus}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.input' must be a non-empty string, got ""}}
func.func @rejects_an_empty_input_name(%a: tensor<2xi32> {spin.input = ""}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.positions' must be a unit attribute, got 1 : i64}}
func.func @rejects_a_valued_role_marker(%a: tensor<2x1xi32> {spin.positions = 1 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.state' must be the name of a state field (v, d, it, obs_rows, obs_pos, obs_len, obs_mask, obs_z, pred_at, pred_keys, last_observed or valid), got "w"}}
func.func @rejects_an_unknown_state_field(%a: memref<?xf32> {spin.state = "w", spin.layer = 0 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.state' needs a 'spin.layer' on the same argument}}
func.func @rejects_a_state_field_without_layer(%a: memref<?x?xf32> {spin.state = "v"}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.layer' must be a non-negative integer, got -1 : i64}}
func.func @rejects_a_negative_layer(%a: memref<?x?xf32> {spin.state = "v", spin.layer = -1 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.layer' must be a layer id of at most 2147483646, got 2147483647 : i64}}
func.func @rejects_a_layer_past_int32(%a: memref<?x?xf32> {spin.state = "v", spin.layer = 2147483647 : i64}) {
  return
}

// -----

// Wider than 64 bits: refused whole, never truncated by the readers'
// getInt().
// expected-error @+1 {{argument 0: 'spin.dim' must be a non-negative integer, got 18446744073709551616 : i128}}
func.func @rejects_a_dim_wider_than_64_bits(%a: i32 {spin.role = "dim", spin.argument = 0 : i64, spin.dim = 18446744073709551616 : i128}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.positions' and 'spin.request_ids' mark the same argument}}
func.func @rejects_two_roles_on_one_argument(%a: tensor<2xi64> {spin.positions, spin.request_ids}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.role' must be an argument role or a launch-parameter kind, got "cache"}}
func.func @rejects_an_unknown_plan_role(%a: !llvm.ptr<1> {spin.role = "cache"}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.dtype' must be an element type of the runtime, got "f64"}}
func.func @rejects_an_unknown_dtype(%a: !llvm.ptr<1> {spin.dtype = "f64"}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.shape' must be an array of sizes (-1 for a run-time size), got [-2]}}
func.func @rejects_a_bad_shape(%a: !llvm.ptr<1> {spin.shape = [-2]}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'spin.bytes' must be a positive integer, got 0 : i64}}
func.func @rejects_an_empty_scratch(%a: !llvm.ptr<1> {spin.bytes = 0 : i64}) {
  return
}

// -----

// expected-error @+1 {{result 0: 'spin.positions' is not a result attribute of the spin dialect}}
func.func @rejects_an_unknown_result_attribute() -> (tensor<2xi32> {spin.positions}) {
  %c = arith.constant dense<0> : tensor<2xi32>
  return %c : tensor<2xi32>
}

// -----

func.func @rejects_a_launch_plan_mark_on_an_op() {
  // expected-error @+1 {{'spin.launch_plan' marks functions only}}
  %c = arith.constant {spin.launch_plan} 0 : i32
  return
}

// -----

// expected-error @+1 {{'spin.events' must be a non-negative integer, got -3 : i64}}
func.func @rejects_negative_events() attributes {spin.events = -3 : i64} {
  return
}

// -----

// expected-error @+1 {{'spin.record' must be an event index, or -1 for none, got -2 : i64}}
func.func @rejects_a_bad_record() attributes {spin.record = -2 : i64} {
  return
}

// -----

// expected-error @+1 {{'spin.wait' must be an array of event indices, got [0, -1]}}
func.func @rejects_a_bad_wait() attributes {spin.wait = [0, -1]} {
  return
}

// -----

// expected-error @+1 {{'spin.unknown' is not an operation attribute of the spin dialect}}
func.func @rejects_an_unknown_operation_attribute() attributes {spin.unknown} {
  return
}

// -----

// The GPU kernel configurations (SpinAttrs.td), on the ops they configure.
// CHECK-LABEL: func.func @kernel_configs
// CHECK: spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = true>
// CHECK: spin.topk_config = #spin.topk_config<threads = 512, cluster = 4, merge_ranks = true>
func.func @kernel_configs(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %q: tensor<2x1x8x64xbf16>,
                          %w: tensor<2x1x8xf32>, %keys: tensor<?x16x64xbf16>, %table: tensor<2x4xi32>)
    -> (tensor<2x1x64xf32>, tensor<2x1x8xi32>) {
  %s = spin.dense_indexer q(%q : tensor<2x1x8x64xbf16>) w(%w : tensor<2x1x8xf32>)
      keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>)
      {spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = true>}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>)
      {k = 8 : i64, spin.topk_config = #spin.topk_config<threads = 512, cluster = 4, merge_ranks = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %s, %t : tensor<2x1x64xf32>, tensor<2x1x8xi32>
}

// -----

func.func @topk_config_on_indexer(%q: tensor<2x1x8x64xbf16>, %w: tensor<2x1x8xf32>,
                                  %keys: tensor<?x16x64xbf16>, %table: tensor<2x4xi32>,
                                  %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  // expected-error @+1 {{'spin.topk_config' configures the top-K of spin.topk and spin.fused_score only}}
  %s = spin.dense_indexer q(%q : tensor<2x1x8x64xbf16>) w(%w : tensor<2x1x8xf32>)
      keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>)
      {spin.topk_config = #spin.topk_config<threads = 512, cluster = 1, merge_ranks = false>}
      -> tensor<2x1x64xf32>
  return %s : tensor<2x1x64xf32>
}

// -----

func.func @score_config_of_wrong_kind(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{'spin.score_config' configures the scoring of spin.dense_indexer and spin.fused_score only}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.score_config = 1 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @topk_config_not_an_attr(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{'spin.topk_config' must be a #spin.topk_config, got 1 : i64}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.topk_config = 1 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @topk_config_bad_cluster(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{topk_config: cluster must be in [1, 8], got 16}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.topk_config = #spin.topk_config<threads = 512, cluster = 16, merge_ranks = false>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @topk_config_merge_needs_cluster(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{topk_config: merge_ranks needs 512 threads and a cluster of at least 2, got threads = 1024, cluster = 2}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.topk_config = #spin.topk_config<threads = 1024, cluster = 2, merge_ranks = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @score_config_bad_tiles(%q: tensor<2x1x8x64xbf16>, %w: tensor<2x1x8xf32>,
                                  %keys: tensor<?x16x64xbf16>, %table: tensor<2x4xi32>,
                                  %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  // expected-error @+4 {{score_config: tiles_per_warp must be positive, got 0}}
  %s = spin.dense_indexer q(%q : tensor<2x1x8x64xbf16>) w(%w : tensor<2x1x8xf32>)
      keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>)
      {spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 0, m_tiles = 1, wgmma = false>}
      -> tensor<2x1x64xf32>
  return %s : tensor<2x1x64xf32>
}

// -----

// Only the copying warpgroup's tensor-map loads carry the L2 policy.
func.func @score_config_evict_first_needs_copy_warpgroup(
    %q: tensor<2x1x8x64xbf16>, %w: tensor<2x1x8xf32>, %keys: tensor<?x16x64xbf16>,
    %table: tensor<2x4xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  // expected-error @+4 {{score_config: evict_first needs copy_warpgroup}}
  %s = spin.dense_indexer q(%q : tensor<2x1x8x64xbf16>) w(%w : tensor<2x1x8xf32>)
      keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>)
      {spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 8, m_tiles = 1, wgmma = true, evict_first = true>}
      -> tensor<2x1x64xf32>
  return %s : tensor<2x1x64xf32>
}

// -----

func.func @select_config_on_topk(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{'spin.select_config' configures spin.fused_select only}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @select_config_negative_prefetch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{select_config: scoring_prefetch_ctas must be in [0, 2^31), got -1}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = false, scoring_prefetch_ctas = -1>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @select_config_prefetch_with_miss_prefetch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{select_config: scoring_prefetch_ctas needs prefetch_on_miss = false (with the miss prefetch the scoring kernel does not start early), got 4}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = true, scoring_prefetch_ctas = 4>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @select_config_row_ctas_past_cluster(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{select_config: row_ctas must be in [1, 8] (a portable cluster), got 9}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = false, row_ctas = 9>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

func.func @select_config_no_row_ctas(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  // expected-error @+1 {{select_config: row_ctas must be in [1, 8] (a portable cluster), got 0}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = false, row_ctas = 0>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
