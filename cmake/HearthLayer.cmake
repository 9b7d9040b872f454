# One static library per layer folder under src/, linking only the layers below it.
set(HEARTH_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)
set(HEARTH_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)

function(hearth_apply_flags target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${HEARTH_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${HEARTH_CUDA_WARNINGS}>)
  if(HEARTH_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(HEARTH_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# hearth_layer(<name> SOURCES <files...> DEPS <targets...>)
# Creates hearth_<name>; includes resolve from src/ ("base/status.h").
function(hearth_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(hearth_${name} STATIC ${ARG_SOURCES})
  target_include_directories(hearth_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(hearth_${name} PUBLIC ${ARG_DEPS})
  hearth_apply_flags(hearth_${name})
endfunction()

# hearth_test(<name> SOURCES <files...> DEPS <targets...> [LABELS <labels...>])
# One GoogleTest executable; every TEST is discovered as its own CTest case.
function(hearth_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  # Shared test helpers (tests/common/*.h) are included as "common/<name>.h".
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    HEARTH_SOURCE_DIR="${PROJECT_SOURCE_DIR}" HEARTH_BINARY_DIR="${PROJECT_BINARY_DIR}")
  hearth_apply_flags(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(props TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    list(APPEND props LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
endfunction()
