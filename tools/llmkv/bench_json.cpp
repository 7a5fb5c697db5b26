// `--json FILE` of the bench subcommands: see bench_json.h.
#include "bench_json.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "backend/cpu/matmul.h"
#include "platform/os.h"

namespace llmkv_cli {

namespace {

std::vector<std::string> &command_line() {
    static std::vector<std::string> argv;
    return argv;
}

// "model name" of the first processor in /proc/cpuinfo (x86); other architectures name it
// differently ("Hardware", "cpu model", "Model name"); "unknown" when none is there.
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, fallback;
    while (std::getline(in, line)) {
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon);
        while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
        std::string value = line.substr(colon + 1);
        value.erase(0, std::min(value.find_first_not_of(" \t"), value.size()));
        if (value.empty()) continue;
        if (key == "model name") return value;
        if (fallback.empty() &&
            (key == "Hardware" || key == "cpu model" || key == "Model name" || key == "cpu")) {
            fallback = value;
        }
    }
    return fallback.empty() ? "unknown" : fallback;
}

std::string os_name() {
    return llmkv::os::system_name();
}

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    llmkv::os::utc_calendar(t, tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// The 1, 5 and 15 minute load averages (/proc/loadavg); null where unavailable. On a shared
// machine they say how much the numbers are worth.
Json load_average() {
    std::ifstream in("/proc/loadavg");
    double a = 0, b = 0, c = 0;
    if (!(in >> a >> b >> c)) return nullptr;
    return Json::array({a, b, c});
}

}  // namespace

void set_command_line(int argc, char **argv) {
    command_line().assign(argv, argv + argc);
}

CLI::Option *add_json_option(CLI::App &app, std::string *path) {
    return app.add_option("--json", *path, "also write every result as one JSON document to FILE")
        ->type_name("FILE");
}

const char *kv_dtype_name(llmkv_kv_dtype d) {
    switch (d) {
        case LLMKV_KV_F16:
            return "f16";
        case LLMKV_KV_BF16:
            return "bf16";
        case LLMKV_KV_FP8_E4M3:
            return "fp8";
        case LLMKV_KV_INT8:
            return "int8";
        case LLMKV_KV_INT4:
            return "int4";
        case LLMKV_KV_INT4_COMPACT:
            return "int4c";
        default:
            return "?";
    }
}

BenchReport::BenchReport(std::string bench, std::string path)
    : bench_(std::move(bench)), path_(std::move(path)), load_start_(load_average()) {}

bool BenchReport::check_writable(const char *who) const {
    if (!enabled()) return true;
    // Append mode: an existing file is left as it is until the report replaces it.
    std::FILE *f = std::fopen(path_.c_str(), "a");
    if (!f) {
        std::fprintf(stderr, "%s: --json %s: cannot write there\n", who, path_.c_str());
        return false;
    }
    std::fclose(f);
    return true;
}

void BenchReport::set_model(const std::string &path, const llmkv_engine_info &info) {
    note_threads(info.n_threads);
    if (!model_.is_null()) return;
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    model_ = Json{{"file", std::filesystem::path(path).filename().string()},
                  {"path", path},
                  {"file_bytes", ec ? Json(nullptr) : Json(uint64_t(size))},
                  {"name", info.model_name},
                  {"architecture", info.architecture},
                  {"n_params", info.n_params},
                  {"weight_bytes", info.weight_bytes},
                  {"n_layers", info.n_layers},
                  {"n_embd", info.n_embd},
                  {"n_heads", info.n_heads},
                  {"n_kv_heads", info.n_kv_heads},
                  {"head_dim", info.head_dim},
                  {"n_vocab", info.n_vocab},
                  {"n_ctx_train", info.n_ctx_train},
                  {"kv_window", info.kv_window},
                  {"backend", info.backend_name}};
}

void BenchReport::set_model(Json model) {
    if (model_.is_null()) model_ = std::move(model);
}

void BenchReport::note_threads(uint32_t n) {
    for (const Json &t : threads_) {
        if (t.get<uint32_t>() == n) return;
    }
    threads_.push_back(n);
}

int BenchReport::finish(int rc, const char *who) {
    if (!enabled()) return rc;
    Json doc;
    doc["schema"] = "llmkv-bench/1";
    doc["bench"] = bench_;
    doc["command_line"] = command_line();
    doc["date"] = utc_now();
    doc["exit_status"] = rc;
    doc["machine"] = Json{{"cpu_model", cpu_model()},
                          {"logical_cpus", std::thread::hardware_concurrency()},
                          {"kernel_family", llmkv::cpu::matmul_kernel_name()},
                          {"threads_used", threads_},
                          {"os", os_name()},
                          {"llmkv_version", llmkv_version_string()},
                          {"load_average_start", load_start_},
                          {"load_average_end", load_average()}};
    doc["model"] = model_.is_null() ? Json::object() : model_;
    doc["params"] = params_;
    doc["records"] = records_;
    // Written beside FILE, then renamed over it: a reader never sees half a document.
    const std::string tmp = path_ + ".tmp";
    bool ok = false;
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (out) {
            out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
            out.close();
            ok = bool(out);
        }
    }
    if (ok) ok = std::rename(tmp.c_str(), path_.c_str()) == 0;
    if (!ok) {
        std::remove(tmp.c_str());
        std::fprintf(stderr, "%s: could not write --json %s\n", who, path_.c_str());
        return rc ? rc : 1;
    }
    return rc;
}

}  // namespace llmkv_cli
