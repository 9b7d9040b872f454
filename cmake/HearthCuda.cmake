# Optional CUDA backend. HEARTH_CUDA=AUTO builds it when nvcc is found; ON requires it.
# Architectures 80 (Ampere) and 90 (Hopper); files that need Hopper-only instructions
# add 90a themselves through hearth_cuda_hopper_only().
set(HEARTH_HAVE_CUDA OFF)
if(NOT HEARTH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(_hearth_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(_hearth_nvcc)
      set(CMAKE_CUDA_COMPILER ${_hearth_nvcc})
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(HEARTH_HAVE_CUDA ON)
  elseif(HEARTH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HEARTH_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
message(STATUS "hearth: CUDA backend ${HEARTH_HAVE_CUDA}")

# hearth_cuda_hopper_only(<target> <files...>): compiles the given CUDA sources for sm_90a
# alone (wgmma, TMA, setmaxnreg) in an object library linked into <target>, so no sm_80/sm_90
# image of them exists; callers launch them only on sm_90 devices.
function(hearth_cuda_hopper_only target)
  set(lib ${target}_sm90a)
  add_library(${lib} OBJECT ${ARGN})
  set_target_properties(${lib} PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17)
  target_compile_options(${lib} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
  target_include_directories(${lib} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${lib} PRIVATE CUDA::cudart)
  hearth_apply_flags(${lib})
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${lib}>)
endfunction()
