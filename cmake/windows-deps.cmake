# Dependencies of a Windows (MinGW-w64) build. Debian ships no Windows builds of them, so
# scripts/build_windows.sh stages them in LLMKV_WIN_DEPS_DIR:
#   include/  the header-only ones, taken from this machine's Debian packages (xxhash.h,
#             flatbuffers/, nlohmann/, CLI/): the same versions the Linux build uses
#   utf8proc/ the source of Debian's utf8proc package (its orig tarball, checksum-verified),
#             compiled here into a static library
#   mimalloc/ the source of Debian's mimalloc package (cmake/windows-mimalloc.cmake makes
#             mimalloc.dll of it)
# xxHash is used header-only (XXH_INLINE_ALL), as its header supports.
# (A Windows build without LLMKV_WIN_DEPS_DIR, such as the vcpkg port's MinGW triplets, finds
# its dependencies as the Linux build does.)
if(NOT EXISTS ${LLMKV_WIN_DEPS_DIR}/include/xxhash.h)
  message(FATAL_ERROR "A Windows build needs LLMKV_WIN_DEPS_DIR with the staged dependencies: "
    "run scripts/build_windows.sh")
endif()

add_library(llmkv_win_headers INTERFACE)
target_include_directories(llmkv_win_headers SYSTEM INTERFACE ${LLMKV_WIN_DEPS_DIR}/include)

add_library(llmkv_utf8proc STATIC ${LLMKV_WIN_DEPS_DIR}/utf8proc/utf8proc.c)
target_include_directories(llmkv_utf8proc SYSTEM PUBLIC ${LLMKV_WIN_DEPS_DIR}/utf8proc)
target_compile_definitions(llmkv_utf8proc PUBLIC UTF8PROC_STATIC)

# The names the rest of the build links against on Linux.
add_library(PkgConfig::UTF8PROC INTERFACE IMPORTED)
set_target_properties(PkgConfig::UTF8PROC PROPERTIES INTERFACE_LINK_LIBRARIES llmkv_utf8proc)
add_library(PkgConfig::XXHASH INTERFACE IMPORTED)
set_target_properties(PkgConfig::XXHASH PROPERTIES INTERFACE_LINK_LIBRARIES llmkv_win_headers
  INTERFACE_COMPILE_DEFINITIONS XXH_INLINE_ALL)
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_LINK_LIBRARIES llmkv_win_headers)
add_library(CLI11::CLI11 INTERFACE IMPORTED)
set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_LINK_LIBRARIES llmkv_win_headers)

# Test dependencies: GoogleTest from its Debian source package (googletest, /usr/src/googletest)
# and cmocka from the source tarball of Debian's cmocka package (staged as above).
if(LLMKV_BUILD_TESTS)
  set(LLMKV_GOOGLETEST_SOURCE_DIR /usr/src/googletest CACHE PATH "GoogleTest sources (Debian: googletest)")
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)  # gguf_test uses its matchers
  add_subdirectory(${LLMKV_GOOGLETEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(llmkv_cmocka STATIC ${LLMKV_WIN_DEPS_DIR}/cmocka/src/cmocka.c)
  target_include_directories(llmkv_cmocka SYSTEM PUBLIC ${LLMKV_WIN_DEPS_DIR}/cmocka/include)
  target_compile_definitions(llmkv_cmocka PRIVATE HAVE_SIGNAL_H HAVE_INTTYPES_H HAVE_MALLOC_H
    HAVE_STDINT_H HAVE__VSNPRINTF_S HAVE__SNPRINTF_S HAVE_SNPRINTF HAVE_VSNPRINTF)
  add_library(PkgConfig::CMOCKA INTERFACE IMPORTED)
  set_target_properties(PkgConfig::CMOCKA PROPERTIES INTERFACE_LINK_LIBRARIES llmkv_cmocka)
endif()
