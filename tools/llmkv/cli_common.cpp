// Shared parts of the llmkv command line: the common options and helpers.
#include "cli_common.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace llmkv_cli {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Text of common words, tokenized, cut to n tokens; salt selects the word sequence (and
// salts >= 100 start with a villager line, so suffixes share no block with a prefix).
std::vector<int32_t> filler_tokens(llmkv_engine *e, size_t n, unsigned salt) {
    const char *words[] = {"village",  "river", "lantern", "harvest", "market", "bridge",
                           "forest",   "elder", "story",   "winter",  "mill",   "well",
                           "festival", "road",  "stone",   "bell"};
    // Each salt starts differently, so suffixes share no block with each other.
    std::string text = salt < 100 ? "The lore of the village, as the elders tell it."
                                  : " Villager " + std::to_string(salt) + " asks:";
    unsigned x = 12345u + salt;
    std::vector<int32_t> ids(n + 64);
    size_t count = 0;
    while (count < n) {
        for (int i = 0; i < 64; ++i) {
            x = x * 1103515245u + 12345u;
            text += " ";
            text += words[(x >> 16) % 16];
        }
        text += ".";
        llmkv_tokenize(e, text.data(), text.size(), 0, nullptr, 0, &count);
    }
    ids.resize(count);
    llmkv_tokenize(e, text.data(), text.size(), 0, ids.data(), ids.size(), &count);
    ids.resize(n);
    return ids;
}

bool read_file(const std::string &path, std::string &out, const char *who, bool quiet) {
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) {
        if (!quiet)
            std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(),
                         std::strerror(errno));
        return false;
    }
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    if (!ok && !quiet) std::fprintf(stderr, "%s: cannot read %s\n", who, path.c_str());
    return ok;
}

std::string default_model_path() {
    const char *env = std::getenv("LLMKV_MODEL");
    if (env && *env) return env;
    return "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

namespace {

// Accepts a non-negative decimal integer and rewrites it without leading zeros, so CLI11's
// conversion (which reads 0x.. as hex and 0.. as octal) sees plain decimal.
const CLI::Validator &decimal() {
    static const CLI::Validator v(
        [](std::string &s) -> std::string {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
                return "expects a non-negative integer, got '" + s + "'";
            }
            errno = 0;
            unsigned long long x = std::strtoull(s.c_str(), nullptr, 10);
            if (errno) return "'" + s + "' is out of range";
            s = std::to_string(x);
            return std::string();
        },
        "", "decimal");
    return v;
}

const std::vector<std::string> &kv_dtype_names() {
    static const std::vector<std::string> names = {"f16", "bf16", "fp8", "int8", "int4", "int4c"};
    return names;
}

template <typename T>
CLI::Option *add_integer(CLI::App &app, const std::string &names, T *target,
                         const std::string &description) {
    return app.add_option(names, *target, description)
        ->transform(decimal())
        ->type_name("UINT")
        ->capture_default_str();
}

}  // namespace

llmkv_kv_dtype kv_dtype_from_name(const std::string &s) {
    if (s == "f16") return LLMKV_KV_F16;
    if (s == "bf16") return LLMKV_KV_BF16;
    if (s == "fp8") return LLMKV_KV_FP8_E4M3;
    if (s == "int8") return LLMKV_KV_INT8;
    if (s == "int4") return LLMKV_KV_INT4;
    if (s == "int4c") return LLMKV_KV_INT4_COMPACT;
    throw CLI::ValidationError("unknown KV dtype '" + s + "' (f16, bf16, fp8, int8, int4, int4c)");
}

CLI::Option *add_uint_option(CLI::App &app, const std::string &names, uint32_t *target,
                             const std::string &description) {
    return add_integer(app, names, target, description);
}

CLI::Option *add_uint_option(CLI::App &app, const std::string &names, uint64_t *target,
                             const std::string &description) {
    return add_integer(app, names, target, description);
}

CLI::Option *add_uint_option(CLI::App &app, const std::string &names, std::vector<uint32_t> *target,
                             const std::string &description) {
    return app.add_option(names, *target, description)
        ->transform(decimal())
        ->type_name("UINT")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->allow_extra_args(false);
}

CLI::Option *add_uint_list_option(CLI::App &app, const std::string &names,
                                  std::vector<uint32_t> *target, const std::string &description) {
    std::string shown;
    for (uint32_t v : *target) shown += (shown.empty() ? "" : ",") + std::to_string(v);
    auto parse = [target, names](const std::string &list) {
        target->clear();
        std::stringstream ss(list);
        std::string item;
        while (std::getline(ss, item, ',')) {
            std::string err = decimal()(item);
            if (!err.empty()) throw CLI::ValidationError(names, err);
            unsigned long long v = std::strtoull(item.c_str(), nullptr, 10);
            if (v > UINT32_MAX) throw CLI::ValidationError(names, "'" + item + "' is out of range");
            target->push_back(uint32_t(v));
        }
    };
    return app.add_option_function<std::string>(names, parse, description)
        ->type_name("N,N,...")
        ->default_str(shown);
}

CLI::Option *add_model_option(CLI::App &app, std::string *target, bool positional) {
    *target = default_model_path();
    return app
        .add_option(positional ? "model,-m,--model" : "-m,--model", *target,
                    "model file (GGUF); the default is $LLMKV_MODEL when set")
        ->type_name("MODEL")
        ->capture_default_str();
}

CLI::Option *add_threads_option(CLI::App &app, uint32_t *target) {
    return add_uint_option(app, "-t,--threads", target, "worker threads (0: all cores)")
        ->type_name("THREADS");
}

CLI::Option *add_kv_dtype_option(CLI::App &app, const std::string &names, llmkv_kv_dtype *target,
                                 const std::string &description) {
    std::string shown;
    for (const auto &n : kv_dtype_names()) {
        if (kv_dtype_from_name(n) == *target) shown = n;
    }
    return app
        .add_option_function<std::string>(
            names, [target](const std::string &s) { *target = kv_dtype_from_name(s); }, description)
        ->check(CLI::IsMember(kv_dtype_names()))
        ->type_name("DTYPE")
        ->default_str(shown);
}

CLI::Option *add_kv_dtype_list_option(CLI::App &app, const std::string &names,
                                      std::vector<llmkv_kv_dtype> *target,
                                      const std::string &description) {
    auto parse = [target](const std::string &list) {
        target->clear();
        std::stringstream ss(list);
        std::string item;
        while (std::getline(ss, item, ',')) target->push_back(kv_dtype_from_name(item));
        if (target->empty())
            throw CLI::ValidationError(
                "expected DTYPE,DTYPE,... (f16, bf16, fp8, int8, int4, int4c)");
    };
    return app.add_option_function<std::string>(names, parse, description)->type_name("DTYPE,...");
}

void add_sampling_options(CLI::App &app, llmkv_sampling *target) {
    app.add_option("--temp", target->temperature, "sampling temperature (0: greedy)")
        ->capture_default_str();
    add_integer(app, "--top-k", &target->top_k, "keep the K most likely tokens (0: off)");
    app.add_option("--top-p", target->top_p, "nucleus sampling threshold (1: off)")
        ->capture_default_str();
    app.add_option("--min-p", target->min_p, "drop tokens below P x the top probability (0: off)")
        ->capture_default_str();
    app.add_option("--repeat-penalty", target->repeat_penalty,
                   "penalty on recently seen tokens (1: off)")
        ->capture_default_str();
    add_integer(app, "--seed", &target->seed, "random seed of the session's sampler");
}

namespace {
MpiTransportFn g_mpi_transport = nullptr;
}  // namespace

void set_mpi_transport(MpiTransportFn fn) {
    g_mpi_transport = fn;
}

void add_devices_option(CLI::App &app, std::vector<uint32_t> *target) {
    add_uint_list_option(app, "--devices", target,
                         "GPU ranks on these CUDA devices (e.g. 0,1: one rank each over NCCL; one "
                         "device: every rank "
                         "on it)");
}

bool apply_devices(const std::vector<uint32_t> &devices, uint32_t tp, llmkv_engine_params &p) {
    if (devices.empty()) return true;
    for (uint32_t d : devices) {
        if (d > uint32_t(INT32_MAX)) {
            std::fprintf(stderr, "llmkv: --devices: %u is not a device ordinal\n", d);
            return false;
        }
    }
    if (tp <= 1) tp = uint32_t(devices.size());
    if (devices.size() != 1 && devices.size() < tp) {
        std::fprintf(
            stderr,
            "llmkv: --devices lists %zu devices for %u ranks (list one per rank, or one for all)\n",
            devices.size(), tp);
        return false;
    }
    p.backend = LLMKV_BACKEND_CUDA;
    // int32 and uint32 share their representation; every value was checked above.
    p.devices = reinterpret_cast<const int32_t *>(devices.data());
    p.n_devices = devices.size() == 1 ? 1 : tp;
    p.tp_size = tp;
    return true;
}

void add_tp_options(CLI::App &app, TpOptions *target) {
    *target = TpOptions{};
    add_uint_option(app, "--tp", &target->tp,
                    "tensor parallelism: this many ranks (threads of this process)");
    app.add_flag("--mpi", target->mpi,
                 "tensor parallelism: one rank per MPI process (mpirun -np N llmkv-mpi ...)");
    add_devices_option(app, &target->devices);
}

bool apply_tp_options(const TpOptions &o, llmkv_engine_params &p) {
    if (!apply_devices(o.devices, o.mpi ? 0 : o.tp, p)) return false;
    if (!o.devices.empty() && !o.mpi) return true;
    if (o.mpi) {
        if (!g_mpi_transport) {
            std::fprintf(
                stderr,
                "llmkv: --mpi needs the llmkv-mpi binary (built where Open MPI's development files "
                "are installed)\n");
            return false;
        }
        std::string error;
        const llmkv_tp_transport *t = g_mpi_transport(&error);
        if (!t) {
            std::fprintf(stderr, "llmkv: MPI: %s\n", error.c_str());
            return false;
        }
        // --devices: one listed, every process's rank on it; several, rank r on the r-th.
        if (p.n_devices > 1) p.n_devices = uint32_t(o.devices.size());
        p.tp_transport = t;
        p.tp_size = o.tp;
        return true;
    }
    p.tp_size = o.tp;
    return true;
}

bool serve_tp_rank(const llmkv_engine_params &p, int *rc) {
    if (!p.tp_transport || p.tp_transport->rank == 0) return false;
    const llmkv_status st = llmkv_tp_serve(&p);
    if (st != LLMKV_OK) {
        std::fprintf(stderr, "llmkv: rank %d: %s: %s\n", p.tp_transport->rank,
                     llmkv_status_string(st), llmkv_last_error());
    }
    *rc = st == LLMKV_OK ? 0 : 1;
    return true;
}

}  // namespace llmkv_cli
