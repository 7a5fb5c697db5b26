// The engine tests (tests/unit/engine_test.cpp, the same source) on a mixture-of-experts
// model: batches of sessions give their solo tokens bitwise, as do other thread counts,
// chunked prefill, the prefix cache, prefix handles and forks, snapshots, parking and
// preemption, with the pool's invariants kept.
#define LLMKV_ENGINE_TEST_MOE 1
#define EngineTest EngineMoeTest
#include "engine_test.cpp"
