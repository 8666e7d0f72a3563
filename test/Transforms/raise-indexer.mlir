// RUN: spin-opt %s --split-input-file --spin-raise-indexer | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-raise-indexer --spin-raise-indexer | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-raise-indexer=report-failures 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: not spin-opt %s --split-input-file --spin-raise-indexer=page-size=0 2>&1 | FileCheck %s --check-prefix=BADOPT

// Raising a dense lightning indexer written in linalg (the form documented in
// Passes.td) to spin.dense_indexer + spin.topk. The second RUN shows that a
// second application changes nothing; the third that every candidate left
// untouched says why.

// BADOPT: error: spin-raise-indexer: option 'page-size' must be positive, got 0

// The DeepSeek-style chain: bf16 q and k, length mask, library top-K with
// i64 indices. Everything but the top-K's index width becomes spin ops.

// CHECK-LABEL: func.func @bf16_masked_topk
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x1x4x16xbf16>, %[[K:.*]]: tensor<2x256x16xbf16>, %[[W:.*]]: tensor<2x1x4xf32>, %[[LEN:.*]]: tensor<2x1xi32>)
// CHECK:         %[[EXP:.*]] = tensor.expand_shape %[[K]] {{\[\[}}0], [1, 2], [3]] output_shape [2, 4, 64, 16] : tensor<2x256x16xbf16> into tensor<2x4x64x16xbf16>
// CHECK:         %[[PAGES:.*]] = tensor.collapse_shape %[[EXP]] {{\[\[}}0, 1], [2], [3]] : tensor<2x4x64x16xbf16> into tensor<8x64x16xbf16>
// CHECK:         %[[BT:.*]] = linalg.generic
// CHECK:           linalg.index 0
// CHECK:           linalg.index 1
// CHECK:         } -> tensor<2x4xi32>
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[PAGES]] : tensor<8x64x16xbf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[LEN]] : tensor<2x1xi32>) -> tensor<2x1x256xf32>
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%[[LEN]] : tensor<2x1xi32>) {k = 64 : i64} : tensor<2x1x256xf32> -> tensor<2x1x64xi32>
// CHECK:         %[[T64:.*]] = arith.extsi %[[T]] : tensor<2x1x64xi32> to tensor<2x1x64xi64>
// CHECK:         return %[[T64]]
// CHECK-NOT:     arith.maximumf
// CHECK-NOT:     call @topk
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func private @topk(tensor<2x1x256xf32>) -> (tensor<2x1x64xf32>, tensor<2x1x64xi64>)

func.func @bf16_masked_topk(%q: tensor<2x1x4x16xbf16>, %k: tensor<2x256x16xbf16>, %w: tensor<2x1x4xf32>, %len: tensor<2x1xi32>) -> tensor<2x1x64xi64> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<2x1x4x256xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<2x1x4x256xf32>) -> tensor<2x1x4x256xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x1x4x16xbf16>, tensor<2x256x16xbf16>) outs(%f4 : tensor<2x1x4x256xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x1x4x256xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<2x1x4x256xf32>) outs(%e4 : tensor<2x1x4x256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x1x4x256xf32>
  %e3 = tensor.empty() : tensor<2x1x256xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<2x1x256xf32>) -> tensor<2x1x256xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<2x1x4x256xf32>, tensor<2x1x4xf32>) outs(%f3 : tensor<2x1x256xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x1x256xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<2x1x256xf32>, tensor<2x1xi32>) outs(%e3 : tensor<2x1x256xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x1x256xf32>
  %vals, %idx = func.call @topk(%zm) : (tensor<2x1x256xf32>) -> (tensor<2x1x64xf32>, tensor<2x1x64xi64>)
  return %idx : tensor<2x1x64xi64>
}

// -----

// fp8 keys with a per-slot scale, four MTP rows, no length mask (every slot
// visible: lengths become a constant fill), i32 top-K indices.

// CHECK-LABEL: func.func @fp8_scaled_unmasked
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x4x4x16xbf16>, %[[K:.*]]: tensor<2x128x16xf8E4M3FN>, %[[SC:.*]]: tensor<2x128xf32>, %[[W:.*]]: tensor<2x4x4xf32>)
// CHECK-DAG:     %[[ALL:.*]] = arith.constant 128 : i32
// CHECK-DAG:     %[[KP:.*]] = tensor.collapse_shape {{.*}} into tensor<4x64x16xf8E4M3FN>
// CHECK-DAG:     %[[SP:.*]] = tensor.collapse_shape {{.*}} into tensor<4x64xf32>
// CHECK-DAG:     %[[LEN:.*]] = linalg.fill ins(%[[ALL]] : i32) outs(%{{.*}} : tensor<2x4xi32>)
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%[[Q]] : tensor<2x4x4x16xbf16>) w(%[[W]] : tensor<2x4x4xf32>) keys(%[[KP]] : tensor<4x64x16xf8E4M3FN>) scales(%[[SP]] : tensor<4x64xf32>) block_table(%{{.*}} : tensor<2x2xi32>) lengths(%[[LEN]] : tensor<2x4xi32>) -> tensor<2x4x128xf32>
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%[[LEN]] : tensor<2x4xi32>) {k = 32 : i64} : tensor<2x4x128xf32> -> tensor<2x4x32xi32>
// CHECK:         return %[[T]]
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func private @topk(tensor<2x4x128xf32>) -> (tensor<2x4x32xf32>, tensor<2x4x32xi32>)

func.func @fp8_scaled_unmasked(%q: tensor<2x4x4x16xbf16>, %k: tensor<2x128x16xf8E4M3FN>, %scale: tensor<2x128xf32>, %w: tensor<2x4x4xf32>) -> tensor<2x4x32xi32> {
  %zero = arith.constant 0.0 : f32
  %e4 = tensor.empty() : tensor<2x4x4x128xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<2x4x4x128xf32>) -> tensor<2x4x4x128xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x4x4x16xbf16>, tensor<2x128x16xf8E4M3FN>) outs(%f4 : tensor<2x4x4x128xf32>) {
  ^bb0(%a: bf16, %b: f8E4M3FN, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : f8E4M3FN to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x4x128xf32>
  %sc = linalg.generic {indexing_maps = [#id4, #scmap, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %scale : tensor<2x4x4x128xf32>, tensor<2x128xf32>) outs(%e4 : tensor<2x4x4x128xf32>) {
  ^bb0(%x: f32, %c: f32, %o: f32):
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x4x128xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%sc : tensor<2x4x4x128xf32>) outs(%e4 : tensor<2x4x4x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x4x4x128xf32>
  %e3 = tensor.empty() : tensor<2x4x128xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<2x4x128xf32>) -> tensor<2x4x128xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<2x4x4x128xf32>, tensor<2x4x4xf32>) outs(%f3 : tensor<2x4x128xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x4x128xf32>
  %vals, %idx = func.call @topk(%z) : (tensor<2x4x128xf32>) -> (tensor<2x4x32xf32>, tensor<2x4x32xi32>)
  return %idx : tensor<2x4x32xi32>
}

// -----

// f32 operands, a dynamic batch, no top-K: only the scoring is raised and
// the scores are returned as they were.

// CHECK-LABEL: func.func @f32_dynamic_batch_scores_only
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%{{.*}} : tensor<?x1x2x8xf32>) w(%{{.*}} : tensor<?x1x2xf32>) keys(%{{.*}} : tensor<?x64x8xf32>) block_table(%{{.*}} : tensor<?x1xi32>) lengths(%{{.*}} : tensor<?x1xi32>) -> tensor<?x1x64xf32>
// CHECK-NOT:     spin.topk
// CHECK:         return %[[Z]]
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @f32_dynamic_batch_scores_only(%q: tensor<?x1x2x8xf32>, %k: tensor<?x64x8xf32>, %w: tensor<?x1x2xf32>, %len: tensor<?x1xi32>) -> tensor<?x1x64xf32> {
  %c0 = arith.constant 0 : index
  %nb = tensor.dim %q, %c0 : tensor<?x1x2x8xf32>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty(%nb) : tensor<?x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<?x1x2x64xf32>) -> tensor<?x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<?x1x2x8xf32>, tensor<?x64x8xf32>) outs(%f4 : tensor<?x1x2x64xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<?x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<?x1x2x64xf32>) outs(%e4 : tensor<?x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<?x1x2x64xf32>
  %e3 = tensor.empty(%nb) : tensor<?x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<?x1x64xf32>) -> tensor<?x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<?x1x2x64xf32>, tensor<?x1x2xf32>) outs(%f3 : tensor<?x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<?x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<?x1x64xf32>, tensor<?x1xi32>) outs(%e3 : tensor<?x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<?x1x64xf32>
  return %zm : tensor<?x1x64xf32>
}

// -----

// The top-K call's values are used: the scoring is raised, the call stays
// (spin.topk returns indices only).

// CHECK-LABEL: func.func @topk_values_used
// CHECK:         %[[Z:.*]] = spin.dense_indexer
// CHECK:         %{{.*}}:2 = call @topk(%[[Z]])
// CHECK-NOT:     spin.topk
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func private @topk(tensor<1x1x64xf32>) -> (tensor<1x1x8xf32>, tensor<1x1x8xi64>)

func.func @topk_values_used(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x64x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> (tensor<1x1x8xf32>, tensor<1x1x8xi64>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x64x8xbf16>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %vals, %idx = func.call @topk(%zm) : (tensor<1x1x64xf32>) -> (tensor<1x1x8xf32>, tensor<1x1x8xi64>)
  return %vals, %idx : tensor<1x1x8xf32>, tensor<1x1x8xi64>
}

// -----

// fp8 keys need per-slot scales: left untouched.

// CHECK-LABEL: func.func @rejects_fp8_keys_without_scales
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: fp8 keys without per-slot scales
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_fp8_keys_without_scales(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x64x8xf8E4M3FN>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x64x8xf8E4M3FN>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: bf16, %b: f8E4M3FN, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : f8E4M3FN to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  return %zm : tensor<1x1x64xf32>
}

// -----

// A per-slot scale on bf16 keys has no spin form: left untouched.

// CHECK-LABEL: func.func @rejects_scales_on_bf16_keys
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: per-slot scales need fp8 e4m3 keys and f32 scales
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_scales_on_bf16_keys(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x64x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>, %scale: tensor<1x64xf32>) -> tensor<1x1x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x64x8xbf16>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %sc = linalg.generic {indexing_maps = [#id4, #scmap, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %scale : tensor<1x1x2x64xf32>, tensor<1x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %c: f32, %o: f32):
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%sc : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  return %zm : tensor<1x1x64xf32>
}

// -----

// 96 slots do not form whole 64-slot pages: left untouched.

// CHECK-LABEL: func.func @rejects_partial_page
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: slot count 96 is not a static multiple of page-size 64
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_partial_page(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x96x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> tensor<1x1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x96xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x96xf32>) -> tensor<1x1x2x96xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x96x8xbf16>) outs(%f4 : tensor<1x1x2x96xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x96xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x96xf32>) outs(%e4 : tensor<1x1x2x96xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x96xf32>
  %e3 = tensor.empty() : tensor<1x1x96xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x96xf32>) -> tensor<1x1x96xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x96xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x96xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x96xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x96xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x96xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x96xf32>
  return %zm : tensor<1x1x96xf32>
}

// -----

// The contraction accumulates with subf: not a dot product.

// CHECK-LABEL: func.func @rejects_non_mul_add_contraction
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: contraction body is not acc + q * k
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_non_mul_add_contraction(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x64x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x64x8xbf16>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.subf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  return %zm : tensor<1x1x64xf32>
}

// -----

// max(x, 0.5) is not a ReLU.

// CHECK-LABEL: func.func @rejects_leaky_relu
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: head sum input is not a ReLU (max(x, 0.0)) generic
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_leaky_relu(%q: tensor<1x1x2x8xbf16>, %k: tensor<1x64x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xbf16>, tensor<1x64x8xbf16>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %half : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  return %zm : tensor<1x1x64xf32>
}

// -----

// fp8 e4m3 queries with fp8 e4m3 keys and a per-slot scale (the caller has
// folded the query scale into w), two MTP rows, length mask, i32 top-K
// indices: raised with q as it is (no conversion of the queries).

// CHECK-LABEL: func.func @fp8_queries_fp8_keys
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x2x4x16xf8E4M3FN>, %[[K:.*]]: tensor<2x128x16xf8E4M3FN>, %[[SC:.*]]: tensor<2x128xf32>, %[[W:.*]]: tensor<2x2x4xf32>, %[[LEN:.*]]: tensor<2x2xi32>)
// CHECK-DAG:     %[[KP:.*]] = tensor.collapse_shape {{.*}} into tensor<4x64x16xf8E4M3FN>
// CHECK-DAG:     %[[SP:.*]] = tensor.collapse_shape {{.*}} into tensor<4x64xf32>
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%[[Q]] : tensor<2x2x4x16xf8E4M3FN>) w(%[[W]] : tensor<2x2x4xf32>) keys(%[[KP]] : tensor<4x64x16xf8E4M3FN>) scales(%[[SP]] : tensor<4x64xf32>) block_table(%{{.*}} : tensor<2x2xi32>) lengths(%[[LEN]] : tensor<2x2xi32>) -> tensor<2x2x128xf32>
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%[[LEN]] : tensor<2x2xi32>) {k = 32 : i64} : tensor<2x2x128xf32> -> tensor<2x2x32xi32>
// CHECK:         return %[[T]]
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     call @topk
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#scmap = affine_map<(b, r, h, n) -> (b, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func private @topk(tensor<2x2x128xf32>) -> (tensor<2x2x32xf32>, tensor<2x2x32xi32>)

func.func @fp8_queries_fp8_keys(%q: tensor<2x2x4x16xf8E4M3FN>, %k: tensor<2x128x16xf8E4M3FN>, %scale: tensor<2x128xf32>, %w: tensor<2x2x4xf32>, %len: tensor<2x2xi32>) -> tensor<2x2x32xi32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<2x2x4x128xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<2x2x4x128xf32>) -> tensor<2x2x4x128xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x2x4x16xf8E4M3FN>, tensor<2x128x16xf8E4M3FN>) outs(%f4 : tensor<2x2x4x128xf32>) {
  ^bb0(%a: f8E4M3FN, %b: f8E4M3FN, %acc: f32):
    %a32 = arith.extf %a : f8E4M3FN to f32
    %b32 = arith.extf %b : f8E4M3FN to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x2x4x128xf32>
  %sc = linalg.generic {indexing_maps = [#id4, #scmap, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %scale : tensor<2x2x4x128xf32>, tensor<2x128xf32>) outs(%e4 : tensor<2x2x4x128xf32>) {
  ^bb0(%x: f32, %c: f32, %o: f32):
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x4x128xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%sc : tensor<2x2x4x128xf32>) outs(%e4 : tensor<2x2x4x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x2x4x128xf32>
  %e3 = tensor.empty() : tensor<2x2x128xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<2x2x128xf32>) -> tensor<2x2x128xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<2x2x4x128xf32>, tensor<2x2x4xf32>) outs(%f3 : tensor<2x2x128xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<2x2x128xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<2x2x128xf32>, tensor<2x2xi32>) outs(%e3 : tensor<2x2x128xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x128xf32>
  %vals, %idx = func.call @topk(%zm) : (tensor<2x2x128xf32>) -> (tensor<2x2x32xf32>, tensor<2x2x32xi32>)
  return %idx : tensor<2x2x32xi32>
}

// -----

// fp8 e4m3 queries with bf16 keys have no spin form (fp8 queries need fp8
// keys, as spin.dense_indexer's verifier says): left untouched.

// CHECK-LABEL: func.func @rejects_fp8_queries_with_bf16_keys
// CHECK-NOT:     spin.dense_indexer
// CHECK:         return
// REMARK: remark: spin-raise-indexer: not raised: fp8 queries need fp8 keys
#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
#kmap = affine_map<(b, r, h, n, d) -> (b, n, d)>
#smap = affine_map<(b, r, h, n, d) -> (b, r, h, n)>
#id4 = affine_map<(b, r, h, n) -> (b, r, h, n)>
#wmap = affine_map<(b, r, h, n) -> (b, r, h)>
#zmap = affine_map<(b, r, h, n) -> (b, r, n)>
#id3 = affine_map<(b, r, n) -> (b, r, n)>
#lmap = affine_map<(b, r, n) -> (b, r)>

func.func @rejects_fp8_queries_with_bf16_keys(%q: tensor<1x1x2x8xf8E4M3FN>, %k: tensor<1x64x8xbf16>, %w: tensor<1x1x2xf32>, %len: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x2x64xf32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x2x64xf32>) -> tensor<1x1x2x64xf32>
  %s = linalg.generic {indexing_maps = [#qmap, #kmap, #smap], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<1x1x2x8xf8E4M3FN>, tensor<1x64x8xbf16>) outs(%f4 : tensor<1x1x2x64xf32>) {
  ^bb0(%a: f8E4M3FN, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : f8E4M3FN to f32
    %b32 = arith.extf %b : bf16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x2x64xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s : tensor<1x1x2x64xf32>) outs(%e4 : tensor<1x1x2x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x1x2x64xf32>
  %e3 = tensor.empty() : tensor<1x1x64xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %z = linalg.generic {indexing_maps = [#id4, #wmap, #zmap], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%relu, %w : tensor<1x1x2x64xf32>, tensor<1x1x2xf32>) outs(%f3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %wh: f32, %acc: f32):
    %p = arith.mulf %x, %wh : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  %zm = linalg.generic {indexing_maps = [#id3, #lmap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z, %len : tensor<1x1x64xf32>, tensor<1x1xi32>) outs(%e3 : tensor<1x1x64xf32>) {
  ^bb0(%x: f32, %n: i32, %o: f32):
    %i = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %ok = arith.cmpi slt, %i32, %n : i32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<1x1x64xf32>
  return %zm : tensor<1x1x64xf32>
}
