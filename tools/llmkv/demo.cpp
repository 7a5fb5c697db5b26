// `llmkv demo`: a village of concurrent sessions. One shared prefix (the village's lore and
// rules) is computed once; every villager session starts from it with its own persona and
// question, and all of them advance together through llmkv_step. Ends with a summary of
// throughput and KV memory against contiguous per-session allocation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "llmkv.h"

namespace llmkv_cli {

namespace {

const char *kLore =
    "You are a villager of Oakvale, a small farming village in a green river valley. Oakvale has "
    "one inn, the Copper Kettle, run by Mira; a mill on the Silverrun river, kept by old Tobin; a "
    "smithy where Brann shoes horses and mends ploughs; a chapel with a bronze bell that rings at "
    "dawn and dusk; and a market square where farmers sell apples, cheese, wool and honey every "
    "seventh day. The village elder is Hesper, who settles disputes under the great oak in the "
    "square. Beyond the fields lies the Whispering Wood, where the hunters go in autumn and where "
    "children are told never to wander after dark. The road east leads to the town of Highmoor, "
    "two days on foot; the road west crosses the old stone bridge, which flooded last spring and "
    "was rebuilt by everyone together. Harvest festival comes when the first frost touches the "
    "pumpkins, with music, a bonfire and a pie contest that Mira has won three years running.\n"
    "Rules: stay in character as the villager you are told you are. Answer the traveler's "
    "question in two or three friendly sentences, using what you know of Oakvale. Do not invent "
    "places outside the valley.";

struct Villager {
    const char *name;
    const char *persona;
    const char *question;
};

const Villager kVillagers[] = {
    {"Mira", "the innkeeper of the Copper Kettle", "Where can I sleep tonight?"},
    {"Tobin", "the old miller", "How does the mill work?"},
    {"Brann", "the blacksmith", "Can you fix my horse's shoe?"},
    {"Hesper", "the village elder", "Who settles quarrels here?"},
    {"Lina", "a young shepherd", "Is the Whispering Wood safe?"},
    {"Orrin", "a hunter", "What can be hunted in autumn?"},
    {"Dalia", "the beekeeper", "What do you sell at the market?"},
    {"Pell", "the chapel's bell ringer", "When does the bell ring?"},
    {"Greta", "a cheesemaker", "What makes Oakvale cheese good?"},
    {"Fenn", "a ferry boy on the Silverrun", "How do I get to Highmoor?"},
    {"Isolde", "the weaver", "Where does your wool come from?"},
    {"Corwin", "a carpenter who rebuilt the bridge", "What happened to the stone bridge?"},
    {"Nell", "a farmer's daughter", "When is the harvest festival?"},
    {"Bram", "the apple grower", "Which apples are the sweetest?"},
    {"Willa", "a traveling healer who settled here", "Is there a healer in the village?"},
    {"Jory", "a mischievous child", "What is the best secret in Oakvale?"},
    {"Edda", "the baker", "Who makes the best pie?"},
    {"Rowan", "the stable keeper", "Where can my horse rest?"},
    {"Tamsin", "a fisherwoman", "What fish live in the Silverrun?"},
    {"Hal", "the night watchman", "Is it safe to walk at night?"},
    {"Maren", "a storyteller", "Tell me a story about the Whispering Wood."},
    {"Quill", "the village scribe", "Can you write a letter for me?"},
    {"Sable", "a trapper from the hills", "What lies beyond the valley?"},
    {"Ulric", "a retired soldier", "Has Oakvale ever been attacked?"},
    {"Vera", "the herb gatherer", "Which herbs grow near the river?"},
    {"Wren", "a singer at the inn", "What songs do people sing here?"},
    {"Yara", "a potter", "Where do you find your clay?"},
    {"Zeke", "a goat herder", "Why are your goats so noisy?"},
    {"Alba", "the schoolteacher", "What do the children learn?"},
    {"Basil", "the cook at the inn", "What is today's meal?"},
    {"Cora", "a wool merchant from Highmoor", "Is trade good in Oakvale?"},
    {"Dunstan", "the gravedigger", "Who was the founder of Oakvale?"},
};

std::string chat(llmkv_engine *e, const std::vector<llmkv_chat_message> &msgs,
                 bool generation_prompt) {
    size_t n = 0;
    llmkv_chat_format(e, msgs.data(), msgs.size(), generation_prompt, nullptr, 0, &n);
    std::vector<char> buf(n + 1);
    llmkv_chat_format(e, msgs.data(), msgs.size(), generation_prompt, buf.data(), buf.size(), &n);
    return std::string(buf.data(), n);
}

struct DemoOptions {
    std::string model;
    uint32_t n_villagers = 16, threads = 0, max_new = 64;
    llmkv_kv_dtype dtype = LLMKV_KV_F16;
};

int cmd_demo(const DemoOptions &o) {
    const std::string &model = o.model;
    uint32_t n_villagers = o.n_villagers, threads = o.threads, max_new = o.max_new;
    const llmkv_kv_dtype dtype = o.dtype;
    const uint32_t max_villagers = uint32_t(sizeof(kVillagers) / sizeof(kVillagers[0]));
    n_villagers = std::max(1u, std::min(n_villagers, max_villagers));

    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = threads;
    ep.kv_dtype_k = dtype;
    ep.kv_dtype_v = dtype;
    ep.max_context = 2048;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv demo: %s: %s\n", llmkv_status_string(-1), llmkv_last_error());
        return 1;
    }
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    llmkv_engine_get_info(e, &info);

    // The shared prefix: the lore as the system message.
    double t0 = now();
    std::string system = chat(e, {{"system", kLore}}, false);
    size_t n = 0;
    llmkv_tokenize(e, system.data(), system.size(), LLMKV_TOKENIZE_PARSE_SPECIAL, nullptr, 0, &n);
    std::vector<int32_t> lore(n);
    llmkv_tokenize(e, system.data(), system.size(), LLMKV_TOKENIZE_PARSE_SPECIAL, lore.data(),
                   lore.size(), &n);
    llmkv_prefix *prefix = nullptr;
    if (llmkv_prefix_create(e, lore.data(), lore.size(), &prefix) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv demo: %s\n", llmkv_last_error());
        return 1;
    }
    double t_prefix = now() - t0;
    std::printf(
        "Oakvale: %zu tokens of shared lore computed once in %.0f ms; %u villagers answer a "
        "traveler.\n\n",
        lore.size(), t_prefix * 1e3, n_villagers);

    std::vector<llmkv_session *> sessions(n_villagers);
    std::vector<uint32_t> generated(n_villagers, 0);
    for (uint32_t i = 0; i < n_villagers; ++i) {
        const Villager &v = kVillagers[i];
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.prefix = prefix;
        sp.max_new_tokens = max_new;
        sp.sampling.temperature = 0.7f;
        sp.sampling.top_p = 0.9f;
        sp.sampling.repeat_penalty = 1.1f;
        sp.sampling.seed = 1000 + i;
        sp.user_data = reinterpret_cast<void *>(uintptr_t(i));
        std::string user = std::string("You are ") + v.name + ", " + v.persona +
                           ". A traveler asks you: " + v.question;
        std::string full = chat(e, {{"system", kLore}, {"user", user.c_str()}}, true);
        std::string rest = full.substr(system.size());
        if (llmkv_session_create(e, &sp, &sessions[i]) != LLMKV_OK ||
            llmkv_session_append_text(sessions[i], rest.data(), rest.size()) != LLMKV_OK ||
            llmkv_session_generate(sessions[i], 0) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv demo: villager %s: %s\n", v.name, llmkv_last_error());
            return 1;
        }
    }

    // Everyone advances together; each answer is printed as soon as its villager is done.
    double t_start = now();
    uint32_t live = n_villagers, steps = 0;
    uint64_t peak_kv = 0, total_generated = 0;
    llmkv_event events[64];
    while (live > 0) {
        size_t count = 0;
        if (llmkv_step(e, events, 64, &count) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv demo: step: %s\n", llmkv_last_error());
            return 1;
        }
        ++steps;
        llmkv_stats st;
        st.struct_size = sizeof(st);
        llmkv_engine_get_stats(e, &st);
        peak_kv = std::max(peak_kv, st.kv_bytes_used);
        for (size_t k = 0; k < count; ++k) {
            uint32_t i = uint32_t(reinterpret_cast<uintptr_t>(events[k].user_data));
            if (events[k].kind == LLMKV_EVENT_TOKEN) {
                ++generated[i];
                ++total_generated;
                continue;
            }
            --live;
            char text[4096];
            size_t len = 0;
            llmkv_session_read_text(sessions[i], text, sizeof(text) - 1, &len);
            text[len] = '\0';
            std::string answer(text);
            while (!answer.empty() && (answer.back() == '\n' || answer.back() == ' '))
                answer.pop_back();
            std::printf("%s (%s), asked \"%s\"\n  %s\n\n", kVillagers[i].name,
                        kVillagers[i].persona, kVillagers[i].question,
                        events[k].kind == LLMKV_EVENT_ERROR ? "(error)" : answer.c_str());
            std::fflush(stdout);
        }
    }
    double wall = now() - t_start;

    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    const double f16_per_token = 2.0 * 2 * info.n_layers * info.n_kv_heads * info.head_dim;
    const double contiguous = double(n_villagers) * ep.max_context * f16_per_token;
    std::printf("---- summary ----\n");
    std::printf("sessions            %u villagers, %u steps (one batched forward pass each)\n",
                n_villagers, steps);
    std::printf("tokens generated    %llu in %.2f s: %.1f tok/s aggregate (%u threads, %s KV)\n",
                (unsigned long long)total_generated, wall, total_generated / wall, info.n_threads,
                dtype == LLMKV_KV_F16 ? "f16" : "quantized");
    std::printf(
        "prefix reuse        %zu lore tokens computed once, reused by %u sessions (%zu tokens not "
        "recomputed)\n",
        lore.size(), n_villagers, (lore.size() - 1) * n_villagers);
    std::printf(
        "KV memory (peak)    %.1f MiB in %u-token blocks, vs %.1f MiB for contiguous per-session\n"
        "                    allocation at max_context %u in f16 (%.0fx less)\n",
        peak_kv / 1048576.0, info.kv_block_tokens, contiguous / 1048576.0, ep.max_context,
        contiguous / double(peak_kv));
    for (auto *s : sessions) llmkv_session_destroy(s);
    llmkv_prefix_release(prefix);
    llmkv_engine_destroy(e);
    return 0;
}

}  // namespace

Command add_demo(CLI::App &parent) {
    CLI::App *app =
        parent.add_subcommand("demo", "the village demo: many sessions sharing one lore prefix");
    auto o = std::make_shared<DemoOptions>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_option(*app, "--villagers", &o->n_villagers, "villagers (sessions), 1..32");
    add_uint_option(*app, "-n,--n-predict", &o->max_new,
                    "tokens each villager's answer gets at most");
    add_kv_dtype_option(*app, "--kv-dtype", &o->dtype, "KV cache dtype (K and V)");
    return {app, [o] { return cmd_demo(*o); }};
}

}  // namespace llmkv_cli
