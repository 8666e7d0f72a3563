% #qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
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
