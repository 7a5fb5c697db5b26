# The Windows test subset (a MinGW-w64 build, scripts/build_windows.sh; run under Wine by
# scripts/test_windows.sh through CTest's cross-compiling emulator). The library's own logic
# is the same on every OS, so this subset covers what the platform layer touches and the C
# API as a Windows host sees it:
#  - unit tests of the GGUF reader, tokenizer, block pool, snapshots (file writes, atomic
#    replace, mapping), codecs and kernels, prefix cache, scheduler, grammar, sampler, and
#    the engine itself;
#  - every C API test (cmocka), linked against llmkv.dll.
# Left out, with why: host-tier and host-offload tests (they need mimalloc, which Debian
# ships only for Linux: on Windows the tier needs mimalloc.dll beside llmkv.dll), the fault
# and fuzz builds (sanitizers), golden tests (their time under Wine; the demo runs instead),
# the shell-script CLI tests and the language bindings.
# (llmkv_test_support and LLMKV_TEST_DEFINES come from tests/CMakeLists.txt.)
set(LLMKV_WINDOWS_UNIT_TESTS
  gguf tokenizer block_pool snapshot codec attention attention_partition matmul matmul_lane
  matmul_packed matmul_avx512 prefix_cache scheduler grammar sampler chat_template constraints
  batching engine engine_window kv_groups forward arch_forward backend_seam copy_engine)
set(LLMKV_UNIT_SOURCES "")
foreach(t ${LLMKV_WINDOWS_UNIT_TESTS})
  list(APPEND LLMKV_UNIT_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}_test.cpp)
endforeach()
add_executable(llmkv_unit_tests ${LLMKV_UNIT_SOURCES})
target_link_libraries(llmkv_unit_tests PRIVATE llmkv_test_support GTest::gtest GTest::gtest_main GTest::gmock
  nlohmann_json::nlohmann_json)
target_compile_definitions(llmkv_unit_tests PRIVATE ${LLMKV_TEST_DEFINES})
target_compile_options(llmkv_unit_tests PRIVATE ${LLMKV_WARNINGS})
# One CTest entry for the whole binary: listing every test through Wine at build time would
# cost more than running them.
add_test(NAME windows.unit COMMAND llmkv_unit_tests --gtest_brief=1)
set_tests_properties(windows.unit PROPERTIES LABELS "unit" TIMEOUT 1800)

file(GLOB LLMKV_CAPI_SOURCES CONFIGURE_DEPENDS capi/*.c)
foreach(src ${LLMKV_CAPI_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(capi_${name} ${src})
  target_link_libraries(capi_${name} PRIVATE llmkv PkgConfig::CMOCKA)
  target_compile_definitions(capi_${name} PRIVATE ${LLMKV_TEST_DEFINES})
  target_compile_options(capi_${name} PRIVATE -Wall -Wextra -Werror -pedantic)
  add_test(NAME capi.${name} COMMAND capi_${name})
  set_tests_properties(capi.${name} PROPERTIES LABELS "capi" TIMEOUT 900)
endforeach()
