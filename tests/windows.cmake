# The Windows test subset (a MinGW-w64 build, scripts/build_windows.sh; run under Wine by
# scripts/test_windows.sh through CTest's cross-compiling emulator). The library's own logic
# is the same on every OS, so this subset covers what the platform layer touches and the C
# API as a Windows host sees it:
#  - unit tests of the GGUF reader, tokenizer, block pool, snapshots (file writes, atomic
#    replace, mapping), codecs and kernels, prefix cache, scheduler, grammar, sampler, and
#    the engine itself;
#  - every C API test (cmocka), linked against llmkv.dll;
#  - examples/game_loop.c on the real model (tests/cli/example_game_loop_test.sh through Wine).
#  - tensor parallelism with ranks as threads (tensor_parallel_test.cpp);
#  - the host tier and host offload, with the mimalloc.dll the build makes from Debian's
#    mimalloc source (scripts/test_windows.sh puts it beside the test programs, where the
#    tier looks first).
# Left out, with why: the fault and fuzz builds (sanitizers), golden tests (their time under
# Wine; the demo runs instead), the shell-script CLI tests and the language bindings.
# (llmkv_test_support, LLMKV_TEST_DEFINES and llmkv_add_capi_tests come from tests/CMakeLists.txt.)
set(LLMKV_WINDOWS_UNIT_TESTS
  gguf tokenizer block_pool snapshot codec attention attention_partition matmul matmul_lane
  matmul_packed matmul_avx512 prefix_cache scheduler grammar sampler chat_template constraints
  batching engine engine_window kv_groups forward arch_forward backend_seam copy_engine host_tier
  host_offload float_math activation tensor_parallel)
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

llmkv_add_capi_tests(900)  # tests/CMakeLists.txt

# examples/game_loop.c: every way of driving llmkv from the frame loop serves all NPCs.
if(TARGET example_game_loop)
  add_test(NAME windows.example_game_loop COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/example_game_loop_test.sh
    $<TARGET_FILE:example_game_loop> ${CMAKE_SOURCE_DIR}/models/SmolLM2-135M-Instruct.Q4_1.gguf)
  set_tests_properties(windows.example_game_loop PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77 TIMEOUT 300
    RUN_SERIAL TRUE ENVIRONMENT "LLMKV_TEST_LAUNCHER=wine;GAME_LOOP_SECONDS=2")
endif()
