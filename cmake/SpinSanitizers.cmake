# SPIN_SANITIZE: builds spin's own targets (runtime, compiler, tools, Python
# module, tests) with the listed sanitizers. LLVM/MLIR are prebuilt system
# libraries and stay uninstrumented; directory-level options reach only the
# targets this project defines.
#
#   -DSPIN_SANITIZE=address,undefined   AddressSanitizer + UBSan
#   -DSPIN_SANITIZE=thread              ThreadSanitizer
#
# Every report is fatal (-fno-sanitize-recover=all): a test that triggers one
# fails instead of printing a warning nobody reads.
set(SPIN_SANITIZE "" CACHE STRING
    "Sanitizers for spin's targets: a comma-separated subset of address, undefined, leak, thread (empty: none)")

if(SPIN_SANITIZE)
  string(REPLACE "," ";" spin_sanitizers "${SPIN_SANITIZE}")
  foreach(sanitizer IN LISTS spin_sanitizers)
    if(NOT sanitizer MATCHES "^(address|undefined|leak|thread)$")
      message(FATAL_ERROR "SPIN_SANITIZE: unknown sanitizer '${sanitizer}' in "
                          "'${SPIN_SANITIZE}' (use address, undefined, leak, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST spin_sanitizers AND
     ("address" IN_LIST spin_sanitizers OR "leak" IN_LIST spin_sanitizers))
    message(FATAL_ERROR "SPIN_SANITIZE='${SPIN_SANITIZE}': ThreadSanitizer "
                        "cannot be combined with AddressSanitizer or LeakSanitizer")
  endif()
  string(REPLACE ";" "," spin_sanitize_flag "${spin_sanitizers}")
  # Frame pointers and line tables make the reports' stacks readable.
  add_compile_options(-fsanitize=${spin_sanitize_flag} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${spin_sanitize_flag})
  message(STATUS "spin: building with -fsanitize=${spin_sanitize_flag}")
endif()
