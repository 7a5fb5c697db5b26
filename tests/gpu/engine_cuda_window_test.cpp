// The sliding-window engine tests (tests/unit/engine_window_test.cpp, the same source) on the
// CUDA backend: layer groups released outside the window give bitwise the tokens of an
// engine that keeps every block, through chunked prefill, batching, the prefix cache, prefix
// handles and their snapshots, and preemption; the blocks held are exactly the window's.
#define LLMKV_WINDOW_TEST_CUDA 1
#include "../unit/engine_window_test.cpp"
