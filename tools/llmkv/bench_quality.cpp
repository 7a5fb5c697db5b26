// `llmkv bench quality`: what each KV codec costs in model quality. For every K/V codec
// pair: perplexity on a fixed English corpus at two context lengths, mean KL divergence of
// the next-token distribution against f16/f16 and top-1 agreement (computed position by
// position in lockstep with the f16 run), and a passkey-retrieval probe at several depths
// of long filler text. Prints a markdown table and writes a CSV.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bench_json.h"
#include "cli_common.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "kv/codec.h"
#include "kv/kv_cache.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/tokenizer.h"

namespace llmkv_cli {

namespace {

using llmkv::KvGeometry;

struct CodecPair {
    const char *label;
    llmkv_kv_dtype k, v;
    llmkv_kv_rotation rotation;
    bool on_request = false;  // only when --pairs names it
    bool sink = false;        // the KV sink (LLMKV_ENGINE_KV_SINK); off in every other pair
};

// The pairs the quality report covers; the first is the reference.
const CodecPair kPairs[] = {
    {"f16/f16", LLMKV_KV_F16, LLMKV_KV_F16, LLMKV_KV_ROTATION_NONE},
    {"bf16/bf16", LLMKV_KV_BF16, LLMKV_KV_BF16, LLMKV_KV_ROTATION_NONE},
    {"fp8/fp8", LLMKV_KV_FP8_E4M3, LLMKV_KV_FP8_E4M3, LLMKV_KV_ROTATION_NONE},
    {"int8/int8", LLMKV_KV_INT8, LLMKV_KV_INT8, LLMKV_KV_ROTATION_NONE},
    {"int8/int4", LLMKV_KV_INT8, LLMKV_KV_INT4, LLMKV_KV_ROTATION_NONE},
    {"int8/int4 rot", LLMKV_KV_INT8, LLMKV_KV_INT4, LLMKV_KV_ROTATION_KV},
    {"int4/int4", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_NONE},
    {"int4/int4 rot", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_KV},
    {"int4c/int4c", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_NONE},
    {"int4c/int4c rot", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_KV},
    // One side rotated (LLMKV_KV_ROTATION_K / _V): only with --pairs.
    {"int4/int4 rot-k", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_K, true},
    {"int4/int4 rot-v", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_V, true},
    {"int4c/int4c rot-k", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_K, true},
    {"int4c/int4c rot-v", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_V, true},
    // With the KV sink (position 0 read from fp16 rows; the engine's default for int4 codecs).
    {"int4/int4 sink", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_NONE, true, true},
    {"int4/int4 rot sink", LLMKV_KV_INT4, LLMKV_KV_INT4, LLMKV_KV_ROTATION_KV, true, true},
    {"int4c/int4c sink", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_NONE, true,
     true},
    {"int4c/int4c rot sink", LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, LLMKV_KV_ROTATION_KV,
     true, true},
    {"int8/int8 sink", LLMKV_KV_INT8, LLMKV_KV_INT8, LLMKV_KV_ROTATION_NONE, true, true},
};

// The default corpus: license texts that every Debian system carries (package base-files),
// concatenated in a fixed order. Plain English prose, about 55,000 SmolLM2 tokens.
const char *kCorpusFiles[] = {"GPL-3",   "GPL-2",    "LGPL-2.1", "Apache-2.0",
                              "MPL-2.0", "GFDL-1.3", "MPL-1.1",  "Artistic",
                              "CC0-1.0", "GPL-1",    "LGPL-3"};

bool pair_supported(const CodecPair &p, uint32_t block_tokens, uint32_t head_dim) {
    bool rk = p.rotation == LLMKV_KV_ROTATION_K || p.rotation == LLMKV_KV_ROTATION_KV;
    bool rv = p.rotation == LLMKV_KV_ROTATION_V || p.rotation == LLMKV_KV_ROTATION_KV;
    return llmkv::codec_supported(llmkv::CodecSpec{p.k, rk}, llmkv::KvRole::K, block_tokens,
                                  head_dim) &&
           llmkv::codec_supported(llmkv::CodecSpec{p.v, rv}, llmkv::KvRole::V, block_tokens,
                                  head_dim);
}

KvGeometry geometry_for(const llmkv::LlamaConfig &c, const CodecPair &p, uint32_t block_tokens) {
    KvGeometry g;
    g.n_layers = c.n_layers;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.block_tokens = block_tokens;
    g.dtype_k = p.k;
    g.dtype_v = p.v;
    g.rotate_k = p.rotation == LLMKV_KV_ROTATION_K || p.rotation == LLMKV_KV_ROTATION_KV;
    g.rotate_v = p.rotation == LLMKV_KV_ROTATION_V || p.rotation == LLMKV_KV_ROTATION_KV;
    g.sink = p.sink;
    return g;
}

// log-softmax of one logits row into out (double for the KL sums).
void log_softmax(const float *logits, size_t n, std::vector<double> &out) {
    out.resize(n);
    double mx = -INFINITY;
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, double(logits[i]));
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
    double lse = mx + std::log(sum);
    for (size_t i = 0; i < n; ++i) out[i] = double(logits[i]) - lse;
}

struct Accum {
    double nll = 0;
    double kl = 0;
    uint64_t top1_agree = 0;
    uint64_t count = 0;
};

struct Runner {
    std::unique_ptr<llmkv::KvCache> cache;
    std::unique_ptr<llmkv::CpuBackend> backend;
    std::unique_ptr<llmkv::Forward> forward;
    llmkv::SessionKv kv;
};

struct QualityOptions {
    std::string model_path;
    std::string corpus_path, csv_path = "kv_quality.csv";
    std::vector<uint32_t> contexts = {512, 2048};
    uint32_t n_tokens = 20480, threads = 0;
    uint32_t block_tokens = 16;  // --block-tokens: the KV block (and so the int4 K group) size
    std::vector<uint32_t> passkey_lengths = {2000, 6000};
    bool skip_passkey = false;
    std::vector<std::string> only_pairs;  // --pairs: these labels (and the f16/f16 reference)
    std::string json;
};

int cmd_bench_quality(const QualityOptions &o, BenchReport &rep) {
    const std::string &model_path = o.model_path, &corpus_path = o.corpus_path,
                      &csv_path = o.csv_path;
    const std::vector<uint32_t> &contexts = o.contexts, &passkey_lengths = o.passkey_lengths;
    const uint32_t n_tokens = o.n_tokens, threads = o.threads, chunk = 256;
    const bool skip_passkey = o.skip_passkey;

    try {
        std::shared_ptr<llmkv::GgufFile> file(llmkv::GgufFile::open(model_path));
        auto model = llmkv::LlamaModel::load(file);
        auto tokenizer = llmkv::Tokenizer::from_gguf(*file);
        const llmkv::LlamaConfig &c = model->config();
        {
            std::error_code ec;
            const auto size = std::filesystem::file_size(model_path, ec);
            rep.set_model(Json{{"file", std::filesystem::path(model_path).filename().string()},
                               {"path", model_path},
                               {"file_bytes", ec ? Json(nullptr) : Json(uint64_t(size))},
                               {"name", c.name},
                               {"architecture", c.architecture},
                               {"n_params", model->n_params()},
                               {"weight_bytes", model->weight_bytes()},
                               {"n_layers", c.n_layers},
                               {"n_embd", c.n_embd},
                               {"n_heads", c.n_heads},
                               {"n_kv_heads", c.n_kv_heads},
                               {"head_dim", c.head_dim},
                               {"n_vocab", c.n_vocab},
                               {"n_ctx_train", c.n_ctx_train}});
        }

        std::string text;
        std::string corpus_name;
        if (!corpus_path.empty()) {
            read_file(corpus_path, text, "llmkv bench quality", true);
            corpus_name = corpus_path;
        } else {
            for (const char *name : kCorpusFiles) {
                read_file(std::string("/usr/share/common-licenses/") + name, text,
                          "llmkv bench quality", true);
                text += "\n";
            }
            corpus_name = "/usr/share/common-licenses (Debian base-files)";
        }
        std::vector<int32_t> corpus = tokenizer->encode(text, false, false);
        if (corpus.size() < n_tokens) {
            std::fprintf(stderr,
                         "llmkv bench quality: corpus has %zu tokens, fewer than --tokens %u\n",
                         corpus.size(), n_tokens);
            return 1;
        }
        corpus.resize(n_tokens);
        std::printf("llmkv bench quality: %s\ncorpus: %s, %u tokens\n", model_path.c_str(),
                    corpus_name.c_str(), n_tokens);

        llmkv::ThreadPool pool(threads ? threads : llmkv::ThreadPool::hardware_threads());
        rep.note_threads(uint32_t(pool.size()));
        Json &params = rep.params();
        params["threads"] = uint32_t(pool.size());
        params["corpus"] = corpus_name;
        params["tokens"] = n_tokens;
        params["contexts"] = contexts;
        params["block_tokens"] = o.block_tokens;
        params["passkey"] = !skip_passkey;
        if (!skip_passkey) params["passkey_lengths"] = passkey_lengths;
        params["csv"] = csv_path;
        std::vector<CodecPair> pairs;
        for (const std::string &label : o.only_pairs) {
            if (std::none_of(std::begin(kPairs), std::end(kPairs),
                             [&](const CodecPair &p) { return label == p.label; })) {
                std::fprintf(stderr, "llmkv bench quality: --pairs: unknown pair \"%s\"\n",
                             label.c_str());
                return 2;
            }
        }
        for (const CodecPair &p : kPairs) {
            const bool named =
                std::find(o.only_pairs.begin(), o.only_pairs.end(), p.label) != o.only_pairs.end();
            if (&p != &kPairs[0] && !named && (!o.only_pairs.empty() || p.on_request)) continue;
            if (pair_supported(p, o.block_tokens, c.head_dim)) {
                pairs.push_back(p);
            } else {
                std::printf("(skipping %s: not supported by this build)\n", p.label);
            }
        }
        const size_t V = c.n_vocab;
        // results[context][pair]
        std::vector<std::vector<Accum>> results(contexts.size(), std::vector<Accum>(pairs.size()));
        std::vector<double> ref_lp, lp;
        for (size_t ci = 0; ci < contexts.size(); ++ci) {
            const uint32_t L = contexts[ci];
            const uint32_t step = std::min(chunk, L);
            std::vector<Runner> runners(pairs.size());
            for (size_t pi = 0; pi < pairs.size(); ++pi) {
                KvGeometry g = geometry_for(c, pairs[pi], o.block_tokens);
                runners[pi].cache = std::make_unique<llmkv::KvCache>(g, L / g.block_tokens + 2, 1);
                runners[pi].backend = std::make_unique<llmkv::CpuBackend>(*runners[pi].cache, pool);
                runners[pi].forward = llmkv::Forward::create(*model, *runners[pi].backend, step);
            }
            double t0 = now();
            std::vector<float> ref_logits, logits;
            for (size_t w = 0; w + L <= corpus.size(); w += L) {
                for (uint32_t off = 0; off < L; off += step) {
                    uint32_t n = std::min(step, L - off);
                    const int32_t *toks = corpus.data() + w + off;
                    for (size_t pi = 0; pi < pairs.size(); ++pi) {
                        Runner &r = runners[pi];
                        if (!r.cache->reserve(r.kv, r.kv.n_tokens + n))
                            llmkv::fail(LLMKV_ERR_INTERNAL, "bench: pool too small");
                        llmkv::ForwardSpan span{&r.kv, toks, n, true, true};
                        r.forward->run({span}, pi == 0 ? ref_logits : logits);
                        const std::vector<float> &out = pi == 0 ? ref_logits : logits;
                        Accum &acc = results[ci][pi];
                        for (uint32_t t = 0; t < n; ++t) {
                            size_t pos = w + off + t;  // logits predict corpus[pos + 1]
                            if (off + t + 1 >= L) break;
                            const float *row = out.data() + size_t(t) * V;
                            const float *ref_row = ref_logits.data() + size_t(t) * V;
                            log_softmax(row, V, lp);
                            acc.nll -= lp[size_t(corpus[pos + 1])];
                            if (pi != 0) {
                                log_softmax(ref_row, V, ref_lp);
                                double kl = 0;
                                for (size_t i = 0; i < V; ++i)
                                    kl += std::exp(ref_lp[i]) * (ref_lp[i] - lp[i]);
                                acc.kl += kl;
                            }
                            size_t a = size_t(std::max_element(row, row + V) - row);
                            size_t b = size_t(std::max_element(ref_row, ref_row + V) - ref_row);
                            acc.top1_agree += a == b;
                            ++acc.count;
                        }
                    }
                }
                for (Runner &r : runners) r.cache->release(r.kv);
            }
            std::printf("context %u: %zu windows, %.0f s\n", L, corpus.size() / L, now() - t0);
            std::fflush(stdout);
        }

        // Passkey retrieval through the C API: a number hidden at several depths of filler.
        std::vector<std::vector<int>> passkey_hits(pairs.size());
        std::vector<int> passkey_total(pairs.size(), 0);
        if (!skip_passkey) {
            const uint32_t keys[] = {48213, 70595, 31862};
            const double depths[] = {0.1, 0.5, 0.9};
            std::vector<int32_t> filler = tokenizer->encode(text, false, false);
            for (size_t pi = 0; pi < pairs.size(); ++pi) {
                llmkv_engine_params ep;
                llmkv_engine_params_init(&ep);
                ep.model_path = model_path.c_str();
                ep.backend = LLMKV_BACKEND_CPU;
                ep.n_threads = pool.size();
                ep.kv_dtype_k = pairs[pi].k;
                ep.kv_dtype_v = pairs[pi].v;
                ep.kv_rotation = pairs[pi].rotation;
                ep.flags |= pairs[pi].sink ? LLMKV_ENGINE_KV_SINK : LLMKV_ENGINE_NO_KV_SINK;
                ep.kv_block_tokens = o.block_tokens;
                llmkv_engine *e = nullptr;
                if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
                    std::fprintf(stderr, "passkey: %s\n", llmkv_last_error());
                    continue;
                }
                int hits = 0, total = 0, k = 0;
                for (uint32_t len : passkey_lengths) {
                    for (double depth : depths) {
                        uint32_t key = keys[k++ % 3];
                        std::string intro =
                            "There is a pass key hidden inside a lot of irrelevant text. Find it "
                            "and remember it.\n";
                        std::string needle = " The pass key is " + std::to_string(key) +
                                             ". Remember it. " + std::to_string(key) +
                                             " is the pass key. ";
                        std::string question = "\nWhat is the pass key? The pass key is";
                        std::vector<int32_t> a = tokenizer->encode(intro, false, false);
                        std::vector<int32_t> nd = tokenizer->encode(needle, false, false);
                        std::vector<int32_t> q = tokenizer->encode(question, false, false);
                        size_t fill = len > a.size() + nd.size() + q.size()
                                          ? len - a.size() - nd.size() - q.size()
                                          : 0;
                        size_t before = size_t(double(fill) * depth);
                        std::vector<int32_t> prompt = a;
                        prompt.insert(prompt.end(), filler.begin(), filler.begin() + long(before));
                        prompt.insert(prompt.end(), nd.begin(), nd.end());
                        prompt.insert(prompt.end(), filler.begin() + long(before),
                                      filler.begin() + long(fill));
                        prompt.insert(prompt.end(), q.begin(), q.end());
                        llmkv_session_params sp;
                        llmkv_session_params_init(&sp);
                        llmkv_session *s = nullptr;
                        llmkv_session_create(e, &sp, &s);
                        llmkv_session_append(s, prompt.data(), prompt.size());
                        llmkv_session_generate(s, 8);
                        llmkv_run(e, nullptr, nullptr);
                        char out[256];
                        size_t n = 0;
                        llmkv_session_read_text(s, out, sizeof(out) - 1, &n);
                        out[n] = '\0';
                        bool hit = std::strstr(out, std::to_string(key).c_str()) != nullptr;
                        hits += hit;
                        ++total;
                        passkey_hits[pi].push_back(hit);
                        llmkv_session_destroy(s);
                    }
                }
                passkey_total[pi] = total;
                (void)hits;
                llmkv_engine_destroy(e);
            }
        }

        // Report.
        std::FILE *csv = std::fopen(csv_path.c_str(), "w");
        if (csv)
            std::fprintf(csv,
                         "pair,k_bytes_per_token,ratio_vs_f16,context,perplexity,ppl_change_pct,"
                         "mean_kl,top1_agreement,passkey_hits,passkey_trials\n");
        std::printf("\n| K/V codec | bytes/token | vs f16 |");
        for (uint32_t L : contexts)
            std::printf(" ppl@%u | Δppl@%u | KL@%u | top-1@%u |", L, L, L, L);
        std::printf(" passkey |\n|---|---|---|");
        for (size_t i = 0; i < contexts.size(); ++i) std::printf("---|---|---|---|");
        std::printf("---|\n");
        KvGeometry g0 = geometry_for(c, pairs[0], o.block_tokens);
        const double f16_bpt = g0.sealed_bytes_per_token();
        for (size_t pi = 0; pi < pairs.size(); ++pi) {
            KvGeometry g = geometry_for(c, pairs[pi], o.block_tokens);
            double bpt = g.sealed_bytes_per_token();
            std::printf("| %s | %.0f | %.3fx |", pairs[pi].label, bpt, bpt / f16_bpt);
            int hits = 0;
            for (int h : passkey_hits[pi]) hits += h;
            for (size_t ci = 0; ci < contexts.size(); ++ci) {
                const Accum &a = results[ci][pi];
                const Accum &r = results[ci][0];
                double ppl = std::exp(a.nll / double(a.count));
                double ppl_ref = std::exp(r.nll / double(r.count));
                double change = 100.0 * (ppl / ppl_ref - 1.0);
                double kl = pi == 0 ? 0.0 : a.kl / double(a.count);
                double top1 = double(a.top1_agree) / double(a.count);
                std::printf(" %.3f | %+.2f%% | %.5f | %.4f |", ppl, change, kl, top1);
                Json rec{{"bench", "kv_quality"},    {"kv", pairs[pi].label},
                         {"context", contexts[ci]},  {"bytes_per_token", bpt},
                         {"vs_f16", bpt / f16_bpt},  {"perplexity", ppl},
                         {"ppl_change_pct", change}, {"mean_kl", kl},
                         {"top1_agreement", top1}};
                if (!skip_passkey) {
                    rec["passkey_hits"] = hits;
                    rec["passkey_trials"] = passkey_total[pi];
                }
                rep.add(std::move(rec));
                if (csv) {
                    std::fprintf(csv, "%s,%.1f,%.4f,%u,%.4f,%.3f,%.6f,%.5f,%d,%d\n",
                                 pairs[pi].label, bpt, bpt / f16_bpt, contexts[ci], ppl, change, kl,
                                 top1, hits, passkey_total[pi]);
                }
            }
            if (skip_passkey) {
                std::printf(" - |\n");
            } else {
                std::printf(" %d/%d |\n", hits, passkey_total[pi]);
            }
        }
        if (csv) std::fclose(csv);
        std::printf(
            "\nbytes/token: sealed blocks, scales included. Δppl against f16/f16 at the same "
            "context;\n"
            "KL = mean KL(f16 || codec) of the next-token distribution; top-1 = argmax agreement "
            "with f16.\n"
            "passkey: hits over lengths {");
        for (size_t i = 0; i < passkey_lengths.size(); ++i)
            std::printf("%s%u", i ? "," : "", passkey_lengths[i]);
        std::printf("} x depths {0.1,0.5,0.9}. CSV: %s\n", csv_path.c_str());
        return 0;
    } catch (const llmkv::Error &e) {
        std::fprintf(stderr, "llmkv bench quality: %s: %s\n", llmkv_status_string(e.status()),
                     e.what());
        return 1;
    }
}

}  // namespace

Command add_bench_quality(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "quality",
        "perplexity, KL vs f16, top-1 agreement and passkey retrieval for every KV codec pair");
    auto o = std::make_shared<QualityOptions>();
    add_model_option(*app, &o->model_path);
    add_threads_option(*app, &o->threads);
    app->add_option("--corpus", o->corpus_path,
                    "text to measure perplexity on (default: the built-in corpus)")
        ->type_name("FILE");
    add_uint_option(*app, "--tokens", &o->n_tokens, "corpus tokens to evaluate");
    add_uint_option(
        *app, "--block-tokens", &o->block_tokens,
        "tokens per KV block (the int4 codecs' K scale group; bytes/token depend on it)");
    add_uint_list_option(*app, "--contexts", &o->contexts,
                         "context lengths of the perplexity runs");
    add_uint_list_option(*app, "--passkey-lengths", &o->passkey_lengths,
                         "filler lengths of the passkey probe");
    app->add_flag("--no-passkey", o->skip_passkey, "skip the passkey probe");
    app->add_option("--pairs", o->only_pairs,
                    "only these K/V pairs, by their labels (e.g. \"int4/int4 rot,int4c/int4c "
                    "rot\"); f16/f16, the "
                    "reference, always runs")
        ->delimiter(',')
        ->type_name("LABEL,...");
    app->add_option("--csv", o->csv_path, "where the CSV goes")
        ->type_name("FILE")
        ->capture_default_str();
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench quality", o->json);
                if (!rep.check_writable("llmkv bench quality")) return 2;
                return rep.finish(cmd_bench_quality(*o, rep), "llmkv bench quality");
            }};
}

}  // namespace llmkv_cli
