// RUN: spin-opt %s -split-input-file -verify-diagnostics

// One case per verifier branch of SpinOps.cpp / SpinTypes.cpp and per ODS
// constraint that matters. Shapes: B = 2, R = 1 (4 for MTP), H = 4, Dh = 16,
// pages of S = 16 slots, MB = 4 pages (NS = 64), block_size 16 (NB = 4).

//===----------------------------------------------------------------------===//
// !spin.state
//===----------------------------------------------------------------------===//

func.func @state_rejects_negative_layer(%ids: tensor<2xi64>) {
  // expected-error @+1 {{layer id must be non-negative, got -1}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = -1>
  return
}

// -----

// The runtime counts layers in an int32; a larger id would also collide
// with DenseMap's reserved keys in the passes.
func.func @state_rejects_a_layer_past_int32(%ids: tensor<2xi64>) {
  // expected-error @+1 {{layer id must be at most 2147483646 (the runtime counts layers in an int32), got 9223372036854775807}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 9223372036854775807>
  return
}

// -----

func.func @state_rejects_unknown_level(%ids: tensor<2xi64>) {
  // expected-error @+2 {{expected ::mlir::spin::StateLevel to be one of: slot, block}}
  // expected-error @+1 {{failed to parse Spin_StateType parameter 'level' which is to be a `::mlir::spin::StateLevel`}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, level = warp>
  return
}

// -----

func.func @state_rejects_missing_layer(%ids: tensor<2xi64>) {
  // expected-error @+1 {{struct is missing required parameter: layer}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<level = block>
  return
}

// -----

func.func @state_rejects_missing_comma(%ids: tensor<2xi64>) {
  // expected-error @+1 {{expected '>'}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0 level = block>
  return
}

// -----

func.func @state_rejects_non_boolean_last_observed(%ids: tensor<2xi64>) {
  // expected-error @+2 {{expected 'true' or 'false', got 'yes'}}
  // expected-error @+1 {{failed to parse Spin_StateType parameter 'last_observed' which is to be a `bool`}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = yes>
  return
}

//===----------------------------------------------------------------------===//
// spin.layer_state, spin.reset
//===----------------------------------------------------------------------===//

// -----

func.func @layer_state_rejects_i32_request_ids(%ids: tensor<2xi32>) {
  // expected-error @+1 {{'spin.layer_state' op operand #0 must be 1D tensor of 64-bit signless integer values, but got 'tensor<2xi32>'}}
  %s = spin.layer_state %ids : tensor<2xi32> -> !spin.state<layer = 0>
  return
}

// -----

func.func @layer_state_rejects_rank2_request_ids(%ids: tensor<2x1xi64>) {
  // expected-error @+1 {{'spin.layer_state' op operand #0 must be 1D tensor of 64-bit signless integer values, but got 'tensor<2x1xi64>'}}
  %s = spin.layer_state %ids : tensor<2x1xi64> -> !spin.state<layer = 0>
  return
}

// -----

func.func @reset_rejects_i32_requests(%s: !spin.state<layer = 0>, %fresh: tensor<2xi32>) {
  // expected-error @+1 {{'spin.reset' op operand #1 must be 1D tensor of 1-bit signless integer values, but got 'tensor<2xi32>'}}
  %s1 = spin.reset %s requests(%fresh : tensor<2xi32>) : !spin.state<layer = 0>
  return
}

// -----

func.func @reset_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>) {
  // expected-error @+1 {{'spin.reset' op failed to verify that all of {state, new_state} have same type}}
  %s1 = "spin.reset"(%s) : (!spin.state<layer = 0>) -> !spin.state<layer = 1>
  return
}

// -----

func.func @reset_rejects_missing_requests_paren(%s: !spin.state<layer = 0>, %fresh: tensor<2xi1>) {
  // expected-error @+1 {{expected '('}}
  %s1 = spin.reset %s requests %fresh : tensor<2xi1> : !spin.state<layer = 0>
  return
}

//===----------------------------------------------------------------------===//
// spin.dense_indexer
//===----------------------------------------------------------------------===//

// -----

func.func @dense_indexer_rejects_fp8_keys_without_scales(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op fp8 e4m3 keys need per-slot 'scales'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_scales_with_bf16_keys(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %sc: tensor<8x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op 'scales' are only taken with fp8 e4m3 keys, not 'bf16' keys}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_i8_query(%q: tensor<2x1x4x16xi8>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #0 must be 4D tensor of bfloat16 type or 16-bit float or 32-bit float or f8E4M3FN type values, but got 'tensor<2x1x4x16xi8>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xi8>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

// fp8 e4m3 queries are only taken with fp8 e4m3 keys (SPIN_SPEC §1).
func.func @dense_indexer_rejects_fp8_query_with_bf16_keys(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op fp8 e4m3 queries need fp8 e4m3 keys, not 'bf16' keys}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_fp8_query_with_f16_keys(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op fp8 e4m3 queries need fp8 e4m3 keys, not 'f16' keys}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_fp8_query_with_f32_keys(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op fp8 e4m3 queries need fp8 e4m3 keys, not 'f32' keys}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

// The query type constraint still rejects the other fp8 format.
func.func @dense_indexer_rejects_fp8_e5m2_query(%q: tensor<2x1x4x16xf8E5M2>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #0 must be 4D tensor of bfloat16 type or 16-bit float or 32-bit float or f8E4M3FN type values, but got 'tensor<2x1x4x16xf8E5M2>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xf8E5M2>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_rank3_query(%q: tensor<2x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #0 must be 4D tensor of bfloat16 type or 16-bit float or 32-bit float or f8E4M3FN type values, but got 'tensor<2x4x16xbf16>'}}
  %z = spin.dense_indexer q(%q : tensor<2x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_bf16_weights(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xbf16>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #1 must be 3D tensor of 32-bit float values, but got 'tensor<2x1x4xbf16>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xbf16>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_f8E5M2_keys(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E5M2>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #2 must be 3D tensor of bfloat16 type or 16-bit float or 32-bit float or f8E4M3FN type values, but got 'tensor<8x16x16xf8E5M2>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E5M2>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_rank4_keys(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x1x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #2 must be 3D tensor of bfloat16 type or 16-bit float or 32-bit float or f8E4M3FN type values, but got 'tensor<8x16x1x16xbf16>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x1x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_f16_scales(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #3 must be 2D tensor of 32-bit float values, but got 'tensor<8x16xf16>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<8x16xf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_i64_block_table(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi64>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #3 must be 2D tensor of 32-bit signless integer values, but got 'tensor<2x4xi64>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi64>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_i64_lengths(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi64>) {
  // expected-error @+1 {{'spin.dense_indexer' op operand #4 must be 2D tensor of 32-bit signless integer values, but got 'tensor<2x1xi64>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi64>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_f16_scores(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op result #0 must be 3D tensor of 32-bit float values, but got 'tensor<2x1x64xf16>'}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf16>
  return
}

// -----

func.func @dense_indexer_rejects_weights_batch_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<3x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op batch size mismatch: 'w' dim 0 is 3 but 'q' dim 0 is 2}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<3x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_block_table_batch_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<3x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op batch size mismatch: 'block_table' dim 0 is 3 but 'q' dim 0 is 2}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<3x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_lengths_batch_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<3x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op batch size mismatch: 'lengths' dim 0 is 3 but 'q' dim 0 is 2}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<3x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

// Dynamic sizes are skipped: the first static batch size here is the one of 'w'.
func.func @dense_indexer_rejects_scores_batch_mismatch(%q: tensor<?x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<?x4xi32>, %n: tensor<?x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op batch size mismatch: 'scores' dim 0 is 3 but 'w' dim 0 is 2}}
  %z = spin.dense_indexer q(%q : tensor<?x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<?x4xi32>) lengths(%n : tensor<?x1xi32>) -> tensor<3x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_lengths_row_count_mismatch(%q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op row count mismatch: 'lengths' dim 1 is 1 but 'q' dim 1 is 4}}
  %z = spin.dense_indexer q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x4x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_scores_row_count_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op row count mismatch: 'scores' dim 1 is 4 but 'q' dim 1 is 1}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x4x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_head_count_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x8xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op head count mismatch: 'w' dim 2 is 8 but 'q' dim 2 is 4}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x8xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_head_dim_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x32xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op head dim mismatch: 'keys' dim 2 is 32 but 'q' dim 3 is 16}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x32xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_scales_page_count_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<4x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op page count mismatch: 'scales' dim 0 is 4 but 'keys' dim 0 is 8}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<4x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_scales_page_size_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xf8E4M3FN>, %sc: tensor<?x32xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op page size mismatch: 'scales' dim 1 is 32 but 'keys' dim 1 is 16}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xf8E4M3FN>) scales(%sc : tensor<?x32xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @dense_indexer_rejects_slots_not_block_table_times_page_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.dense_indexer' op 'scores' dim 2 (48 slots) must equal 'block_table' dim 1 (4 pages) times the page size (16)}}
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x48xf32>
  return
}

//===----------------------------------------------------------------------===//
// spin.sparse_indexer
//===----------------------------------------------------------------------===//

// -----

func.func @sparse_indexer_rejects_fp8_keys_without_scales(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op fp8 e4m3 keys need per-slot 'scales'}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_scales_with_f32_keys(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf32>, %sc: tensor<8x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op 'scales' are only taken with fp8 e4m3 keys, not 'f32' keys}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf32>) scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_fp8_query_with_f16_keys(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op fp8 e4m3 queries need fp8 e4m3 keys, not 'f16' keys}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_head_dim_mismatch(%q: tensor<2x1x4x16xf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x8xf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op head dim mismatch: 'keys' dim 2 is 8 but 'q' dim 3 is 16}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x8xf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_slots_not_block_table_times_page_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x8xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op 'scores' dim 2 (64 slots) must equal 'block_table' dim 1 (8 pages) times the page size (16)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_block_size_not_dividing_page(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x2xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op block_size (32) must divide the page size (16)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x2xi1>) {block_size = 32 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_zero_block_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 0 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

// Sizes past 2^31 - 1 are refused before the slot arithmetic
// (blocks x block_size) can overflow.
func.func @sparse_indexer_rejects_a_block_size_past_int32(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive whose maximum value is 2147483647}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 9223372036854775807 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_a_static_size_past_int32(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4611686018427387904xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op operand #5 dim 1 is 4611686018427387904: static sizes must be at most 2147483647 (the runtime's sizes and indices are 32-bit)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4611686018427387904xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_missing_block_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op requires attribute 'block_size'}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_i8_mask(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi8>) {
  // expected-error @+1 {{'spin.sparse_indexer' op operand #5 must be 2D tensor of 1-bit signless integer values, but got 'tensor<2x4xi8>'}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi8>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_mask_batch_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<3x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op batch size mismatch: 'mask' dim 0 is 3 but 'q' dim 0 is 2}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<3x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

// The mask's batch size is checked against the inputs even when the result's
// batch size is dynamic.
func.func @sparse_indexer_rejects_mask_batch_mismatch_with_dynamic_scores(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<3x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op batch size mismatch: 'mask' dim 0 is 3 but 'q' dim 0 is 2}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<3x4xi1>) {block_size = 16 : i64} -> tensor<?x1x64xf32>
  return
}

// -----

func.func @sparse_indexer_rejects_slots_not_mask_blocks_times_block_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op 'scores' dim 2 (64 slots) must equal 'mask' dim 1 (4 blocks) times block_size (8)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 8 : i64} -> tensor<2x1x64xf32>
  return
}

// -----

// With a dynamic page size and block count only the tiling of the slots by
// block_size can be checked.
func.func @sparse_indexer_rejects_slots_not_multiple_of_block_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x?x16xbf16>, %bt: tensor<2x?xi32>, %n: tensor<2x1xi32>, %m: tensor<2x?xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op 'scores' dim 2 (60 slots) is not a multiple of block_size (16)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x?x16xbf16>) block_table(%bt : tensor<2x?xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x?xi1>) {block_size = 16 : i64} -> tensor<2x1x60xf32>
  return
}

// -----

// With a dynamic slot count in the result, the mask must still tile the
// request's MB * S slots.
func.func @sparse_indexer_rejects_mask_blocks_not_tiling_block_table(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x3xi1>) {
  // expected-error @+1 {{'spin.sparse_indexer' op 'mask' dim 1 (3 blocks) times block_size (16) must equal 'block_table' dim 1 (4 pages) times the page size (16)}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x3xi1>) {block_size = 16 : i64} -> tensor<2x1x?xf32>
  return
}

//===----------------------------------------------------------------------===//
// spin.topk
//===----------------------------------------------------------------------===//

// -----

func.func @topk_rejects_k_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op result holds 16 indices per row but k is 32}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 32 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_zero_k(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op attribute 'k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 0 : i64} : tensor<2x1x64xf32> -> tensor<2x1x?xi32>
  return
}

// -----

func.func @topk_rejects_a_k_past_int32(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op attribute 'k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive whose maximum value is 2147483647}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 2147483648 : i64} : tensor<2x1x64xf32> -> tensor<2x1x?xi32>
  return
}

// -----

func.func @topk_rejects_negative_k(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op attribute 'k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = -16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x?xi32>
  return
}

// -----

func.func @topk_rejects_missing_k(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op requires attribute 'k'}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_i64_indices(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op result #0 must be 3D tensor of 32-bit signless integer values, but got 'tensor<2x1x16xi64>'}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi64>
  return
}

// -----

func.func @topk_rejects_rank2_scores(%z: tensor<2x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op operand #0 must be 3D tensor of 32-bit float values, but got 'tensor<2x64xf32>'}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_batch_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op batch size mismatch: 'indices' dim 0 is 4 but 'scores' dim 0 is 2}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x1x64xf32> -> tensor<4x1x16xi32>
  return
}

// -----

func.func @topk_rejects_row_count_mismatch(%z: tensor<2x4x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op row count mismatch: 'lengths' dim 1 is 1 but 'scores' dim 1 is 4}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x4x64xf32> -> tensor<2x4x16xi32>
  return
}

// -----

func.func @topk_rejects_mask_without_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.topk' op needs 'block_size' to read a block 'mask'}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_block_size_without_mask(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.topk' op takes 'block_size' only together with a block 'mask'}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_zero_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.topk' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 16 : i64, block_size = 0 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_mask_batch_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<3x4xi1>) {
  // expected-error @+1 {{'spin.topk' op batch size mismatch: 'mask' dim 0 is 3 but 'scores' dim 0 is 2}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<3x4xi1>) {k = 16 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

// The mask's batch size is checked against 'lengths' even when the one of
// 'scores' is dynamic.
func.func @topk_rejects_mask_batch_mismatch_with_dynamic_scores(%z: tensor<?x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<3x4xi1>) {
  // expected-error @+1 {{'spin.topk' op batch size mismatch: 'mask' dim 0 is 3 but 'lengths' dim 0 is 2}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<3x4xi1>) {k = 16 : i64, block_size = 16 : i64} : tensor<?x1x64xf32> -> tensor<?x1x16xi32>
  return
}

// -----

func.func @topk_rejects_slots_not_mask_blocks_times_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x8xi1>) {
  // expected-error @+1 {{'spin.topk' op 'scores' dim 2 (64 slots) must equal 'mask' dim 1 (8 blocks) times block_size (16)}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x8xi1>) {k = 16 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_slots_not_multiple_of_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x?xi1>) {
  // expected-error @+1 {{'spin.topk' op 'scores' dim 2 (64 slots) is not a multiple of block_size (24)}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x?xi1>) {k = 16 : i64, block_size = 24 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

// -----

func.func @topk_rejects_missing_lengths_keyword(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{custom op 'spin.topk' expected 'lengths'}}
  %t = spin.topk %z (%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}

//===----------------------------------------------------------------------===//
// spin.predict
//===----------------------------------------------------------------------===//

// -----

func.func @predict_rejects_block_size_with_slot_state(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.predict' op takes 'block_size' only with a level = block state (variant A2)}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  return
}

// -----

func.func @predict_rejects_block_state_without_block_size(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.predict' op needs 'block_size' with a level = block state (variant A2)}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0, level = block> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @predict_rejects_zero_block_size(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.predict' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 0 : i64} : !spin.state<layer = 0, level = block> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @predict_rejects_batch_mismatch(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<3x1xi32>) {
  // expected-error @+1 {{'spin.predict' op batch size mismatch: 'lengths' dim 0 is 3 but 'positions' dim 0 is 2}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<3x1xi32>) : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  return
}

// -----

func.func @predict_rejects_row_count_mismatch(%s: !spin.state<layer = 0>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>) {
  // expected-error @+1 {{'spin.predict' op row count mismatch: 'prediction' dim 1 is 1 but 'positions' dim 1 is 4}}
  %z = spin.predict %s positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  return
}

// -----

func.func @predict_rejects_f16_prediction(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.predict' op result #0 must be 3D tensor of 32-bit float values, but got 'tensor<2x1x64xf16>'}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0> -> tensor<2x1x64xf16>
  return
}

//===----------------------------------------------------------------------===//
// spin.pool
//===----------------------------------------------------------------------===//

// -----

func.func @pool_rejects_unknown_pooling_kind(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+2 {{expected ::mlir::spin::PoolingKind to be one of: max, mean, top4}}
  // expected-error @+1 {{failed to parse Spin_PoolingKindAttr parameter 'value' which is to be a `::mlir::spin::PoolingKind`}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<median>, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @pool_rejects_missing_pooling(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op requires attribute 'pooling'}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @pool_rejects_reduction_as_pooling(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op attribute 'pooling' failed to satisfy constraint: how slot scores are pooled into a block score (SPIN_SPEC §3.3)}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.reduction<a1>, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @pool_rejects_negative_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = -16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return
}

// -----

func.func @pool_rejects_batch_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op batch size mismatch: 'block_scores' dim 0 is 1 but 'prediction' dim 0 is 2}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<1x1x4xf32>
  return
}

// -----

func.func @pool_rejects_row_count_mismatch(%z: tensor<2x4x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op row count mismatch: 'lengths' dim 1 is 1 but 'prediction' dim 1 is 4}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<mean>, block_size = 16 : i64} : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  return
}

// -----

func.func @pool_rejects_slots_not_blocks_times_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op 'prediction' dim 2 (64 slots) must equal 'block_scores' dim 2 (8 blocks) times block_size (16)}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<top4>, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x8xf32>
  return
}

// -----

func.func @pool_rejects_slots_not_multiple_of_block_size(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.pool' op 'prediction' dim 2 (64 slots) is not a multiple of block_size (48)}}
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 48 : i64} : tensor<2x1x64xf32> -> tensor<2x1x?xf32>
  return
}

//===----------------------------------------------------------------------===//
// spin.select_blocks
//===----------------------------------------------------------------------===//

// -----

func.func @select_blocks_rejects_a1_with_block_state(%s: !spin.state<layer = 0, level = block>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op reduction a1 needs a level = slot state, got '!spin.state<layer = 0, level = block>'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a0_with_block_state(%s: !spin.state<layer = 0, level = block>, %z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op reduction a0 needs a level = slot state, got '!spin.state<layer = 0, level = block>'}}
  %m = spin.select_blocks %s scores(%z : tensor<2x1x64xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a0>} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a2_with_slot_state(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op reduction a2 needs a level = block state, got '!spin.state<layer = 0>'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a2>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a0_with_explore(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op reduction a0 has no block budget to explore with; explore must be 0}}
  %m = spin.select_blocks %s scores(%z : tensor<2x1x64xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = 5.0e-02, reduction = #spin.reduction<a0>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_block_age_without_last_observed(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op explore_policy block_age ranks blocks by age and needs a state with last_observed = true, got '!spin.state<layer = 0>'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = 5.0e-02, explore_policy = #spin.explore_policy<block_age>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_staleness_score_without_last_observed(%s: !spin.state<layer = 1, level = block>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op explore_policy staleness_score ranks blocks by age and needs a state with last_observed = true, got '!spin.state<layer = 1, level = block>'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = 5.0e-02, reduction = #spin.reduction<a2>, explore_policy = #spin.explore_policy<staleness_score>} : !spin.state<layer = 1, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a0_with_age_policy(%s: !spin.state<layer = 0, last_observed = true>, %z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op reduction a0 has no block budget to explore with; explore_policy must be random, got block_age}}
  %m = spin.select_blocks %s scores(%z : tensor<2x1x64xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a0>, explore_policy = #spin.explore_policy<block_age>} : !spin.state<layer = 0, last_observed = true> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_unknown_explore_policy(%s: !spin.state<layer = 0, last_observed = true>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+2 {{expected ::mlir::spin::ExplorePolicy to be one of: random, staleness_score, block_age}}
  // expected-error @+1 {{failed to parse Spin_ExplorePolicyAttr parameter 'value' which is to be a `::mlir::spin::ExplorePolicy`}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = 5.0e-02, explore_policy = #spin.explore_policy<oldest>} : !spin.state<layer = 0, last_observed = true> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_unknown_reduction(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+2 {{expected ::mlir::spin::Reduction to be one of: a0, a1, a2}}
  // expected-error @+1 {{failed to parse Spin_ReductionAttr parameter 'value' which is to be a `::mlir::spin::Reduction`}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a3>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_unknown_mtp_mask(%s: !spin.state<layer = 0>, %sc: tensor<2x4x4xf32>, %n: tensor<2x4xi32>) {
  // expected-error @+2 {{expected ::mlir::spin::MtpMask to be one of: union, row0}}
  // expected-error @+1 {{failed to parse Spin_MtpMaskAttr parameter 'value' which is to be a `::mlir::spin::MtpMask`}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x4x4xf32>) lengths(%n : tensor<2x4xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, mtp_mask = #spin.mtp_mask<intersection>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_missing_sparsity(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op requires attribute 'sparsity'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_negative_sparsity(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'sparsity' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = -5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_sparsity_above_one(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'sparsity' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 1.5} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_negative_explore(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'explore' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = -1.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_explore_above_one(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'explore' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, explore = 2.0} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_f32_sparsity(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'sparsity' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01 : f32} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_zero_topk(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'topk' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 0 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_zero_block_size(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 0 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_i32_mask(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op result #0 must be 2D tensor of 1-bit signless integer values, but got 'tensor<2x4xi32>'}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi32>
  return
}

// -----

func.func @select_blocks_rejects_mask_batch_mismatch(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op batch size mismatch: 'mask' dim 0 is 3 but 'scores' dim 0 is 2}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<3x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_row_count_mismatch(%s: !spin.state<layer = 0>, %sc: tensor<2x4x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op row count mismatch: 'lengths' dim 1 is 1 but 'scores' dim 1 is 4}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x4x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a1_block_count_mismatch(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op block count mismatch: 'mask' dim 1 is 8 but 'scores' dim 2 is 4}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x8xi1>
  return
}

// -----

func.func @select_blocks_rejects_a2_block_count_mismatch(%s: !spin.state<layer = 0, level = block>, %sc: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op block count mismatch: 'mask' dim 1 is 4 but 'scores' dim 2 is 64}}
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x64xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a2>} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @select_blocks_rejects_a0_slots_not_blocks_times_block_size(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op 'scores' dim 2 (64 slots) must equal 'mask' dim 1 (64 blocks) times block_size (16)}}
  %m = spin.select_blocks %s scores(%z : tensor<2x1x64xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a0>} : !spin.state<layer = 0> -> tensor<2x64xi1>
  return
}

// -----

func.func @select_blocks_rejects_a0_slots_not_multiple_of_block_size(%s: !spin.state<layer = 0>, %z: tensor<2x1x40xf32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.select_blocks' op 'scores' dim 2 (40 slots) is not a multiple of block_size (16)}}
  %m = spin.select_blocks %s scores(%z : tensor<2x1x40xf32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01, reduction = #spin.reduction<a0>} : !spin.state<layer = 0> -> tensor<2x?xi1>
  return
}

//===----------------------------------------------------------------------===//
// spin.block_sparsity
//===----------------------------------------------------------------------===//

// -----

func.func @block_sparsity_rejects_lengths_batch_mismatch(%m: tensor<2x4xi1>, %n: tensor<3x1xi32>) {
  // expected-error @+1 {{'spin.block_sparsity' op batch size mismatch: 'lengths' dim 0 is 3 but 'mask' dim 0 is 2}}
  %r = spin.block_sparsity %m lengths(%n : tensor<3x1xi32>) {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<3x1xf32>
  return
}

// -----

func.func @block_sparsity_rejects_result_batch_mismatch(%m: tensor<?x4xi1>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.block_sparsity' op batch size mismatch: 'sparsity' dim 0 is 4 but 'lengths' dim 0 is 2}}
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<?x4xi1> -> tensor<4x1xf32>
  return
}

// -----

func.func @block_sparsity_rejects_row_count_mismatch(%m: tensor<2x4xi1>, %n: tensor<2x4xi32>) {
  // expected-error @+1 {{'spin.block_sparsity' op row count mismatch: 'sparsity' dim 1 is 1 but 'lengths' dim 1 is 4}}
  %r = spin.block_sparsity %m lengths(%n : tensor<2x4xi32>) {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
  return
}

// -----

func.func @block_sparsity_rejects_f16_result(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.block_sparsity' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<2x1xf16>'}}
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf16>
  return
}

// -----

func.func @block_sparsity_rejects_zero_block_size(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.block_sparsity' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 0 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// spin.ema_update
//===----------------------------------------------------------------------===//

// -----

func.func @ema_update_rejects_multiple_rows(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op updates from a single row per request, got 4 rows; buffer MTP rows with spin.observe and replay them with spin.commit}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

// The single-row rule also holds when only 'positions' and 'lengths' say how
// many rows there are.
func.func @ema_update_rejects_multiple_rows_with_dynamic_scores(%s: !spin.state<layer = 0>, %z: tensor<2x?x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op updates from a single row per request, got 4 rows; buffer MTP rows with spin.observe and replay them with spin.commit}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x?x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_pooling_with_slot_state(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op takes 'pooling' only with a level = block state (variant A2)}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64, pooling = #spin.pooling<max>} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_block_state_without_pooling(%s: !spin.state<layer = 0, level = block>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op needs 'pooling' with a level = block state (variant A2)}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0, level = block>
  return
}

// -----

func.func @ema_update_rejects_negative_decay(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op attribute 'decay' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = -5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_decay_above_one(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op attribute 'decay' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 1.5, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_missing_decay(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op requires attribute 'decay'}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_batch_mismatch(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<3x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op batch size mismatch: 'positions' dim 0 is 3 but 'scores' dim 0 is 2}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<3x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @ema_update_rejects_slots_not_blocks_times_block_size(%s: !spin.state<layer = 0, level = block>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x2xi1>) {
  // expected-error @+1 {{'spin.ema_update' op 'scores' dim 2 (64 slots) must equal 'mask' dim 1 (2 blocks) times block_size (16)}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x2xi1>) {decay = 5.0e-01, block_size = 16 : i64, pooling = #spin.pooling<max>} : !spin.state<layer = 0, level = block>
  return
}

// -----

func.func @ema_update_rejects_new_state_of_other_level(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.ema_update' op failed to verify that all of {state, new_state} have same type}}
  %s1 = "spin.ema_update"(%s, %z, %p, %n, %m) <{decay = 5.0e-01 : f64, block_size = 16 : i64}> : (!spin.state<layer = 0>, tensor<2x1x64xf32>, tensor<2x1xi32>, tensor<2x1xi32>, tensor<2x4xi1>) -> !spin.state<layer = 0, level = block>
  return
}

//===----------------------------------------------------------------------===//
// spin.observe
//===----------------------------------------------------------------------===//

// -----

// Row 0 is folded at the step (docs/SPIN_SPEC.md §7.2): the EMA weight is
// needed here, not only at the commit.
func.func @observe_rejects_a_missing_decay(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op requires attribute 'decay'}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_pooling_with_slot_state(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op takes 'pooling' only with a level = block state (variant A2)}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01, pooling = #spin.pooling<top4>} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_block_state_without_pooling(%s: !spin.state<layer = 0, level = block>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op needs 'pooling' with a level = block state (variant A2)}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0, level = block>
  return
}

// -----

func.func @observe_rejects_zero_block_size(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op attribute 'block_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 0 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_i64_positions(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi64>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op operand #2 must be 2D tensor of 32-bit signless integer values, but got 'tensor<2x4xi64>'}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi64>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_mask_batch_mismatch(%s: !spin.state<layer = 0>, %z: tensor<?x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<3x4xi1>) {
  // expected-error @+1 {{'spin.observe' op batch size mismatch: 'mask' dim 0 is 3 but 'positions' dim 0 is 2}}
  %s1 = spin.observe %s scores(%z : tensor<?x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<3x4xi1>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_row_count_mismatch(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x3xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op row count mismatch: 'lengths' dim 1 is 3 but 'scores' dim 1 is 4}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x3xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_slots_not_blocks_times_block_size(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.observe' op 'scores' dim 2 (64 slots) must equal 'mask' dim 1 (4 blocks) times block_size (8)}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 8 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @observe_rejects_slots_not_multiple_of_block_size(%s: !spin.state<layer = 0, level = block>, %z: tensor<2x4x72xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x?xi1>) {
  // expected-error @+1 {{'spin.observe' op 'scores' dim 2 (72 slots) is not a multiple of block_size (16)}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x72xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x?xi1>) {block_size = 16 : i64, decay = 5.0e-01, pooling = #spin.pooling<mean>} : !spin.state<layer = 0, level = block>
  return
}

//===----------------------------------------------------------------------===//
// spin.commit
//===----------------------------------------------------------------------===//

// -----

func.func @commit_rejects_negative_decay(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{'spin.commit' op attribute 'decay' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = -1.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_decay_above_one(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{'spin.commit' op attribute 'decay' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 1.01} : !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_unknown_mtp_update(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+2 {{expected ::mlir::spin::MtpUpdate to be one of: prefix, row0}}
  // expected-error @+1 {{failed to parse Spin_MtpUpdateAttr parameter 'value' which is to be a `::mlir::spin::MtpUpdate`}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01, mtp_update = #spin.mtp_update<all>} : !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_mtp_mask_as_mtp_update(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{'spin.commit' op attribute 'mtp_update' failed to satisfy constraint: which accepted MTP rows update the state at commit (SPIN_SPEC §4)}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01, mtp_update = #spin.mtp_mask<row0>} : !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_i64_accepted(%s: !spin.state<layer = 0>, %a: tensor<2xi64>) {
  // expected-error @+1 {{'spin.commit' op operand #1 must be 1D tensor of 32-bit signless integer values, but got 'tensor<2xi64>'}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi64>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{'spin.commit' op failed to verify that all of {state, new_state} have same type}}
  %s1 = "spin.commit"(%s, %a) <{block_size = 16 : i64, decay = 5.0e-01 : f64}> : (!spin.state<layer = 0>, tensor<2xi32>) -> !spin.state<layer = 1>
  return
}

// -----

func.func @commit_rejects_missing_accepted_keyword(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{custom op 'spin.commit' expected 'accepted'}}
  %s1 = spin.commit %s (%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}

// -----

func.func @fused_select_rejects_a1_with_block_state(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op reduction a1 needs a level = slot state, got '!spin.state<layer = 0, level = block>'}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, pooling = #spin.pooling<max>} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_a0_with_explore(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op reduction a0 has no block budget to explore with; explore must be 0}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, explore = 0.1 : f64, reduction = #spin.reduction<a0>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_block_age_without_last_observed(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op explore_policy block_age ranks blocks by age and needs a state with last_observed = true, got '!spin.state<layer = 0>'}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, explore = 0.1 : f64, pooling = #spin.pooling<max>, explore_policy = #spin.explore_policy<block_age>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_a0_with_age_policy(%s: !spin.state<layer = 0, last_observed = true>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op reduction a0 has no block budget to explore with; explore_policy must be random, got staleness_score}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, reduction = #spin.reduction<a0>, explore_policy = #spin.explore_policy<staleness_score>} : !spin.state<layer = 0, last_observed = true> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_a1_without_pooling(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op needs 'pooling' with reduction a1}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_pooling_with_a2(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op takes 'pooling' only with reduction a1, not a2}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, reduction = #spin.reduction<a2>, pooling = #spin.pooling<mean>} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_mask_batch_mismatch(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op batch size mismatch: 'mask' dim 0 is 3 but 'positions' dim 0 is 2}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, pooling = #spin.pooling<max>} : !spin.state<layer = 0> -> tensor<3x4xi1>
  return
}

// -----

func.func @fused_select_rejects_row_count_mismatch(%s: !spin.state<layer = 0>, %p: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op row count mismatch: 'lengths' dim 1 is 1 but 'positions' dim 1 is 4}}
  %m = spin.fused_select %s positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, pooling = #spin.pooling<max>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_select_rejects_sparsity_above_one(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  // expected-error @+1 {{'spin.fused_select' op attribute 'sparsity' failed to satisfy constraint: 64-bit float attribute whose value is in [0, 1]}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 1.5 : f64, pooling = #spin.pooling<max>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}

// -----

func.func @fused_score_rejects_fp8_keys_without_scales(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xf8E4M3FN>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op fp8 e4m3 keys need per-slot 'scales'}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xf8E4M3FN>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_fp8_query_with_bf16_keys(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op fp8 e4m3 queries need fp8 e4m3 keys, not 'bf16' keys}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_block_size_not_dividing_page(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op block_size (12) must divide the page size (16)}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 12 : i64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_k_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op result holds 16 indices per row but k is 32}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_indices_batch_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op batch size mismatch: 'indices' dim 0 is 3 but 'scores' dim 0 is 2}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<3x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_state_without_positions(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op takes 'state', 'positions', 'update' and returns the new state together, or none of them}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_update_without_state(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op takes 'state', 'positions', 'update' and returns the new state together, or none of them}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_decay_without_state(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op takes 'decay' and 'pooling' only with a state update}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  return
}

// -----

func.func @fused_score_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op new state type '!spin.state<layer = 1>' differs from the state type '!spin.state<layer = 0>'}}
  %t, %z, %s1 = "spin.fused_score"(%q, %w, %k, %bt, %n, %m, %s, %p) <{k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 1, 1, 1, 1>}> : (tensor<2x1x4x16xbf16>, tensor<2x1x4xf32>, tensor<?x16x16xbf16>, tensor<2x4xi32>, tensor<2x1xi32>, tensor<2x4xi1>, !spin.state<layer = 0>, tensor<2x1xi32>) -> (tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 1>)
  return
}

// -----

func.func @fused_score_rejects_pooling_with_slot_state(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op takes 'pooling' only with a level = block state (variant A2)}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64, pooling = #spin.pooling<max>} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_block_state_without_pooling(%s: !spin.state<layer = 0, level = block>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op needs 'pooling' with a level = block state (variant A2)}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0, level = block>) positions(%p : tensor<2x1xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0, level = block>
  return
}

// -----

func.func @fused_score_rejects_positions_row_mismatch(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op row count mismatch: 'positions' dim 1 is 4 but 'scores' dim 1 is 1}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x4xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_observe_without_decay(%s: !spin.state<layer = 0>, %q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x4xi32>, %p: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op needs 'decay' with update = observe}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x4xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<observe>} -> tensor<2x4x32xi32>, tensor<2x4x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_ema_without_decay(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op needs 'decay' with update = ema}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_ema_with_mtp_rows(%s: !spin.state<layer = 0>, %q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x4xi32>, %p: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+1 {{'spin.fused_score' op updates from a single row per request, got 4 rows; MTP rows need update = observe}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x4xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64} -> tensor<2x4x32xi32>, tensor<2x4x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @fused_score_rejects_unknown_update_kind(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  // expected-error @+2 {{expected ::mlir::spin::UpdateKind to be one of: ema, observe}}
  // expected-error @+1 {{failed to parse Spin_UpdateKindAttr parameter 'value' which is to be a `::mlir::spin::UpdateKind`}}
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<later>, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return
}

// -----

func.func @commit_rejects_missing_block_size(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  // expected-error @+1 {{'spin.commit' op requires attribute 'block_size'}}
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {decay = 5.0e-01} : !spin.state<layer = 0>
  return
}
