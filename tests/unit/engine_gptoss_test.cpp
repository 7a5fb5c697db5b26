// The engine tests (tests/unit/engine_test.cpp, the same source) on gpt-oss (the
// tests/fixtures/arch model: learned attention sinks, every other layer a 16-token window,
// MXFP4 experts with biases, YaRN): batches of sessions give their solo tokens bitwise, as do
// other thread counts, chunked prefill, the prefix cache, prefix handles and forks, snapshots,
// the KV sink, parking and preemption, with the pool's invariants kept.
#define LLMKV_ENGINE_TEST_GPTOSS 1
#define EngineTest EngineGptOssTest
#include "engine_test.cpp"
