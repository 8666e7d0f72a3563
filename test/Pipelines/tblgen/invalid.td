// -gen-pipeline-options rejects pipelines whose options cannot be one struct.
//
// RUN: not spin-tblgen -gen-pipeline-options %tblgen_includes -DSAME_FLAG %s 2>&1 | FileCheck %s --check-prefix=SAME-FLAG
// RUN: not spin-tblgen -gen-pipeline-options %tblgen_includes -DSAME_CPP_NAME %s 2>&1 | FileCheck %s --check-prefix=SAME-CPP-NAME
// RUN: not spin-tblgen -gen-pipeline-options %tblgen_includes -DOWN_OPTION %s 2>&1 | FileCheck %s --check-prefix=OWN-OPTION
// RUN: not spin-tblgen -gen-pipeline-options %tblgen_includes -DUNKNOWN_UNFORWARDED %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN-UNFORWARDED
// RUN: not spin-tblgen -gen-pipeline-options %tblgen_includes -DLIST_OPTION %s 2>&1 | FileCheck %s --check-prefix=LIST-OPTION

include "spin/Pipelines/PipelineBase.td"

def PassA : Pass<"pass-a"> {
  let options = [Option<"size", "size", "int64_t", "64", "A size">];
}

def PassB : Pass<"pass-b"> {
  let options = [
    Option<"bSize", "size", "int64_t", "32", "B's size">,
    ListOption<"names", "names", "std::string", "Names">,
  ];
}

def PassC : Pass<"pass-c"> {
  let options = [Option<"size", "c-size", "int64_t", "16", "C's size">];
}

#ifdef SAME_FLAG
// SAME-FLAG: error: option 'size' of PassB clashes with the one of PassA
def SameFlag : PassPipeline<"same-flag"> {
  let forwards = [PassA, PassB];
  let unforwarded = ["names"];
}
#endif

#ifdef SAME_CPP_NAME
// SAME-CPP-NAME: error: option C++ name 'size' of PassC clashes with the one of PassA
def SameCppName : PassPipeline<"same-cpp-name"> {
  let forwards = [PassA, PassC];
}
#endif

#ifdef OWN_OPTION
// OWN-OPTION: error: option 'size' of OwnOption clashes with the one of PassA
def OwnOption : PassPipeline<"own-option"> {
  let forwards = [PassA];
  let options = [Option<"other", "size", "bool", "true", "Clashes">];
}
#endif

#ifdef UNKNOWN_UNFORWARDED
// UNKNOWN-UNFORWARDED: error: unforwarded option 'sise' is not an option of a forwarded pass
def UnknownUnforwarded : PassPipeline<"unknown-unforwarded"> {
  let forwards = [PassA];
  let unforwarded = ["sise"];
}
#endif

#ifdef LIST_OPTION
// LIST-OPTION: error: option 'names' of PassB: list options are not supported
def ListOptionPipeline : PassPipeline<"list-option"> {
  let forwards = [PassB];
}
#endif
