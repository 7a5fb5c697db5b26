# Cross-compiling llmkv for 64-bit Windows with Debian's MinGW-w64 (package
# g++-mingw-w64-x86-64-posix: the POSIX thread model, which std::thread and std::mutex need).
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
# scripts/build_windows.sh does this with the dependencies staged; scripts/test_windows.sh
# runs the results under Wine.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(LLMKV_MINGW_PREFIX x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${LLMKV_MINGW_PREFIX}-gcc-posix)
set(CMAKE_CXX_COMPILER ${LLMKV_MINGW_PREFIX}-g++-posix)
set(CMAKE_RC_COMPILER ${LLMKV_MINGW_PREFIX}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${LLMKV_MINGW_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # flatc runs on the build machine
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Tests and tools run under Wine from CTest.
set(CMAKE_CROSSCOMPILING_EMULATOR wine)
# Programs carry the C++ runtime, libgcc and winpthreads (no MinGW DLLs to ship beside them).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
# C99 printf family (%zu, %lld) instead of msvcrt's (src/platform/compiler.h).
set(CMAKE_C_FLAGS_INIT "-D__USE_MINGW_ANSI_STDIO=1")
set(CMAKE_CXX_FLAGS_INIT "-D__USE_MINGW_ANSI_STDIO=1")
