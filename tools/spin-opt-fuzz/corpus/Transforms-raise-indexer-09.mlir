% #qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
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
