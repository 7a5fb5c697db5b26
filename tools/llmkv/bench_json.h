// `--json FILE` of the `llmkv bench` subcommands: one JSON document per run with the command
// line, the machine, the model, the run's parameters and every number the bench prints, as
// flat records ({"bench": "decode", "kv": "int8", "context": 2048, "threads": 2, "tok_s": ...}).
// The human-readable output on stdout is unchanged; the document is written when the bench
// ends (also when it fails after starting, with its exit status). Built with nlohmann::json,
// which the engine already uses for JSON Schemas (Debian: nlohmann-json3-dev).
//
// Document layout (schema "llmkv-bench/1"):
//   schema, bench ("bench batch", ...), command_line (argv), date (UTC, ISO 8601),
//   exit_status, machine {cpu_model, logical_cpus, kernel_family, threads_used[], os,
//   llmkv_version, load_average_start/_end [1, 5, 15 min]}, model {file, path, name, architecture,
//   n_params, weight_bytes, ...}, params {the options in effect}, records [...].
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "llmkv.h"

namespace llmkv_cli {

using Json = nlohmann::ordered_json;  // keys stay in the order they were added

// main() records argv here so that every report can name its command line.
void set_command_line(int argc, char **argv);

// --json FILE on a bench subcommand.
CLI::Option *add_json_option(CLI::App &app, std::string *path);

class BenchReport {
public:
    // bench: the subcommand ("bench", "bench batch", ...); path: --json's value ("" = off).
    BenchReport(std::string bench, std::string path);

    bool enabled() const { return !path_.empty(); }
    // Before the bench starts: false (and a message naming `who`) when FILE cannot be written,
    // so a bad path fails at once rather than after the run.
    bool check_writable(const char *who) const;

    Json &params() { return params_; }
    // The model, from the first engine a bench creates (later calls only add threads_used).
    void set_model(const std::string &path, const llmkv_engine_info &info);
    void set_model(Json model);  // for benches that load the model without an engine
    void note_threads(uint32_t n);
    void add(Json record) { records_.push_back(std::move(record)); }

    // Writes the document (when enabled) with exit_status rc; returns rc, or 1 when rc was 0
    // and the file could not be written.
    int finish(int rc, const char *who);

private:
    std::string bench_, path_;
    Json params_ = Json::object();
    Json model_;
    Json threads_ = Json::array();
    Json records_ = Json::array();
    Json load_start_;
};

// The CLI's name of a KV dtype ("f16", "bf16", "fp8", "int8", "int4", "int4c").
const char *kv_dtype_name(llmkv_kv_dtype d);

}  // namespace llmkv_cli
