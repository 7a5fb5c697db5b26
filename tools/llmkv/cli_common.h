// Shared parts of the llmkv command line: one CLI11 parser for every subcommand, the options
// they have in common (model, threads, KV dtype, sampling), and small helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llmkv.h"

namespace llmkv_cli {

std::string default_model_path();
double now();  // seconds, monotonic
// The whole file into out. False (and a message on stderr naming `who`) when it cannot be
// opened or read; quiet = no message.
bool read_file(const std::string &path, std::string &out, const char *who, bool quiet = false);
std::vector<int32_t> filler_tokens(llmkv_engine *e, size_t n, unsigned salt);

// A subcommand: its parser (a child of the parent it was added to) and what runs it once the
// command line has been parsed. The action reads the values the parser stored.
struct Command {
    CLI::App *app = nullptr;
    std::function<int()> action;
};

// Each subcommand adds itself to `parent`, its options bound to state the action owns.
Command add_run(CLI::App &parent);
Command add_demo(CLI::App &parent);
Command add_inspect(CLI::App &parent);
Command add_bench(CLI::App &parent);  // plain `bench`; its sub-subcommands are added below
Command add_bench_quality(CLI::App &bench);
Command add_bench_prefix(CLI::App &bench);
Command add_bench_batch(CLI::App &bench);
Command add_bench_offload(CLI::App &bench);
Command add_bench_grammar(CLI::App &bench);
Command add_bench_window(CLI::App &bench);
Command add_bench_tp(CLI::App &bench);

// The options the subcommands share, defined once. Each sets *target to its default first.
// -m/--model: $LLMKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf. With positional, the
// model may also be given as the first argument (`llmkv inspect MODEL`).
CLI::Option *add_model_option(CLI::App &app, std::string *target, bool positional = false);
// -t/--threads: worker threads, 0 = all cores.
CLI::Option *add_threads_option(CLI::App &app, uint32_t *target);
// A KV dtype: f16, bf16, fp8, int8, int4 or int4c (anything else is an error).
CLI::Option *add_kv_dtype_option(CLI::App &app, const std::string &names, llmkv_kv_dtype *target,
                                 const std::string &description);
// A comma-separated list of KV dtypes (`--kv-dtypes f16,int8`); the last occurrence wins.
CLI::Option *add_kv_dtype_list_option(CLI::App &app, const std::string &names,
                                      std::vector<llmkv_kv_dtype> *target,
                                      const std::string &description);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed; target holds the defaults.
void add_sampling_options(CLI::App &app, llmkv_sampling *target);

// A non-negative decimal integer (no sign, no 0x, leading zeros are decimal); out of range
// for the target type is an error.
CLI::Option *add_uint_option(CLI::App &app, const std::string &names, uint32_t *target,
                             const std::string &description);
CLI::Option *add_uint_option(CLI::App &app, const std::string &names, uint64_t *target,
                             const std::string &description);
// Repeatable: every occurrence adds one value (`-t 1 -t 2`).
CLI::Option *add_uint_option(CLI::App &app, const std::string &names, std::vector<uint32_t> *target,
                             const std::string &description);
// A comma-separated list of such integers (`--contexts 512,2048`); the last occurrence wins.
CLI::Option *add_uint_list_option(CLI::App &app, const std::string &names,
                                  std::vector<uint32_t> *target, const std::string &description);

llmkv_kv_dtype kv_dtype_from_name(const std::string &name);  // throws CLI::ValidationError

// ---- tensor parallelism (CPU ranks, GPU ranks)
// ------------------------------------------------------
// --tp N: N ranks as threads of this process. --mpi: one rank per MPI process (`mpirun -np
// N llmkv-mpi run --mpi ...`; only the llmkv-mpi binary, built where Open MPI is installed,
// has it).
// --devices LIST: GPU ranks (the CUDA backend), one per listed device, or all on the one
// device listed.
struct TpOptions {
    uint32_t tp = 0;
    bool mpi = false;
    std::vector<uint32_t> devices;
};
void add_tp_options(CLI::App &app, TpOptions *target);
// Sets p's tp_size / tp_transport (and backend / devices with --devices). False (and a
// message) when --mpi or --devices cannot be honoured.
bool apply_tp_options(const TpOptions &o, llmkv_engine_params &p);
// --devices for `tp` ranks (tp <= 1 with several devices: one rank per device): the CUDA
// backend, p.devices pointing into `devices` (which must outlive p). The first tp devices
// when at least tp are listed, every rank on the device when one is. False (and a message)
// otherwise. Nothing listed: nothing changes.
bool apply_devices(const std::vector<uint32_t> &devices, uint32_t tp, llmkv_engine_params &p);
void add_devices_option(CLI::App &app, std::vector<uint32_t> *target);
// With --mpi on ranks 1..: serves rank 0's engine until it ends (true, exit status in *rc).
// False on rank 0 (and without --mpi): the caller creates the engine.
bool serve_tp_rank(const llmkv_engine_params &p, int *rc);
// The MPI transport (set by llmkv-mpi's main before the command line runs): initializes
// MPI on first use; null and *error on failure.
using MpiTransportFn = const llmkv_tp_transport *(*)(std::string *error);
void set_mpi_transport(MpiTransportFn fn);
// The llmkv command line (main() of llmkv and llmkv-mpi).
int cli_main(int argc, char **argv);

}  // namespace llmkv_cli
