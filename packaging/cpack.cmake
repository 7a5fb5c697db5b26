# Debian packages of llmkv, built by CPack from an already-built tree (scripts/package_deb.sh):
#   libllmkv0       component runtime  libllmkv.so.0 and libllmkv.so.0.X.Y, nothing else
#   libllmkv-dev    component dev      llmkv.h, libllmkv.a, libllmkv.so, llmkv.pc, the CMake package
#   llmkv-tools     component tools    /usr/bin/llmkv (links libllmkv.a: no libllmkv0 needed)
#   libllmkv-cuda0  component cuda     libllmkv-cuda.so, the CUDA module libllmkv dlopens
# Every value comes from project(VERSION) and the files in packaging/debian/; docs/PACKAGING.md
# says why CPack and not debian/ + dpkg-buildpackage.
# Included at the end of the top-level CMakeLists.txt, after every install() rule.

set(LLMKV_DEB_REVISION "1" CACHE STRING "Debian revision of the llmkv packages (0.6.0-<this>)")
set(LLMKV_DEB_MAINTAINER "llmkv maintainers <maintainers@users.noreply.a-seed-192be97b.example>"
    CACHE STRING "Maintainer field of the llmkv Debian packages")
set(LLMKV_DEB_DIR ${CMAKE_CURRENT_LIST_DIR}/debian)
set(LLMKV_DEB_GEN ${CMAKE_BINARY_DIR}/packaging/debian)
set(LLMKV_DEB_VERSION "${PROJECT_VERSION}-${LLMKV_DEB_REVISION}")
# A program linked against this libllmkv.so.0 needs at least this upstream version when the
# symbols file does not say better (shlibs): minor versions of 0.x only add.
set(LLMKV_DEB_SHLIBS_MIN "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}.0")

# ---- per-package documentation: copyright and changelog.Debian.gz ----------------------
find_program(LLMKV_GZIP gzip)
file(MAKE_DIRECTORY ${LLMKV_DEB_GEN})
if(LLMKV_GZIP)
  # gzip -9n: no name or time stamp in the header (reproducible; lintian checks both).
  execute_process(COMMAND ${LLMKV_GZIP} -9nc ${LLMKV_DEB_DIR}/changelog
    OUTPUT_FILE ${LLMKV_DEB_GEN}/changelog.Debian.gz)
endif()
set(LLMKV_DEB_COMPONENTS runtime dev)
if(TARGET llmkv_cli)
  list(APPEND LLMKV_DEB_COMPONENTS tools)
endif()
if(TARGET llmkv_cuda)
  list(APPEND LLMKV_DEB_COMPONENTS cuda)
endif()
set(LLMKV_DEB_NAME_runtime libllmkv${PROJECT_VERSION_MAJOR})
set(LLMKV_DEB_NAME_dev libllmkv-dev)
set(LLMKV_DEB_NAME_tools llmkv-tools)
set(LLMKV_DEB_NAME_cuda libllmkv-cuda${PROJECT_VERSION_MAJOR})
# These files are for the .debs only: EXCLUDE_FROM_ALL keeps them out of a plain
# `cmake --install` (a prefix install, the vcpkg port) while CPack's per-component install
# includes them.
foreach(comp IN LISTS LLMKV_DEB_COMPONENTS)
  set(_doc ${CMAKE_INSTALL_DATAROOTDIR}/doc/${LLMKV_DEB_NAME_${comp}})
  install(FILES ${LLMKV_DEB_DIR}/copyright DESTINATION ${_doc} COMPONENT ${comp} EXCLUDE_FROM_ALL)
  if(LLMKV_GZIP)
    install(FILES ${LLMKV_DEB_GEN}/changelog.Debian.gz DESTINATION ${_doc} COMPONENT ${comp} EXCLUDE_FROM_ALL)
  endif()
endforeach()
if(TARGET llmkv_cli)
  # The manual page of the command line (lintian: binary-without-manpage).
  execute_process(COMMAND ${LLMKV_GZIP} -9nc ${LLMKV_DEB_DIR}/llmkv.1 OUTPUT_FILE ${LLMKV_DEB_GEN}/llmkv.1.gz)
  install(FILES ${LLMKV_DEB_GEN}/llmkv.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools EXCLUDE_FROM_ALL)
endif()
if(TARGET llmkv_cuda)
  install(FILES ${LLMKV_DEB_DIR}/libllmkv-cuda.lintian-overrides
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides RENAME ${LLMKV_DEB_NAME_cuda} COMPONENT cuda EXCLUDE_FROM_ALL)
endif()

# `cmake --install --strip` (CPack: CPACK_STRIP_FILES) leaves static libraries alone; strip
# libllmkv.a the way dh_strip does for -dev packages (debug info, .comment, .note).
if(CMAKE_STRIP)
  install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug --remove-section=.comment --remove-section=.note
    --enable-deterministic-archives \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libllmkv.a\")
endif()" COMPONENT dev)
endif()

# ---- control files of libllmkv0: shlibs, symbols (from packaging/abi/symbols.txt), triggers --
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/abi/symbols.txt _llmkv_symbol_lines REGEX "^llmkv_")
set(_symbols "libllmkv.so.${PROJECT_VERSION_MAJOR} ${LLMKV_DEB_NAME_runtime} #MINVER#\n")
string(APPEND _symbols "* Build-Depends-Package: libllmkv-dev\n")
foreach(line IN LISTS _llmkv_symbol_lines)
  string(REGEX MATCH "^(llmkv_[A-Za-z0-9_]+)[ \t]+([0-9.]+)" _m "${line}")
  string(APPEND _symbols " ${CMAKE_MATCH_1}@Base ${CMAKE_MATCH_2}\n")
endforeach()
file(WRITE ${LLMKV_DEB_GEN}/symbols "${_symbols}")
file(WRITE ${LLMKV_DEB_GEN}/shlibs
  "libllmkv ${PROJECT_VERSION_MAJOR} ${LLMKV_DEB_NAME_runtime} (>= ${LLMKV_DEB_SHLIBS_MIN})\n")
# ldconfig through the dpkg trigger (no maintainer scripts).
file(WRITE ${LLMKV_DEB_GEN}/triggers "activate-noawait ldconfig\n")

# ---- CPack -------------------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME llmkv)
set(CPACK_PACKAGE_VENDOR "llmkv")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${LLMKV_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${LLMKV_DEB_COMPONENTS})
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
  OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${LLMKV_DEB_REVISION})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${LLMKV_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SOURCE llmkv)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# libllmkv0's own shlibs/symbols make dpkg-shlibdeps resolve libllmkv.so.0 for packages built
# against it; CPack's own shlibs generation (policy "=") is replaced by ours.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${LLMKV_DEB_NAME_runtime})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# The host tier (kv_host_bytes > 0; off by default) dlopens libmimalloc.so.2, which
# dpkg-shlibdeps cannot see.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "libmimalloc2.0")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  "${LLMKV_DEB_GEN}/shlibs;${LLMKV_DEB_GEN}/symbols;${LLMKV_DEB_GEN}/triggers")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "embeddable LLM inference runtime - shared library
llmkv runs GGUF language models (Llama, Qwen, Gemma, SmolLM families) on the
CPU, or on NVIDIA GPUs with the libllmkv-cuda${PROJECT_VERSION_MAJOR} module, around a quantized
paged KV cache with a shared prefix cache, sessions, constrained decoding and
snapshots.

This package contains the shared library libllmkv.so.${PROJECT_VERSION_MAJOR}.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libllmkv-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
# The exported static target (llmkv::llmkv_static) and the .pc file's Libs.private name
# utf8proc and xxhash; llmkvConfig.cmake finds them with pkg-config.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "${LLMKV_DEB_NAME_runtime} (= ${LLMKV_DEB_VERSION}), libutf8proc-dev, libxxhash-dev, pkgconf | pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION "embeddable LLM inference runtime - development files
llmkv runs GGUF language models on the CPU or NVIDIA GPUs around a quantized
paged KV cache.

This package contains the C header llmkv.h, the static library, the pkg-config
file (pkg-config llmkv) and the CMake package (find_package(llmkv), targets
llmkv::llmkv and llmkv::llmkv_static).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME llmkv-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_RECOMMENDS "libmimalloc2.0")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "embeddable LLM inference runtime - command line
llmkv runs GGUF language models on the CPU or NVIDIA GPUs around a quantized
paged KV cache.

This package contains the llmkv command line: run a model on a prompt, chat,
inspect a GGUF file, save and load prefix snapshots.")

if(TARGET llmkv_cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME ${LLMKV_DEB_NAME_cuda})
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION libs)
  # libcudart.so.N and libcublas.so.N come from NVIDIA's CUDA apt repository
  # (developer.download.nvidia.com/compute/cuda/repos/debian12), whose packages are named by the
  # toolkit version; dpkg-shlibdeps finds no Debian package for them, so they are named here.
  # The module is only loaded by the libllmkv of the same version (it checks the module ABI).
  find_package(CUDAToolkit QUIET)  # found in kernels/; its variables are needed here
  set(LLMKV_DEB_CUDA_SUFFIX "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(LLMKV_DEB_CUDA_DEPENDS "" CACHE STRING
    "Depends of libllmkv-cuda besides what dpkg-shlibdeps finds (empty: from the CUDA toolkit version)")
  set(_cuda_depends "${LLMKV_DEB_CUDA_DEPENDS}")
  if(NOT _cuda_depends)
    set(_cuda_depends "${LLMKV_DEB_NAME_runtime} (= ${LLMKV_DEB_VERSION}), cuda-cudart-${LLMKV_DEB_CUDA_SUFFIX}, libcublas-${LLMKV_DEB_CUDA_SUFFIX}")
  endif()
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "${_cuda_depends}")
  set(CPACK_DEBIAN_CUDA_PACKAGE_CONTROL_EXTRA "${LLMKV_DEB_GEN}/triggers")
  set(CPACK_COMPONENT_CUDA_DESCRIPTION "embeddable LLM inference runtime - CUDA module
llmkv runs GGUF language models on the CPU or NVIDIA GPUs around a quantized
paged KV cache.

This package contains libllmkv-cuda.so, the CUDA backend that libllmkv loads at
run time when an engine asks for a GPU. It needs the CUDA ${CUDAToolkit_VERSION_MAJOR} runtime and cuBLAS
from NVIDIA's CUDA repository and an NVIDIA driver.")
endif()

include(CPack)
