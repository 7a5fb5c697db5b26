// Shared helpers of the llmkv command line: option parsing and the default model path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmkv.h"

namespace llmkv_cli {

std::string default_model_path();
double now();  // seconds, monotonic
std::vector<int32_t> filler_tokens(llmkv_engine *e, size_t n, unsigned salt);
uint64_t parse_uint(const char *s, const char *name);  // exits with a message on bad input
double parse_float(const char *s, const char *name);
llmkv_kv_dtype parse_kv_dtype(const char *s);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_quality(int argc, char **argv);
int cmd_bench_prefix(int argc, char **argv);
int cmd_bench_batch(int argc, char **argv);
int cmd_bench_offload(int argc, char **argv);
int cmd_demo(int argc, char **argv);

}  // namespace llmkv_cli
