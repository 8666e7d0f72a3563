// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s
// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s --check-prefix=LOWERED

// The CPU lowering of the state writes (StateLowering.cpp): spin.ema_update,
// spin.reset, spin.observe and spin.commit store into the state-pool
// arguments of docs/Runtime-ABI.md and are replaced by their state operand.
// Shapes: B = 2, R = 1 (4 for MTP), 64 slots in blocks of 16.

// No spin op or type is left; the spin.* argument attributes remain.
// LOWERED-NOT: {{!spin\.|spin\.[a-z_]+ [^=]}}

// EMA update, decay 0.75: for every selected visible block, each finite
// score z folds into V[slot, i] and D[slot, p - i] as 0.75 * old + 0.25 * z;
// then it[slot] += 1 once per request.
// CHECK-LABEL: func.func @ema_update(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"}) -> tensor<2x1x64xf32>
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1x64xf32>
// CHECK-DAG:     %[[P:.*]] = bufferization.to_buffer %arg2 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg4 read_only : tensor<2x4xi1>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK-DAG:     %[[A:.*]] = arith.constant 7.500000e-01 : f32
// CHECK-DAG:     %[[C:.*]] = arith.constant 2.500000e-01 : f32
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           memref.load %[[SLOTS]][%[[B]]] : memref<?xi32>
// CHECK:           %[[SLOT:.*]] = arith.index_cast
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[VIS:.*]] = arith.index_cast
// CHECK:             memref.load %[[P]][%[[B]], %[[R]]]
// CHECK:             %[[POS:.*]] = arith.index_cast
// CHECK:             %[[NB:.*]] = arith.ceildivui %[[VIS]], %[[BS]] : index
// CHECK:             scf.for %[[J:.*]] = %{{.*}} to %[[NB]] step
// CHECK:               %[[SEL:.*]] = memref.load %[[M]][%[[B]], %[[J]]] : memref<2x4xi1>
// CHECK:               scf.if %[[SEL]] {
// CHECK:                 scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                   %[[S:.*]] = memref.load %[[Z]][%[[B]], %[[R]], %[[I]]] : memref<2x1x64xf32>
// CHECK:                   %[[OFF:.*]] = arith.subi %[[POS]], %[[I]] : index
// CHECK:                   %[[ABS:.*]] = math.absf %[[S]] : f32
// CHECK:                   %[[INF:.*]] = arith.constant 0x7F800000 : f32
// CHECK:                   %[[FINITE:.*]] = arith.cmpf olt, %[[ABS]], %[[INF]] : f32
// CHECK:                   scf.if %[[FINITE]] {
// CHECK:                     %[[OLDV:.*]] = memref.load %[[V]][%[[SLOT]], %[[I]]] : memref<?x?xf32>
// CHECK:                     %[[NEWZ:.*]] = arith.mulf %[[C]], %[[S]] : f32
// CHECK:                     %[[KEPT:.*]] = arith.mulf %[[A]], %[[OLDV]] : f32
// CHECK:                     %[[NEWV:.*]] = arith.addf %[[KEPT]], %[[NEWZ]] : f32
// CHECK:                     memref.store %[[NEWV]], %[[V]][%[[SLOT]], %[[I]]] : memref<?x?xf32>
// CHECK:                     memref.load %[[D]][%[[SLOT]], %[[OFF]]] : memref<?x?xf32>
// CHECK:                     memref.store %{{.*}}, %[[D]][%[[SLOT]], %[[OFF]]] : memref<?x?xf32>
// CHECK:           %[[ONE:.*]] = arith.constant 1 : i64
// CHECK:           %[[IT:.*]] = memref.load %[[ITS]][%[[SLOT]]] : memref<?xi64>
// CHECK:           %[[IT1:.*]] = arith.addi %[[IT]], %[[ONE]] : i64
// CHECK:           memref.store %[[IT1]], %[[ITS]][%[[SLOT]]] : memref<?xi64>
// CHECK:         return %arg1 : tensor<2x1x64xf32>
func.func @ema_update(%ids: tensor<2xi64>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>,
                      %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) -> tensor<2x1x64xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 0.75 : f64, block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %z : tensor<2x1x64xf32>
}

// -----

// Reset of the requests flagged fresh: V and D zeroed over the capacity,
// it = 0, and last_observed zeroed for a state that has it.
// CHECK-LABEL: func.func @reset(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"},
// CHECK-SAME:    %[[LAST:[^:]*]]: memref<?x?xi32> {spin.layer = 0 : i64, spin.state = "last_observed"}) {
// CHECK:         %[[FRESH:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2xi1> to memref<2xi1>
// CHECK:         %[[CAP:.*]] = memref.dim %[[V]], %{{.*}} : memref<?x?xf32>
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[NREQ:.*]] = memref.dim %[[SLOTS]], %{{.*}} : memref<?xi32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %[[NREQ]] step
// CHECK:           %[[WANTED:.*]] = memref.load %[[FRESH]][%[[B]]] : memref<2xi1>
// CHECK:           scf.if %[[WANTED]] {
// CHECK:             memref.load %[[SLOTS]][%[[B]]]
// CHECK:             %[[SLOT:.*]] = arith.index_cast
// CHECK:             scf.for %[[I:.*]] = %{{.*}} to %[[CAP]] step
// CHECK:               memref.store %[[ZERO]], %[[V]][%[[SLOT]], %[[I]]] : memref<?x?xf32>
// CHECK:               memref.store %[[ZERO]], %[[D]][%[[SLOT]], %[[I]]] : memref<?x?xf32>
// CHECK:             %[[IT0:.*]] = arith.constant 0 : i64
// CHECK:             memref.store %[[IT0]], %[[ITS]][%[[SLOT]]] : memref<?xi64>
// CHECK:             scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               %[[L0:.*]] = arith.constant 0 : i32
// CHECK:               memref.store %[[L0]], %[[LAST]][%[[SLOT]], %[[J]]] : memref<?x?xi32>
// CHECK:         return
func.func @reset(%ids: tensor<2xi64>, %fresh: tensor<2xi1>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  %s1 = spin.reset %s requests(%fresh : tensor<2xi1>) : !spin.state<layer = 0, last_observed = true>
  return
}

// -----

// MTP (R = 4): spin.observe folds row 0 into V and D at once (SPIN_SPEC
// §7.2) and buffers the step's rows (obs_rows, the mask as i8, each row's
// position and length, the selected scores of rows 1.. as draft rows 0..);
// spin.commit then replays rows 1 .. min(max(accepted, 0), rows - 1) of a
// request with something buffered into V and D (EMA, decay 0.75), advances
// it and drops the buffer.
// CHECK-LABEL: func.func @observe_commit(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"},
// CHECK-SAME:    %[[ROWS:[^:]*]]: memref<?xi32> {spin.layer = 0 : i64, spin.state = "obs_rows"},
// CHECK-SAME:    %[[OPOS:[^:]*]]: memref<?x?xi32> {spin.layer = 0 : i64, spin.state = "obs_pos"},
// CHECK-SAME:    %[[OLEN:[^:]*]]: memref<?x?xi32> {spin.layer = 0 : i64, spin.state = "obs_len"},
// CHECK-SAME:    %[[OMASK:[^:]*]]: memref<?x?xi8> {spin.layer = 0 : i64, spin.state = "obs_mask"},
// CHECK-SAME:    %[[OZ:[^:]*]]: memref<?x?x?xf32> {spin.layer = 0 : i64, spin.state = "obs_z"}) {
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x4x64xf32>
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg4 read_only : tensor<2x4xi1>
// spin.observe:
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           memref.load %[[SLOTS]][%[[B]]]
// CHECK:           %[[SLOT:.*]] = arith.index_cast
// Row 0 first, into V and D:
// CHECK:           scf.for
// CHECK:             scf.if
// CHECK:               scf.for
// CHECK:                 memref.store %{{.*}}, %[[V]][%[[SLOT]], %{{.*}}] : memref<?x?xf32>
// CHECK:                 memref.store %{{.*}}, %[[D]][%[[SLOT]], %{{.*}}] : memref<?x?xf32>
// CHECK:           %[[NROWS:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK:           memref.store %[[NROWS]], %[[ROWS]][%[[SLOT]]] : memref<?xi32>
// CHECK:           scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[BIT:.*]] = memref.load %[[M]][%[[B]], %[[J]]] : memref<2x4xi1>
// CHECK:             %[[BYTE:.*]] = arith.extui %[[BIT]] : i1 to i8
// CHECK:             memref.store %[[BYTE]], %[[OMASK]][%[[SLOT]], %[[J]]] : memref<?x?xi8>
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             memref.store %{{.*}}, %[[OPOS]][%[[SLOT]], %[[R]]] : memref<?x?xi32>
// CHECK:             memref.store %{{.*}}, %[[OLEN]][%[[SLOT]], %[[R]]] : memref<?x?xi32>
// Rows 1.. into obs_z's draft rows:
// CHECK:           scf.for %[[R1:.*]] = %[[ONE:.*]] to %{{.*}} step
// CHECK:             %[[DRAFT:.*]] = arith.subi %[[R1]], %{{.*}} : index
// CHECK:             scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               scf.if %{{.*}} {
// CHECK:                 scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                   %[[S:.*]] = memref.load %[[Z]][%[[B]], %[[R1]], %[[I]]] : memref<2x4x64xf32>
// CHECK:                   memref.store %[[S]], %[[OZ]][%[[SLOT]], %[[DRAFT]], %[[I]]] : memref<?x?x?xf32>
// spin.commit:
// CHECK:         %[[ACC:.*]] = bufferization.to_buffer %arg5 read_only : tensor<2xi32> to memref<2xi32>
// CHECK:         scf.for %[[CB:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           memref.load %[[SLOTS]][%[[CB]]]
// CHECK:           %[[CSLOT:.*]] = arith.index_cast
// CHECK:           memref.load %[[ROWS]][%[[CSLOT]]] : memref<?xi32>
// CHECK:           %[[BUF:.*]] = arith.index_cast
// CHECK:           %[[ANY:.*]] = arith.cmpi ugt, %[[BUF]], %{{.*}} : index
// CHECK:           scf.if %[[ANY]] {
// CHECK:             %[[A:.*]] = memref.load %[[ACC]][%[[CB]]] : memref<2xi32>
// CHECK:             arith.maxsi %[[A]], %{{.*}} : i32
// CHECK:             %[[LASTROW:.*]] = arith.minui
// CHECK:             %[[NREPLAY:.*]] = arith.addi %[[LASTROW]], %{{.*}} : index
// CHECK:             scf.for %[[CR:.*]] = %{{.*}} to %[[NREPLAY]] step
// CHECK:               %[[CDRAFT:.*]] = arith.subi %[[CR]], %{{.*}} : index
// CHECK:               memref.load %[[OLEN]][%[[CSLOT]], %[[CR]]]
// CHECK:               memref.load %[[OPOS]][%[[CSLOT]], %[[CR]]]
// CHECK:               scf.for %[[CJ:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                 %[[OB:.*]] = memref.load %[[OMASK]][%[[CSLOT]], %[[CJ]]] : memref<?x?xi8>
// CHECK:                 %[[SELECTED:.*]] = arith.cmpi ne, %[[OB]], %{{.*}} : i8
// CHECK:                 scf.if %[[SELECTED]] {
// CHECK:                   scf.for %[[CI:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                     memref.load %[[OZ]][%[[CSLOT]], %[[CDRAFT]], %[[CI]]] : memref<?x?x?xf32>
// CHECK:                     memref.store %{{.*}}, %[[V]][%[[CSLOT]], %[[CI]]] : memref<?x?xf32>
// CHECK:                     memref.store %{{.*}}, %[[D]][%[[CSLOT]], %{{.*}}] : memref<?x?xf32>
// CHECK:             memref.load %[[ITS]][%[[CSLOT]]] : memref<?xi64>
// CHECK:             memref.store %{{.*}}, %[[ITS]][%[[CSLOT]]] : memref<?xi64>
// CHECK:             %[[NONE:.*]] = arith.constant 0 : i32
// CHECK:             memref.store %[[NONE]], %[[ROWS]][%[[CSLOT]]] : memref<?xi32>
// CHECK:         return
func.func @observe_commit(%ids: tensor<2xi64>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>,
                          %n: tensor<2x4xi32>, %m: tensor<2x4xi1>, %a: tensor<2xi32>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi32>)
      lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %s2 = spin.commit %s1 accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 0.75 : f64}
      : !spin.state<layer = 0>
  return
}
