# Script mode (cmake -P): compiles a text file into the binary as a C++ raw string, so
# assets such as the web app (web/app.html) stay editable sources without a runtime lookup.
#   cmake -DINPUT=<file> -DOUTPUT=<file.cpp> -DSYMBOL=<function> -DNAMESPACE=<ns> -P HearthEmbed.cmake
# Defines `std::string_view <NAMESPACE>::<SYMBOL>()` returning the file's exact bytes.
foreach(arg INPUT OUTPUT SYMBOL NAMESPACE)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "HearthEmbed.cmake: -D${arg}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" content)
set(delimiter "hearth_embed")
string(FIND "${content}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains ')${delimiter}\"', which would end the raw string")
endif()
file(RELATIVE_PATH source_name "${CMAKE_CURRENT_LIST_DIR}/.." "${INPUT}")

set(generated "// Generated from ${source_name} by cmake/HearthEmbed.cmake: edit that file, not this one.
#include <string_view>

namespace ${NAMESPACE} {

std::string_view ${SYMBOL}() {
  static constexpr std::string_view kText = R\"${delimiter}(${content})${delimiter}\";
  return kText;
}

}  // namespace ${NAMESPACE}
")
# Rewrite only on change, so an unrelated rebuild recompiles nothing.
file(WRITE "${OUTPUT}.tmp" "${generated}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
