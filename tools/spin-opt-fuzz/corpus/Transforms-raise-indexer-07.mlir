€#qmap = affine_map<(b, r, h, n, d) -> (b, r, h, d)>
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
