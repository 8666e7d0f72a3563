# Writes OUTPUT, a header defining SPIN_COMPILER_SOURCE_HASH: a SHA-256 over
# the compiler's sources listed (one per line) in LIST. Compiled programs in
# the on-disk cache are keyed by it, so any change to the compiler's sources
# invalidates them. The header is rewritten only when the hash changes.
file(STRINGS "${LIST}" sources)
set(digests "")
foreach(source IN LISTS sources)
  file(SHA256 "${source}" digest)
  string(APPEND digests "${source}:${digest}\n")
endforeach()
string(SHA256 hash "${digests}")
set(content "#define SPIN_COMPILER_SOURCE_HASH \"${hash}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${content}")
