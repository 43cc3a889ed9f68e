# GPU flavours of the copy kernel and the GPU device backend.
#
#   STATECACHE_WITH_HIP   AUTO | ON | OFF  hipcc for STATECACHE_HIP_ARCH (gfx90a)
#   STATECACHE_WITH_CUDA  AUTO | ON | OFF  nvcc for STATECACHE_CUDA_ARCH (90)
#   STATECACHE_DEVICE_GPU AUTO | hip | cuda | none
#                         the flavour statecache_device (the daemon) links;
#                         AUTO: cuda on a machine with an NVIDIA driver,
#                         else hip if built, else cuda if built, else none
#
# AUTO builds a flavour when its compiler and runtime library are found, and
# says so either way; ON fails the configure when they are missing. Kernels
# are compiled with custom commands (hipcc / nvcc -x cu on the same .hip
# source): CMake 3.25's HIP language cannot use Debian's ROCm layout, and
# custom commands keep both flavours in one build.
#
# Sets, for the subdirectories: STATECACHE_GPU_FLAVOURS (list of hip, cuda),
# STATECACHE_DEVICE_GPU_FLAVOUR (hip, cuda or empty), and the function
# statecache_add_gpu_objects().

set(STATECACHE_WITH_HIP AUTO CACHE STRING
    "Build the HIP flavour of the GPU kernels and backend (AUTO, ON, OFF)")
set(STATECACHE_WITH_CUDA AUTO CACHE STRING
    "Build the CUDA flavour of the GPU kernels and backend (AUTO, ON, OFF)")
set(STATECACHE_DEVICE_GPU AUTO CACHE STRING
    "GPU flavour the daemon's device library links (AUTO, hip, cuda, none)")
set(STATECACHE_HIP_ARCH gfx90a CACHE STRING "HIP offload architecture")
set(STATECACHE_CUDA_ARCH 90 CACHE STRING "CUDA compute capability (no sm_)")

set(STATECACHE_GPU_FLAVOURS "")

# --- HIP ---------------------------------------------------------------
if(NOT STATECACHE_WITH_HIP STREQUAL "OFF")
  find_program(STATECACHE_HIPCC hipcc HINTS /opt/rocm/bin ENV ROCM_PATH
               PATH_SUFFIXES bin)
  find_library(STATECACHE_HIP_RUNTIME amdhip64 HINTS /opt/rocm/lib
               ENV ROCM_PATH PATH_SUFFIXES lib)
  if(STATECACHE_HIPCC AND STATECACHE_HIP_RUNTIME)
    list(APPEND STATECACHE_GPU_FLAVOURS hip)
    message(STATUS "statecache: HIP flavour ON (${STATECACHE_HIPCC}, "
                   "${STATECACHE_HIP_ARCH})")
  elseif(STATECACHE_WITH_HIP STREQUAL "ON")
    message(FATAL_ERROR "STATECACHE_WITH_HIP=ON but hipcc or libamdhip64 "
                        "is missing (apt-get install hipcc libamdhip64-dev)")
  else()
    statecache_not_run("HIP flavour (kernels, backend, GPU tests)"
                       "no hipcc/libamdhip64: apt-get install hipcc libamdhip64-dev")
  endif()
else()
  statecache_not_run("HIP flavour (kernels, backend, GPU tests)"
                     "STATECACHE_WITH_HIP=OFF")
endif()

# --- CUDA --------------------------------------------------------------
if(NOT STATECACHE_WITH_CUDA STREQUAL "OFF")
  if(CMAKE_CUDA_COMPILER)
    set(STATECACHE_NVCC "${CMAKE_CUDA_COMPILER}" CACHE FILEPATH "nvcc")
  else()
    find_program(STATECACHE_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_PATH
                 PATH_SUFFIXES bin)
  endif()
  if(STATECACHE_NVCC)
    get_filename_component(_sc_cuda_bin "${STATECACHE_NVCC}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${_sc_cuda_bin}" DIRECTORY)
    find_package(CUDAToolkit QUIET)
  endif()
  if(STATECACHE_NVCC AND TARGET CUDA::cudart)
    list(APPEND STATECACHE_GPU_FLAVOURS cuda)
    message(STATUS "statecache: CUDA flavour ON (${STATECACHE_NVCC}, "
                   "sm_${STATECACHE_CUDA_ARCH})")
  elseif(STATECACHE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STATECACHE_WITH_CUDA=ON but nvcc or the CUDA "
                        "runtime is missing (set CMAKE_CUDA_COMPILER)")
  else()
    statecache_not_run("CUDA flavour (kernels, backend, GPU tests)"
                       "no nvcc/cudart (looked in /usr/local/cuda/bin)")
  endif()
else()
  statecache_not_run("CUDA flavour (kernels, backend, GPU tests)"
                     "STATECACHE_WITH_CUDA=OFF")
endif()

# --- The daemon's flavour ----------------------------------------------
set(STATECACHE_DEVICE_GPU_FLAVOUR "")
if(STATECACHE_DEVICE_GPU STREQUAL "AUTO")
  # The machine's own GPU decides when both flavours build (an NVIDIA host
  # with Debian's hipcc installed must not get a HIP daemon); else HIP first.
  if(EXISTS /dev/nvidiactl AND "cuda" IN_LIST STATECACHE_GPU_FLAVOURS)
    set(STATECACHE_DEVICE_GPU_FLAVOUR cuda)
  elseif("hip" IN_LIST STATECACHE_GPU_FLAVOURS)
    set(STATECACHE_DEVICE_GPU_FLAVOUR hip)
  elseif("cuda" IN_LIST STATECACHE_GPU_FLAVOURS)
    set(STATECACHE_DEVICE_GPU_FLAVOUR cuda)
  endif()
elseif(NOT STATECACHE_DEVICE_GPU STREQUAL "none")
  if(NOT STATECACHE_DEVICE_GPU IN_LIST STATECACHE_GPU_FLAVOURS)
    message(FATAL_ERROR "STATECACHE_DEVICE_GPU=${STATECACHE_DEVICE_GPU} but "
                        "that flavour is not built")
  endif()
  set(STATECACHE_DEVICE_GPU_FLAVOUR ${STATECACHE_DEVICE_GPU})
endif()
if(STATECACHE_DEVICE_GPU_FLAVOUR)
  message(STATUS "statecache: daemon GPU backend: "
                 "${STATECACHE_DEVICE_GPU_FLAVOUR}")
else()
  message(STATUS "statecache: daemon GPU backend: none (host only)")
endif()

# statecache_add_gpu_objects(<out-var> <hip|cuda> <source.hip>...)
# Compiles each source for the flavour with a custom command; <out-var>
# receives the object files (for add_library). Header dependencies are
# tracked through the compilers' depfiles.
function(statecache_add_gpu_objects out_var flavour)
  set(objects "")
  foreach(source IN LISTS ARGN)
    get_filename_component(abs "${source}" ABSOLUTE)
    get_filename_component(stem "${source}" NAME_WE)
    set(object "${CMAKE_CURRENT_BINARY_DIR}/${stem}.${flavour}.o")
    if(flavour STREQUAL "hip")
      set(command "${STATECACHE_HIPCC}" --offload-arch=${STATECACHE_HIP_ARCH}
          -O3 -std=c++17 -fPIC -DSTATECACHE_GPU_HIP
          "-I${PROJECT_SOURCE_DIR}" -MD -MF "${object}.d"
          -c "${abs}" -o "${object}")
    else()
      set(arch ${STATECACHE_CUDA_ARCH})
      set(command "${STATECACHE_NVCC}" -x cu -std=c++17 -O3
          -gencode=arch=compute_${arch},code=sm_${arch}
          -gencode=arch=compute_${arch},code=compute_${arch}
          -Xcompiler=-fPIC -DSTATECACHE_GPU_CUDA
          "-I${PROJECT_SOURCE_DIR}" -MD -MF "${object}.d"
          -c "${abs}" -o "${object}")
    endif()
    add_custom_command(
      OUTPUT "${object}"
      COMMAND ${command}
      DEPENDS "${abs}"
      DEPFILE "${object}.d"
      COMMENT "Compiling ${source} for ${flavour}"
      VERBATIM)
    set_source_files_properties("${object}" PROPERTIES
      EXTERNAL_OBJECT TRUE GENERATED TRUE)
    list(APPEND objects "${object}")
  endforeach()
  set(${out_var} ${objects} PARENT_SCOPE)
endfunction()

# statecache_link_gpu_runtime(<target> <hip|cuda>)
# The flavour's macro and runtime library, PUBLIC.
function(statecache_link_gpu_runtime target flavour)
  if(flavour STREQUAL "hip")
    target_compile_definitions(${target} PUBLIC STATECACHE_GPU_HIP
                                                __HIP_PLATFORM_AMD__=1)
    target_link_libraries(${target} PUBLIC "${STATECACHE_HIP_RUNTIME}")
  else()
    target_compile_definitions(${target} PUBLIC STATECACHE_GPU_CUDA)
    target_link_libraries(${target} PUBLIC CUDA::cudart)
  endif()
endfunction()
