// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="warps-per-cta=4 tiles-per-warp=12 m-tiles=2 sm-count=1" | FileCheck %s --check-prefix=OPTS
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="sm-count=3" | FileCheck %s --check-prefix=SM3
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels --convert-spin-to-gpu | FileCheck %s --check-prefix=PLAN
// RUN: not spin-opt %s --split-input-file --spin-configure-gpu-kernels="warps-per-cta=0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not spin-opt %s --split-input-file --spin-configure-gpu-kernels="m-tiles=3" 2>&1 | FileCheck %s --check-prefix=BADM
// RUN: not spin-opt %s --split-input-file --spin-configure-gpu-kernels="warps-per-cta=6 wgmma=true" 2>&1 | FileCheck %s --check-prefix=BADWG
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="wgmma=true copy-warpgroup=true" | FileCheck %s --check-prefix=CW
// RUN: not spin-opt %s --split-input-file --spin-configure-gpu-kernels="copy-warpgroup=true" 2>&1 | FileCheck %s --check-prefix=BADCW
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="wgmma=true auto-copy-warpgroup=true" | FileCheck %s --check-prefix=AUTO
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="auto-copy-warpgroup=true" | FileCheck %s --check-prefix=AUTOSYNC

// The config step records each kernel's tuning on its op; the conversion
// builds the kernels from these attributes alone.

// 16 rows of 64K slots: the wave model's 32 tiles a warp (16 x 16 CTAs of
// 8 warps, one wave on 132 SMs); the top-K of K = 512 by the leader of a
// cluster of 8 CTAs of 512 threads (16 entries a thread).
// CHECK-LABEL: func.func @dense(
// CHECK: spin.dense_indexer {{.*}} {spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 32, m_tiles = 1, wgmma = false>}
// CHECK: spin.topk {{.*}} {k = 512 : i64, spin.topk_config = #spin.topk_config<threads = 512, cluster = 8, merge_ranks = false>}
// K <= 512 keeps its clusters however many waves they take.
// SM3-LABEL: func.func @dense(
// SM3: spin.topk_config = #spin.topk_config<threads = 512, cluster = 8, merge_ranks = false>
// Options fix the tuning instead.
// OPTS-LABEL: func.func @dense(
// OPTS: spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 2, wgmma = false>
// PLAN-LABEL: func.func @dense(
// PLAN: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c16{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c256
// PLAN: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c8{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// BAD: error: 'spin.dense_indexer' op score_config: warps must be in [1, 32], got 0
// BADM: error: 'spin.dense_indexer' op score_config: m_tiles must be 1 or 2, got 3
// BADWG: error: 'spin.dense_indexer' op score_config: wgmma needs m_tiles = 1 and warps a multiple of 4, got m_tiles = 1, warps = 6
// The copying warpgroup only where its kernel applies (fp8 queries and
// keys, @fp8_dense below); a parameter printed only when set.
// CW-LABEL: func.func @dense(
// CW: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 32, m_tiles = 1, wgmma = true>}
// BADCW: error: 'spin.dense_indexer' op score_config: copy_warpgroup needs wgmma
func.func @dense(%q: tensor<16x1x64x128xbf16>, %w: tensor<16x1x64xf32>,
                 %keys: tensor<?x64x128xbf16>, %table: tensor<16x1024xi32>,
                 %lengths: tensor<16x1xi32>) -> tensor<16x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<16x1024xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x65536xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x65536xf32> -> tensor<16x1x512xi32>
  return %t : tensor<16x1x512xi32>
}

// -----

// An op that carries its configuration keeps it, whatever the options: the
// scoring kernel of 4 warps x 12 tiles x 16 slots (768 slots a CTA, 86
// CTAs per row) and a top-K of K = 2048 by merge ranks over 8 CTAs (a
// slice of 512 candidates each).
// CHECK-LABEL: func.func @fixed(
// CHECK: spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = false>
// CHECK: spin.topk_config = #spin.topk_config<threads = 512, cluster = 8, merge_ranks = true>
// On 3 SMs those 2 clusters of 8 CTAs take several waves: one 1024-thread
// CTA a row instead, whose threads take 64 entries each (@wide_topk: pairs
// of them for longer rows).
// SM3-LABEL: func.func @fixed(
// SM3: spin.topk_config = #spin.topk_config<threads = 1024, cluster = 1, merge_ranks = false>
// OPTS-LABEL: func.func @fixed(
// OPTS: spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = false>
// PLAN-LABEL: func.func @fixed(
// PLAN: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c86{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c128
// PLAN: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c8{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
func.func @fixed(%q: tensor<2x1x64x128xbf16>, %w: tensor<2x1x64xf32>,
                 %keys: tensor<?x64x128xbf16>, %table: tensor<2x1024xi32>,
                 %lengths: tensor<2x1xi32>) -> tensor<2x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x64x128xbf16>)
      w(%w : tensor<2x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<2x1024xi32>)
      lengths(%lengths : tensor<2x1xi32>)
      {spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = false>}
      -> tensor<2x1x65536xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 2048 : i64}
      : tensor<2x1x65536xf32> -> tensor<2x1x2048xi32>
  return %t : tensor<2x1x2048xi32>
}

// -----

// Rows of 128K entries: clusters of 8 by merge ranks on 132 SMs; on 3 SMs
// pairs of 1024-thread CTAs (more than 64 entries a thread for one).
// CHECK-LABEL: func.func @wide_topk(
// CHECK: spin.topk_config = #spin.topk_config<threads = 512, cluster = 8, merge_ranks = true>
// SM3-LABEL: func.func @wide_topk(
// SM3: spin.topk_config = #spin.topk_config<threads = 1024, cluster = 2, merge_ranks = false>
func.func @wide_topk(%q: tensor<2x1x64x128xbf16>, %w: tensor<2x1x64xf32>,
                     %keys: tensor<?x64x128xbf16>, %table: tensor<2x2048xi32>,
                     %lengths: tensor<2x1xi32>) -> tensor<2x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x64x128xbf16>)
      w(%w : tensor<2x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<2x2048xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x131072xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 2048 : i64}
      : tensor<2x1x131072xf32> -> tensor<2x1x2048xi32>
  return %t : tensor<2x1x2048xi32>
}

// -----

// A SPIN step over the same 128K-entry rows selects half of them: on 3 SMs
// the top-K of its 64K candidates a row takes one 1024-thread CTA, where
// the dense rows (@wide_topk) take pairs.
// SM3-LABEL: func.func @spin_step_long(
// SM3: spin.fused_score {{.*}}spin.topk_config = #spin.topk_config<threads = 1024, cluster = 1, merge_ranks = false>
func.func @spin_step_long(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x64x64xbf16>,
                          %table: tensor<2x2048xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                          %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x2048xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %token, %selected = async.execute -> !async.value<tensor<2x2048xi1>> {
    %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 64 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 2048 : i64} : !spin.state<layer = 0> -> tensor<2x2048xi1>
    async.yield %m : tensor<2x2048xi1>
  }
  %mask = async.await %selected : !async.value<tensor<2x2048xi1>>
  %t, %z = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x64x64xbf16>) block_table(%table : tensor<2x2048xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x2048xi1>) {block_size = 64 : i64, k = 2048 : i64} -> tensor<2x1x2048xi32>, tensor<2x1x131072xf32>
  return %t : tensor<2x1x2048xi32>
}

// -----

// A SPIN step: the sparse scoring's tiles are sized for the selection's
// block budget (SPIN_SPEC §3.4), found through spin-schedule-async's
// async.execute; the single-row selection prefetches on a cache miss
// while its predict grid has at most sm-count CTAs (2 CTAs here).
// CHECK-LABEL: func.func @spin_step(
// CHECK: spin.fused_select {{.*}}spin.select_config = #spin.select_config<prefetch_on_miss = true>
// CHECK: spin.fused_score {{.*}}spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 8, m_tiles = 1, wgmma = false>, spin.topk_config = #spin.topk_config<threads = 512, cluster = 1, merge_ranks = false>
// OPTS-LABEL: func.func @spin_step(
// OPTS: spin.select_config = #spin.select_config<prefetch_on_miss = false>
func.func @spin_step(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x16x64xbf16>,
                     %table: tensor<2x8xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                     %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %token, %selected = async.execute -> !async.value<tensor<2x8xi1>> {
    %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
    async.yield %m : tensor<2x8xi1>
  }
  %mask = async.await %selected : !async.value<tensor<2x8xi1>>
  %t, %z = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x1x8xi32>, tensor<2x1x128xf32>
  %token_1, %updated = async.execute -> !async.value<!spin.state<layer = 0>> {
    %s1 = spin.ema_update %s scores(%z : tensor<2x1x128xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
    async.yield %s1 : !spin.state<layer = 0>
  }
  return %t : tensor<2x1x8xi32>
}

// -----

// With more predict CTAs than SMs (4 against 3 here) the selection does not
// prefetch on a miss; its kernel lets the scoring CTAs start early instead,
// and one of them per SM it leaves free (3 SMs - 2 requests) prefetches its
// first key tiles. The default 132 SMs prefetch on a miss.
// CHECK-LABEL: func.func @spin_step_wide(
// CHECK: spin.select_config = #spin.select_config<prefetch_on_miss = true>
// SM3-LABEL: func.func @spin_step_wide(
// SM3: spin.select_config = #spin.select_config<prefetch_on_miss = false, scoring_prefetch_ctas = 1>
func.func @spin_step_wide(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x16x64xbf16>,
                          %table: tensor<2x128xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                          %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %token, %selected = async.execute -> !async.value<tensor<2x128xi1>> {
    %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x128xi1>
    async.yield %m : tensor<2x128xi1>
  }
  %mask = async.await %selected : !async.value<tensor<2x128xi1>>
  %t, %z = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x128xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x128xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x1x8xi32>, tensor<2x1x2048xf32>
  %token_1, %updated = async.execute -> !async.value<!spin.state<layer = 0>> {
    %s1 = spin.ema_update %s scores(%z : tensor<2x1x2048xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x128xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
    async.yield %s1 : !spin.state<layer = 0>
  }
  return %t : tensor<2x1x8xi32>
}

// -----

// CW-LABEL: func.func @fp8_dense(
// CW: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true, copy_warpgroup = true>
func.func @fp8_dense(%q: tensor<2x2x64x128xf8E4M3FN>, %w: tensor<2x2x64xf32>,
                     %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                     %table: tensor<2x8xi32>, %lengths: tensor<2x2xi32>)
    -> tensor<2x2x512xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x2x64x128xf8E4M3FN>)
      w(%w : tensor<2x2x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x2xi32>) -> tensor<2x2x512xf32>
  return %z : tensor<2x2x512xf32>
}

// -----

// Auto (spin-compile's default on sm_90a): the copying warpgroup where it
// measured faster, a CTA's rows of a power of two of heads up to 256 (one, two or four
// rows at H = 64: @fp8_one_row, @fp8_dense above, @fp8_four_rows); not
// for three rows (@fp8_three_rows), bf16 queries (@dense) or without
// wgmma, which it needs (no error: the other kernels score). Its CTA
// takes an SM, so the wave model gives it up to 1024 tiles a warp: 16 x
// 256K in one wave of 128 CTAs of 8 warps x 256 tiles x 16 slots.
// AUTO-LABEL: func.func @dense(
// AUTO: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 32, m_tiles = 1, wgmma = true>}
// AUTO-LABEL: func.func @fp8_dense(
// AUTO: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true, copy_warpgroup = true>
// AUTO-LABEL: func.func @fp8_one_row(
// AUTO: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 256, m_tiles = 1, wgmma = true, copy_warpgroup = true>
// AUTOSYNC-LABEL: func.func @fp8_one_row(
// AUTOSYNC: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = false>}
// CW-LABEL: func.func @fp8_one_row(
// CW: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 256, m_tiles = 1, wgmma = true, copy_warpgroup = true>
func.func @fp8_one_row(%q: tensor<16x1x64x128xf8E4M3FN>, %w: tensor<16x1x64xf32>,
                       %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                       %table: tensor<16x4096xi32>, %lengths: tensor<16x1xi32>)
    -> tensor<16x1x262144xf32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xf8E4M3FN>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<16x4096xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x262144xf32>
  return %z : tensor<16x1x262144xf32>
}

// -----

// AUTO-LABEL: func.func @fp8_three_rows(
// AUTO: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true>}
func.func @fp8_three_rows(%q: tensor<2x3x64x128xf8E4M3FN>, %w: tensor<2x3x64xf32>,
                          %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                          %table: tensor<2x8xi32>, %lengths: tensor<2x3xi32>)
    -> tensor<2x3x512xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x3x64x128xf8E4M3FN>)
      w(%w : tensor<2x3x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x3xi32>) -> tensor<2x3x512xf32>
  return %z : tensor<2x3x512xf32>
}

// -----

// AUTO-LABEL: func.func @fp8_four_rows(
// AUTO: spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true, copy_warpgroup = true>
func.func @fp8_four_rows(%q: tensor<2x4x64x128xf8E4M3FN>, %w: tensor<2x4x64xf32>,
                         %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                         %table: tensor<2x8xi32>, %lengths: tensor<2x4xi32>)
    -> tensor<2x4x512xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x64x128xf8E4M3FN>)
      w(%w : tensor<2x4x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x4xi32>) -> tensor<2x4x512xf32>
  return %z : tensor<2x4x512xf32>
}

// -----

// A SPIN step's sparse scoring of fp8 keys and queries takes the copying
// warpgroup by default where a 64-slot tile lies in one selected block
// (blocks of 64: @fp8_spin_step; of 32: @fp8_spin_step_small_blocks keeps
// the other kernel). The wave model sizes its CTAs for the selection's
// budget (16 x 64K at rho = 0.5: 32K entries a row, 128 CTAs of 8 x 32
// tiles of 16 slots, one wave). Its keys pass through the L2 with an
// evict-first policy, which dense scoring (above) does not take.
// AUTO-LABEL: func.func @fp8_spin_step(
// AUTO: spin.fused_score {{.*}}spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = 32, m_tiles = 1, wgmma = true, copy_warpgroup = true, evict_first = true>
// AUTO-LABEL: func.func @fp8_spin_step_small_blocks(
// AUTO: spin.fused_score {{.*}}spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true>,
// CW-LABEL: func.func @fp8_spin_step_small_blocks(
// CW: spin.fused_score {{.*}}spin.score_config = #spin.score_config<warps = 8, tiles_per_warp = {{[0-9]+}}, m_tiles = 1, wgmma = true>,
func.func @fp8_spin_step(%q: tensor<16x1x64x128xf8E4M3FN>, %w: tensor<16x1x64xf32>,
                         %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                         %table: tensor<16x1024xi32>, %n: tensor<16x1xi32>, %p: tensor<16x1xi32> {spin.positions},
                         %ids: tensor<16xi64> {spin.request_ids}) -> tensor<16x1x512xi32> {
  %s = spin.layer_state %ids : tensor<16xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<16x1xi32>) lengths(%n : tensor<16x1xi32>) {block_size = 64 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 512 : i64} : !spin.state<layer = 0> -> tensor<16x1024xi1>
  %t, %z = spin.fused_score q(%q : tensor<16x1x64x128xf8E4M3FN>) w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>) scales(%scales : tensor<?x64xf32>) block_table(%table : tensor<16x1024xi32>) lengths(%n : tensor<16x1xi32>) mask(%m : tensor<16x1024xi1>) {block_size = 64 : i64, k = 512 : i64} -> tensor<16x1x512xi32>, tensor<16x1x65536xf32>
  return %t : tensor<16x1x512xi32>
}

func.func @fp8_spin_step_small_blocks(%q: tensor<16x1x64x128xf8E4M3FN>, %w: tensor<16x1x64xf32>,
                                      %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                                      %table: tensor<16x1024xi32>, %n: tensor<16x1xi32>, %p: tensor<16x1xi32> {spin.positions},
                                      %ids: tensor<16xi64> {spin.request_ids}) -> tensor<16x1x512xi32> {
  %s = spin.layer_state %ids : tensor<16xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<16x1xi32>) lengths(%n : tensor<16x1xi32>) {block_size = 32 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 512 : i64} : !spin.state<layer = 0> -> tensor<16x2048xi1>
  %t, %z = spin.fused_score q(%q : tensor<16x1x64x128xf8E4M3FN>) w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>) scales(%scales : tensor<?x64xf32>) block_table(%table : tensor<16x1024xi32>) lengths(%n : tensor<16x1xi32>) mask(%m : tensor<16x2048xi1>) {block_size = 32 : i64, k = 512 : i64} -> tensor<16x1x512xi32>, tensor<16x1x65536xf32>
  return %t : tensor<16x1x512xi32>
}

// -----

// A step of several rows selects them side by side, a CTA per row in one
// cluster, where the requests' clusters fit one wave (2 x 3 CTAs against
// the default 132 SMs; not against sm-count=3); under row-0 sharing only
// row 0 selects after the warm-up: one CTA a request.
// CHECK-LABEL: func.func @mtp_select(
// CHECK: spin.fused_select {{.*}}spin.select_config = #spin.select_config<prefetch_on_miss = false, row_ctas = 3>
// CHECK: spin.fused_select {{.*}}mtp_mask = #spin.mtp_mask<row0>{{.*}}spin.select_config = #spin.select_config<prefetch_on_miss = false>
// SM3-LABEL: func.func @mtp_select(
// SM3: spin.select_config = #spin.select_config<prefetch_on_miss = false>
// SM3: spin.select_config = #spin.select_config<prefetch_on_miss = false>
// PLAN-LABEL: func.func @mtp_select(
// PLAN: gpu.launch_func @spin_kernels::@spin_select_0 blocks in (%c3{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// PLAN: gpu.launch_func @spin_kernels::@spin_select_3 blocks in (%c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
func.func @mtp_select(%q: tensor<2x3x8x64xbf16> {spin.input = "q"},
    %w: tensor<2x3x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %n: tensor<2x3xi32> {spin.input = "lengths"},
    %p: tensor<2x3xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> (tensor<2x3x8xi32>, tensor<2x3x8xi32>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x3xi32>) lengths(%n : tensor<2x3xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t, %z = spin.fused_score q(%q : tensor<2x3x8x64xbf16>) w(%w : tensor<2x3x8xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x3xi32>) mask(%m : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x3x8xi32>, tensor<2x3x128xf32>
  %m0 = spin.fused_select %s positions(%p : tensor<2x3xi32>) lengths(%n : tensor<2x3xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64, mtp_mask = #spin.mtp_mask<row0>} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t0, %z0 = spin.fused_score q(%q : tensor<2x3x8x64xbf16>) w(%w : tensor<2x3x8xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x3xi32>) mask(%m0 : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x3x8xi32>, tensor<2x3x128xf32>
  return %t, %t0 : tensor<2x3x8xi32>, tensor<2x3x8xi32>
}
