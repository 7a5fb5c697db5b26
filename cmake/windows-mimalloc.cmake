# mimalloc.dll, which the host tier loads at run time as Linux loads libmimalloc.so.2 (never
# linked: an embeddable library must not replace its host's malloc), built from a mimalloc
# 2.x source tree (LLMKV_MIMALLOC_SOURCE_DIR: scripts/build_windows.sh stages Debian's
# mimalloc source; the vcpkg port passes mimalloc's release tarball). It is compiled as
# mimalloc's own CMake builds its shared library, minus the redirection module
# (MI_WIN_NOREDIRECT: no malloc override), with libgcc and winpthreads linked in, and lands
# beside llmkv.dll, where the host tier looks first. Without a source tree no mimalloc.dll is
# built and the host tier reports that it needs one.
set(_llmkv_mimalloc_default "")
if(LLMKV_WIN_DEPS_DIR)
  set(_llmkv_mimalloc_default ${LLMKV_WIN_DEPS_DIR}/mimalloc)
endif()
set(LLMKV_MIMALLOC_SOURCE_DIR "${_llmkv_mimalloc_default}" CACHE PATH
  "mimalloc 2.x source tree to build mimalloc.dll from (Windows)")
if(LLMKV_MIMALLOC_SOURCE_DIR)
  if(NOT EXISTS ${LLMKV_MIMALLOC_SOURCE_DIR}/src/static.c)
    message(FATAL_ERROR "LLMKV_MIMALLOC_SOURCE_DIR=${LLMKV_MIMALLOC_SOURCE_DIR} is not a mimalloc source tree")
  endif()
  add_library(llmkv_mimalloc SHARED ${LLMKV_MIMALLOC_SOURCE_DIR}/src/static.c)
  target_include_directories(llmkv_mimalloc PRIVATE ${LLMKV_MIMALLOC_SOURCE_DIR}/include)
  target_compile_definitions(llmkv_mimalloc PRIVATE MI_SHARED_LIB MI_SHARED_LIB_EXPORT MI_WIN_NOREDIRECT)
  target_link_libraries(llmkv_mimalloc PRIVATE psapi shell32 user32 advapi32 bcrypt)
  if(MINGW)
    target_link_options(llmkv_mimalloc PRIVATE -static -static-libgcc)
  endif()
  set_target_properties(llmkv_mimalloc PROPERTIES OUTPUT_NAME mimalloc PREFIX "" IMPORT_PREFIX ""
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR} C_VISIBILITY_PRESET default)
else()
  message(STATUS "llmkv: no LLMKV_MIMALLOC_SOURCE_DIR: mimalloc.dll is not built (the host tier "
    "needs one beside llmkv.dll)")
endif()
