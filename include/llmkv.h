/*
 * llmkv.h - the public C API of llmkv, an embeddable LLM inference runtime built around
 * a paged KV-cache block pool.
 *
 * This header is the whole public surface (C99). It is also the manual: every function
 * states ownership, threading and the status codes it returns.
 *
 * Conventions
 *  - Every fallible call returns llmkv_status: LLMKV_OK (0) or a negative error code.
 *    llmkv_last_error() returns a detail message for the last failing call on the
 *    calling thread.
 *  - Params structs begin with `uint32_t struct_size`; fill them with the matching
 *    llmkv_*_params_init() (from 0.4 a macro for llmkv_*_params_init_sized with the size
 *    of the caller's struct, so a later library never writes past it) and then change
 *    fields. Fields are only ever appended; a struct_size the library does not know is
 *    LLMKV_ERR_INVALID_ARGUMENT.
 *  - Query structs (llmkv_engine_info, llmkv_stats, llmkv_session_info) also begin with
 *    struct_size, which the caller sets to sizeof(the struct) before the call. Any size that
 *    is not the size of a version of the struct this library knows is
 *    LLMKV_ERR_INVALID_ARGUMENT (a later library also accepts the older sizes).
 *  - Handles are opaque. Every _destroy / _release accepts NULL.
 *  - Threads: an engine and its sessions and prefixes may be called from any thread; calls
 *    on one engine serialize internally (in the order they arrive). Different engines are independent. Callbacks run on
 *    the thread that called into the library and must not call back into that engine.
 *    A host that must never wait for a forward pass runs the engine's own worker thread
 *    (llmkv_worker_start) and calls only the functions listed there from its hot thread.
 *  - No C++ exception or abort crosses this API. After LLMKV_ERR_BACKEND only destroy
 *    calls are valid on that engine.
 */
#ifndef LLMKV_H
#define LLMKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LLMKV_STATIC)
#define LLMKV_API
#elif defined(_WIN32)
#ifdef LLMKV_BUILDING_LIBRARY
#define LLMKV_API __declspec(dllexport)
#else
#define LLMKV_API __declspec(dllimport)
#endif
#else
#define LLMKV_API __attribute__((visibility("default")))
#endif

/* ---- Version ------------------------------------------------------------------------- */

#define LLMKV_VERSION_MAJOR 0
#define LLMKV_VERSION_MINOR 6
#define LLMKV_VERSION_PATCH 0
#define LLMKV_VERSION_NUMBER \
    (LLMKV_VERSION_MAJOR * 10000 + LLMKV_VERSION_MINOR * 100 + LLMKV_VERSION_PATCH)

/* MAJOR*10000 + MINOR*100 + PATCH of the library actually loaded. */
LLMKV_API int llmkv_version(void);
/* "MAJOR.MINOR.PATCH"; static storage. */
LLMKV_API const char *llmkv_version_string(void);

/* ---- Status codes (values are fixed forever) ------------------------------------------ */

typedef int32_t llmkv_status;
#define LLMKV_OK 0
#define LLMKV_ERR_INVALID_ARGUMENT (-1)
#define LLMKV_ERR_OUT_OF_MEMORY (-2)
#define LLMKV_ERR_KV_CAPACITY (-3)   /* the request can never fit, even with offload */
#define LLMKV_ERR_IO (-4)
#define LLMKV_ERR_MODEL_FORMAT (-5)
#define LLMKV_ERR_UNSUPPORTED (-6)
#define LLMKV_ERR_BACKEND (-7)       /* device lost: only destroy calls remain valid */
#define LLMKV_ERR_STATE (-8)         /* call not valid in the object's current state */
#define LLMKV_ERR_SNAPSHOT_FORMAT (-9)
#define LLMKV_ERR_CANCELLED (-10)
#define LLMKV_ERR_INTERNAL (-99)

/* Name of a status code ("LLMKV_ERR_STATE"); "LLMKV_ERR_UNKNOWN" for other values.
 * Static storage. */
LLMKV_API const char *llmkv_status_string(llmkv_status status);

/* Detail message of the last failing call on this thread ("" if none). Library-owned;
 * valid until the next failing call on the same thread. */
LLMKV_API const char *llmkv_last_error(void);

/* ---- Logging ------------------------------------------------------------------------ */

typedef enum llmkv_log_level {
    LLMKV_LOG_ERROR = 0,
    LLMKV_LOG_WARN = 1,
    LLMKV_LOG_INFO = 2,
    LLMKV_LOG_DEBUG = 3
} llmkv_log_level;

/* Receives one message (no trailing newline) per call. */
typedef void (*llmkv_log_fn)(llmkv_log_level level, const char *message, void *user_data);

/* Installs a process-wide log callback (NULL restores the default, which writes WARN and
 * ERROR messages to stderr) and the most verbose level delivered. Thread-safe. The
 * callback may run on any thread that calls into the library. */
LLMKV_API void llmkv_log_set(llmkv_log_fn fn, void *user_data, llmkv_log_level max_level);

/* ---- Engine --------------------------------------------------------------------------- */

typedef struct llmkv_engine llmkv_engine;
typedef struct llmkv_session llmkv_session;
typedef struct llmkv_prefix llmkv_prefix;

/* LLMKV_BACKEND_CUDA is experimental: compiled, never run on a GPU. The CUDA module
 * (libllmkv-cuda.so, loaded at run time) is built wherever nvcc is present, but neither it
 * nor the engine on it has run on a device yet (kernels/README.md). The same holds for
 * everything below that exists only with it: GPU ordinals in devices, GPU tensor-parallel
 * ranks (n_devices > 1, tp_size with the CUDA backend, LLMKV_TP_COLLECTIVES), the CUDA
 * kernel variant of snapshots, the CUDA copy stream. */
typedef enum llmkv_backend {
    LLMKV_BACKEND_AUTO = 0,
    LLMKV_BACKEND_CPU = 1,
    LLMKV_BACKEND_CUDA = 2 /* experimental: compiled, never run on a GPU */
} llmkv_backend;

typedef enum llmkv_kv_dtype {
    LLMKV_KV_F16 = 0,
    LLMKV_KV_BF16 = 1,
    LLMKV_KV_FP8_E4M3 = 2,
    LLMKV_KV_INT8 = 3,
    LLMKV_KV_INT4 = 4,
    /* 4-bit codes like INT4 with compact block metadata: K keeps a scale and min per channel
     * as 6-bit steps of the block's own fp16 ranges, V one 4-bit step pair per token and 64
     * channels. 0.28x of f16 with 16-token blocks (INT4: 0.34x); its measured quality against
     * f16 and INT4: see docs/PERFORMANCE.md. CPU backend only; head_dim % 16 == 0.
     * Libraries built before it refuse it as an unknown dtype. */
    LLMKV_KV_INT4_COMPACT = 5
} llmkv_kv_dtype;

/* engine_params.kv_rotation: orthogonal (Hadamard) rotation of sealed K/V along head_dim
 * before quantization; attention results are unchanged up to quantization error, which
 * rotation spreads evenly across channels. Only for fp8/int8/int4 and power-of-two
 * head_dim. */
typedef enum llmkv_kv_rotation {
    LLMKV_KV_ROTATION_AUTO = 0, /* on for int4 codecs (INT4, INT4_COMPACT), off otherwise */
    LLMKV_KV_ROTATION_NONE = 1,
    LLMKV_KV_ROTATION_K = 2,
    LLMKV_KV_ROTATION_V = 3,
    LLMKV_KV_ROTATION_KV = 4
} llmkv_kv_rotation;

/* engine_params.flags */
#define LLMKV_ENGINE_PREFIX_CACHE 0x1u /* automatic prefix cache (default on) */
/* Models with sliding-window layers (Gemma 3, ...): keep those layers' KV blocks after they
 * leave the window instead of releasing them (the same results, more memory; for
 * comparisons). Added in 0.3. */
#define LLMKV_ENGINE_KEEP_WINDOW_BLOCKS 0x2u
/* KV sink: position 0's K and V are also kept in fp16 beside the session's tail block (one
 * row per layer and KV head: 2 * n_layers * n_kv_heads * head_dim * 2 bytes per session),
 * and attention reads them there instead of their quantized copy in the first sealed block.
 * Most queries weigh the first position heavily, so its quantization error reaches every
 * later token: with the int4 codecs it is a large share of their error (measurements: see
 * docs/PERFORMANCE.md).
 * The sealed blocks and their bytes per token do not change; a session that takes its
 * first block from the prefix cache computes position 0 alone once (one token).
 * By default (neither flag) the sink is on with an INT4 or INT4_COMPACT codec, off otherwise
 * and with kv_block_tokens = 1. KV_SINK asks for it with any codec (UNSUPPORTED with 1-token
 * blocks); NO_KV_SINK turns it off. Both at once: INVALID_ARGUMENT. (Earlier 0.5.0 builds
 * read no sink on the CUDA backend: its engines were made without it, KV_SINK UNSUPPORTED.)
 * Prefix snapshots record it: a snapshot loads only into an engine with the same setting
 * (SNAPSHOT_FORMAT, "codec differs", otherwise; int4 snapshots of earlier builds have none).
 * Added in 0.5. */
#define LLMKV_ENGINE_KV_SINK 0x4u
#define LLMKV_ENGINE_NO_KV_SINK 0x8u

/* Tensor parallelism across processes (or machines): how the ranks exchange bytes, given
 * by the application (the llmkv command implements it with MPI). Both calls are
 * collective: every rank makes the same calls in the same order with the same byte counts.
 * Return 0 on success; anything else stops the engine with LLMKV_ERR_BACKEND. Added in 0.5. */
/* On return every rank's buf (bytes) holds root's. */
typedef int (*llmkv_tp_broadcast_fn)(void *ctx, void *buf, size_t bytes, int32_t root);
/* On return every rank's recv (size * bytes) holds each rank's send (bytes), in rank order. */
typedef int (*llmkv_tp_all_gather_fn)(void *ctx, const void *send, void *recv, size_t bytes);
typedef struct llmkv_tp_transport {
    void *ctx;          /* passed back to the callbacks */
    int32_t rank;       /* this process: 0 runs the engine, 1..size-1 run llmkv_tp_serve */
    int32_t size;       /* ranks in all */
    llmkv_tp_broadcast_fn broadcast;
    llmkv_tp_all_gather_fn all_gather;
} llmkv_tp_transport;

typedef struct llmkv_engine_params {
    uint32_t struct_size;
    const char *model_path;    /* GGUF file; borrowed for the duration of create */
    llmkv_backend backend;     /* AUTO picks CUDA when available and able to run the
                                  configuration (KV codec, shapes), else CPU (CUDA is
                                  experimental: compiled, never run on a GPU) */
    const int32_t *devices;    /* GPU ordinals; n_devices > 1 = tensor parallel, one rank
                                  per device (the CUDA backend; NCCL between distinct
                                  devices), see tp_size below. Experimental: compiled,
                                  never run on a GPU */
    uint32_t n_devices;
    uint32_t n_threads;        /* CPU worker threads; 0 = all cores */
    llmkv_kv_dtype kv_dtype_k; /* dtype of sealed K blocks */
    llmkv_kv_dtype kv_dtype_v; /* dtype of sealed V blocks */
    uint32_t kv_block_tokens;  /* tokens per block; 0 = 16 */
    uint64_t kv_device_bytes;  /* device-tier KV budget; 0 = automatic */
    uint64_t kv_host_bytes;    /* pinned host-tier budget; 0 = no host tier */
    uint32_t max_batch_tokens; /* token budget of one step; 0 = automatic (512) */
    uint32_t max_context;      /* per-session token limit; 0 = the model's */
    uint32_t flags;            /* LLMKV_ENGINE_* */
    uint32_t max_sessions;     /* live sessions at once (each owns one tail block); 0 = 256 */
    uint32_t kv_residual_tokens; /* newest tokens of a session always kept in full precision
                                    besides its partial block (0..4096); sealing waits until a
                                    full block is older than this */
    llmkv_kv_rotation kv_rotation;
    /* ---- Appended in 0.4 (the 0.3 size, ending at kv_rotation, is still accepted: these
     * then take their defaults). An embedded runtime shares the machine with its host. ---- */
    /* How long an idle compute thread (and a thread waiting for them) polls for work before
     * it sleeps, in microseconds, 0..100000. Polling makes a multi-threaded forward pass fast
     * (the gaps between its operations are shorter than a sleeping thread's wake-up) but
     * burns that much CPU after each one; 0 never polls, for a host whose own threads need
     * the cores. -1 (the default) = the LLMKV_SPIN_US environment variable, else 200. */
    int32_t spin_us;
    /* 0 (the default): llmkv's threads (compute workers, the llmkv_worker_start thread, the
     * host tier's copy thread) run at the priority of the thread that created them. 1..19:
     * they run that many nice levels lower (Linux: setpriority on each thread; Windows:
     * SetThreadPriority, 1-9 below normal, 10-18 lowest, 19 idle), so a game's
     * or app's own threads win the cores when both want them. Other values are
     * INVALID_ARGUMENT (raising priority needs privileges a host should not grant a library). */
    int32_t thread_priority;
    /* ---- Appended in 0.5 (the 0.4 size, ending at thread_priority, and the 0.3 size are
     * still accepted: these then take their defaults). Tensor parallelism on CPU ranks: the
     * query and KV heads, the feed-forward columns and the output head's vocabulary are split
     * over the ranks (Megatron style), each rank holding the KV of its own KV heads in its
     * own pool with the same block ids; outputs equal one rank's up to the order of the
     * partial sums (docs/PARALLELISM.md). The heads and feed-forward columns must divide by
     * the rank count, or the KV heads replicate evenly (fewer KV heads than ranks). Long
     * contexts beyond the device pool (host blocks read in place) are off with tp > 1;
     * parking, swapping, prefix caching and snapshots work as with one rank. A mixture of
     * experts' experts are split by their feed-forward columns, or held whole by the ranks
     * (at least one each) with the environment variable LLMKV_TP_EXPERTS=whole ("columns":
     * the default; anything else: LLMKV_ERR_INVALID_ARGUMENT).
     * GPU ranks (docs/PARALLELISM.md, "GPU ranks"), experimental: compiled, never run on a
     * GPU. n_devices > 1 (tp_size 0 or n_devices), or backend CUDA with tp_size > 1
     * (n_devices 0: rank r on device r; 1: every rank on devices[0]); without a usable CUDA device LLMKV_ERR_UNSUPPORTED with the reason. Their all-reduces
     * travel as the environment variable LLMKV_TP_COLLECTIVES says (experimental too):
     * unset or "auto": NCCL when the ranks have distinct devices and NCCL loads, else host
     * memory; "nccl": NCCL or LLMKV_ERR_UNSUPPORTED; "host": host memory; anything else:
     * LLMKV_ERR_INVALID_ARGUMENT. ---- */
    /* Ranks as threads of this process, n_threads split among them (CPU ranks). 0 or 1:
     * none. With the CUDA backend, GPU ranks (above; experimental: compiled, never run on a
     * GPU). */
    uint32_t tp_size;
    /* Ranks in other processes: this process is tp_transport->rank of tp_transport->size.
     * Rank 0 calls llmkv_engine_create, every other rank llmkv_tp_serve, each with its own
     * copy of the same model file. NULL: none. With tp_transport, tp_size is 0 or its size. */
    const llmkv_tp_transport *tp_transport;
} llmkv_engine_params;

/* Fills defaults: AUTO backend, all cores, f16 K and V, 16-token blocks, automatic
 * budgets, prefix cache on, spin_us -1, thread_priority 0.
 *
 * The function of this name fills the 0.1-0.3 struct (up to kv_rotation) and sets that
 * struct_size: programs compiled against those headers call it, and a later library must
 * never write past their struct. Programs compiled against this header call
 * llmkv_engine_params_init_sized instead (the macro below does it), which fills exactly the
 * size they pass. Bindings that call functions by name call the sized one. */
LLMKV_API void llmkv_engine_params_init(llmkv_engine_params *p);

/* Fills the first `size` bytes of *p with the defaults (never more than this library's
 * struct; nothing when size < 4) and sets p->struct_size to the number of bytes filled.
 * Pass sizeof(llmkv_engine_params). Added in 0.4. */
LLMKV_API void llmkv_engine_params_init_sized(llmkv_engine_params *p, size_t size);

#if !defined(LLMKV_BUILDING_LIBRARY) && !defined(LLMKV_NO_INIT_MACROS)
#define llmkv_engine_params_init(p) llmkv_engine_params_init_sized((p), sizeof(llmkv_engine_params))
#endif

/* Loads the model and preallocates the KV pool. On success *out owns the engine; free it
 * with llmkv_engine_destroy. Errors: INVALID_ARGUMENT (NULL, bad struct_size, bad
 * values), IO (cannot open/map the file), MODEL_FORMAT (malformed or hostile file; the
 * message names the field), UNSUPPORTED (architecture, tensor type, backend or dtype not
 * available), OUT_OF_MEMORY (KV pool). */
LLMKV_API llmkv_status llmkv_engine_create(const llmkv_engine_params *p, llmkv_engine **out);

/* Tensor parallelism across processes: runs rank p->tp_transport->rank (1 or more) until
 * rank 0's engine is destroyed. Loads this rank's share of the model from p->model_path;
 * the other parameters that matter (KV layout, pool sizes) come from rank 0. Returns LLMKV_OK
 * after rank 0's shutdown; INVALID_ARGUMENT (no transport, rank 0), or the status of what
 * stopped it: a setup that failed on any rank (the message names the rank), or
 * BACKEND (the transport failed, rank 0 gave up before setting up). Added in 0.5. */
LLMKV_API llmkv_status llmkv_tp_serve(const llmkv_engine_params *p);

/* Destroys the engine and every session created from it. Session handles of this engine
 * become invalid. NULL is fine. */
LLMKV_API void llmkv_engine_destroy(llmkv_engine *e);

typedef struct llmkv_engine_info {
    uint32_t struct_size;
    char model_name[128];
    char architecture[32];      /* "llama" */
    char backend_name[32];      /* "cpu" or "cuda" */
    uint32_t backend;           /* llmkv_backend actually in use */
    uint32_t n_vocab;
    uint32_t n_ctx_train;       /* the model's trained context */
    uint32_t max_context;       /* per-session limit in effect */
    uint32_t n_layers;
    uint32_t n_embd;
    uint32_t n_heads;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t n_threads;
    uint32_t kv_block_tokens;
    uint32_t kv_dtype_k;
    uint32_t kv_dtype_v;
    uint32_t tp_size;
    uint64_t n_params;
    uint64_t weight_bytes;      /* bytes of weight tensors as loaded */
    uint64_t kv_bytes_per_token_device; /* sealed-block bytes per token (scales included) */
    uint64_t kv_bytes_per_token_tail;   /* full-precision tail bytes per token */
    uint64_t kv_device_bytes;   /* device-tier budget in effect */
    uint32_t kv_blocks_total;   /* sealed blocks in the device tier */
    uint32_t kv_tail_blocks_total;
    uint32_t kv_residual_tokens;
    uint32_t kv_rotate_k;       /* 1 when sealed K blocks are rotated */
    uint32_t kv_rotate_v;
    int32_t bos_token;          /* -1 if none */
    int32_t eos_token;          /* -1 if none */
    int32_t eot_token;          /* -1 if none */
    /* ---- Appended in 0.2 (the 0.1 size is still accepted). ---- */
    uint32_t n_unrepresentable_bytes; /* byte values the vocabulary has no token for (dropped by
                                         tokenization unless LLMKV_TOKENIZE_STRICT); 0 for most models */
    /* ---- Appended in 0.3 (the 0.1 and 0.2 sizes are still accepted). ---- */
    uint32_t kv_window;         /* tokens a sliding-window layer sees; 0: the model has none */
    uint32_t kv_layer_groups;   /* 1, or with window release 1 + the sliding-window layer groups:
                                   blocks of those groups are released once outside the window */
    uint64_t kv_bytes_per_token_global; /* with window release: sealed bytes per token once it is
                                   outside every window (the global layers'); else as
                                   kv_bytes_per_token_device */
    /* ---- Appended in 0.5 (the 0.1, 0.2 and 0.3 sizes are still accepted). ---- */
    uint64_t kv_bytes_per_token_rank; /* tensor parallelism: sealed bytes per token on each rank
                                   (its KV heads); else as kv_bytes_per_token_device */
    uint64_t weight_bytes_rank; /* tensor parallelism: weight bytes each rank reads (its slices
                                   and the replicated embedding and norms); else weight_bytes */
    /* ---- Appended in 0.6 (the 0.1, 0.2, 0.3 and 0.5 sizes are still accepted). ---- */
    uint32_t n_expert;          /* a mixture of experts: experts per layer; 0: a dense model */
    uint32_t n_expert_used;     /* experts each token is routed to; 0: a dense model */
    uint64_t n_params_active;   /* parameters one token reads: the dense part and n_expert_used
                                   experts per layer; a dense model's n_params */
    uint64_t weight_bytes_active; /* bytes of those: the weights one decoded token reads (a
                                   dense model's weight_bytes) */
} llmkv_engine_info;

/* Fills *out (out->struct_size must be set). Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_engine_get_info(const llmkv_engine *e, llmkv_engine_info *out);

typedef struct llmkv_stats {
    uint32_t struct_size;
    uint32_t blocks_total;          /* device tier, sealed blocks */
    uint32_t blocks_free;
    uint32_t blocks_cached;         /* unreferenced, kept by the prefix cache */
    uint32_t blocks_used;           /* referenced by sessions or prefixes */
    uint32_t tail_blocks_total;
    uint32_t tail_blocks_used;
    uint32_t sessions_total;
    uint32_t sessions_idle;
    uint32_t sessions_queued;
    uint32_t sessions_prefilling;
    uint32_t sessions_generating;
    uint32_t sessions_parked;
    uint32_t sessions_finished;
    uint64_t kv_bytes_used;         /* bytes of blocks in use (sealed + tail) */
    uint64_t tokens_stored;         /* tokens whose KV is held by live sessions */
    uint64_t prefix_hit_tokens;
    uint64_t prefix_miss_tokens;
    uint64_t bytes_to_host;
    uint64_t bytes_to_device;
    uint64_t preemptions;
    uint64_t tokens_prefilled;      /* prompt tokens run through the model */
    uint64_t tokens_generated;
    uint64_t steps;
    /* Host tier (all 0 without one). */
    uint64_t host_bytes_total;      /* the host region (rounded up to the arena granularity) */
    uint64_t host_bytes_used;       /* bytes of host-resident blocks (at most kv_host_bytes) */
    uint64_t host_blocks;           /* host-resident blocks: parked and swapped sessions', long
                                       contexts' older blocks, demoted prefix blocks (tails count) */
    uint64_t parks;                 /* idle sessions moved to the host tier (explicit or under pressure) */
    uint64_t swaps;                 /* running sessions preempted to the host tier (not recomputed) */
    uint64_t resumes;               /* parked or swapped sessions brought back */
    uint64_t copy_ns;               /* time the copy engine spent copying */
    uint64_t demotions;             /* prefix-cache blocks evicted from the device kept in the host tier */
    uint64_t promotions;            /* such blocks found by a later prompt and copied back */
    /* ---- Appended in 0.2 (the 0.1 size is still accepted). ---- */
    uint64_t sample_ns;             /* time spent choosing tokens (bias, masks, sampling) */
    uint64_t grammar_mask_ns;       /* of which computing and applying grammar masks */
    uint64_t grammar_masks;         /* masks applied (one per constrained token) */
    uint64_t grammar_mask_cache_hits; /* of which served from a grammar's mask cache */
    /* ---- Appended in 0.5 (the 0.1 and 0.2 sizes are still accepted). ---- */
    uint64_t kv_bytes_used_rank;    /* tensor parallelism: kv_bytes_used on each rank (its KV
                                       heads of the same blocks); else kv_bytes_used */
    uint64_t tp_reduce_ns;          /* tensor parallelism: time rank 0 spent in the forward
                                       passes' all-reduces and logit gathers (waiting for the
                                       other ranks included); 0 with one rank. GPU ranks over
                                       NCCL (experimental: compiled, never run on a GPU): the
                                       logit gathers only (their all-reduces run on the
                                       device, not the host) */
    uint64_t tp_reduces;            /* how many such collectives (2 per layer and step, plus
                                       one gather per step with logits) */
} llmkv_stats;

/* Fills *out (out->struct_size must be set). Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_engine_get_stats(const llmkv_engine *e, llmkv_stats *out);

/* Checks the engine's KV pool invariants (free + used = total, every block's refcount
 * equals its holders, block tables match token counts). LLMKV_OK when they hold,
 * LLMKV_ERR_INTERNAL with a description otherwise. Meant for tests and debug builds. */
LLMKV_API llmkv_status llmkv_engine_validate(const llmkv_engine *e);

/* ---- Tokens and text -------------------------------------------------------------------- */

#define LLMKV_TOKENIZE_ADD_BOS 0x1u       /* prepend BOS if the model's file asks for one
                                             (tokenizer.ggml.add_bos_token) */
#define LLMKV_TOKENIZE_PARSE_SPECIAL 0x2u /* "<|im_start|>" in text becomes its token */
#define LLMKV_TOKENIZE_STRICT 0x4u        /* a byte the vocabulary has no token for is an error */

/* Tokenizes len bytes of UTF-8 text. Invalid UTF-8 is encoded byte by byte, through the
 * vocabulary's byte tokens (byte-level symbols, or <0xNN> byte-fallback tokens). A byte the
 * vocabulary has no token for at all (no byte token and no unknown token: SmolLM2's
 * vocabulary lacks 21 of the 256 byte values: six ASCII control characters, 0x04 0x06 0x13
 * 0x14 0x16 0x1d, the lead bytes 0xf1 0xf2 of rare 4-byte characters, and 13 bytes that never
 * occur in valid UTF-8) is dropped,
 * as the reference tokenizers do; llmkv_engine_info.n_unrepresentable_bytes says how many
 * byte values that can happen to. With LLMKV_TOKENIZE_STRICT such a byte is
 * LLMKV_ERR_INVALID_ARGUMENT instead (the message gives the count and the first byte).
 * llmkv_session_append_text always drops them; a host that must know tokenizes with
 * LLMKV_TOKENIZE_STRICT and appends the tokens. Writes at most capacity tokens; *n_tokens
 * receives the count. If capacity is too small: LLMKV_ERR_INVALID_ARGUMENT with *n_tokens =
 * the required count (tokens may be NULL when capacity is 0). */
LLMKV_API llmkv_status llmkv_tokenize(const llmkv_engine *e, const char *text, size_t len,
                                      uint32_t flags, int32_t *tokens, size_t capacity,
                                      size_t *n_tokens);

/* Writes the bytes of the tokens' text (special tokens as their text). Not
 * NUL-terminated. If capacity is too small: LLMKV_ERR_INVALID_ARGUMENT with *n_bytes =
 * the required size. A token id outside the vocabulary: LLMKV_ERR_INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_detokenize(const llmkv_engine *e, const int32_t *tokens, size_t n,
                                        char *buf, size_t capacity, size_t *n_bytes);

typedef struct llmkv_chat_message {
    const char *role; /* "system", "user" or "assistant" ("ipython" too for Llama 3); exact */
    const char *content;
} llmkv_chat_message;

/* Formats messages with the model's chat template (recognised families only; a template
 * in the file is never executed). Same capacity rule as llmkv_detokenize; the output is
 * NUL-terminated when capacity allows (the NUL is not counted). Roles are checked, never
 * pasted in unchecked: ChatML and Llama 2 accept "system", "user" and "assistant" (Llama 2
 * a "system" message only as msgs[0]), Llama 3 those and "ipython"; any other role is
 * INVALID_ARGUMENT naming the message and the role. Contents are inserted as given.
 * Errors: INVALID_ARGUMENT (NULL arguments, a role the family does not accept, capacity),
 * UNSUPPORTED (no known template for this model; checked before the roles). */
LLMKV_API llmkv_status llmkv_chat_format(const llmkv_engine *e, const llmkv_chat_message *msgs,
                                         size_t n, int add_generation_prompt, char *buf,
                                         size_t capacity, size_t *n_bytes);

/* ---- Prefix handles ------------------------------------------------------------------- */

/* A prefix is an immutable, refcounted run of tokens whose KV is computed once (a system
 * prompt, a persona, a document). Sessions created from it (session_params.prefix) share its
 * sealed KV blocks and copy its small full-precision tail, so their output is bitwise what a
 * fresh session with the same tokens would produce.
 *
 * Independently of handles, the engine's automatic prefix cache (LLMKV_ENGINE_PREFIX_CACHE,
 * on by default; off when kv_residual_tokens > 0) reuses identical full blocks of any
 * session's prompt; llmkv_stats.prefix_hit_tokens counts the tokens it served. */

/* Computes the KV of tokens[0..n) now (all but the last token, whose logits are computed by
 * the first generate of a session made from it), blocking until done; other sessions'
 * pending work and events are untouched. *out is owned by the caller until
 * llmkv_prefix_release (or llmkv_engine_destroy). A handle holds one tail slot
 * (engine_params.max_sessions counts sessions and prefixes). Errors: INVALID_ARGUMENT
 * (NULL, n = 0, a token outside the vocabulary), KV_CAPACITY (does not fit the pool or
 * max_context; nothing is kept). */
LLMKV_API llmkv_status llmkv_prefix_create(llmkv_engine *e, const int32_t *tokens, size_t n,
                                           llmkv_prefix **out);

/* Saves the prefix's tokens and KV to a snapshot file (written to a temporary file and
 * renamed, so a reader never sees a partial file): flatbuffers metadata (format version,
 * model fingerprint, codecs, block size, shapes, tokens, checksums) followed by the raw
 * blocks. Errors: INVALID_ARGUMENT, IO. */
LLMKV_API llmkv_status llmkv_prefix_save(const llmkv_prefix *p, const char *path);

/* Loads a snapshot written by llmkv_prefix_save into a new prefix handle: a read plus a copy
 * into the pool, no recomputation. The file must come from the same model, KV codecs,
 * rotation, block size and CPU kernel variant; anything else, and any corruption
 * (truncation, a flipped byte anywhere), is LLMKV_ERR_SNAPSHOT_FORMAT with a message saying
 * what, and the engine is unchanged. Other errors: INVALID_ARGUMENT, IO (missing or
 * unreadable file), KV_CAPACITY.
 *
 * What a snapshot's checksums protect against: accidents (truncation, bit rot, a file of
 * another model or configuration). Not intent: whoever can write the file can change its
 * tokens or KV and recompute the checksums, and the loaded prefix then continues from KV
 * that does not belong to its tokens. So a loaded prefix serves only the sessions created
 * from it (and their forks and prefixes): its blocks, and blocks those sessions compute
 * after them, are never offered to the automatic prefix cache, where a session of another
 * host component sending the same tokens would pick them up. llmkv_prefix_load_ex with
 * LLMKV_PREFIX_LOAD_SHARE opts in for files the host trusts as much as its own computation. */
LLMKV_API llmkv_status llmkv_prefix_load(llmkv_engine *e, const char *path, llmkv_prefix **out);

#define LLMKV_PREFIX_LOAD_SHARE 0x1u /* offer the loaded KV to the automatic prefix cache */
/* Accept a snapshot written by another kernel variant (AVX-512, AVX2, portable, CUDA; the
 * CUDA one experimental: compiled, never run on a GPU) of the same model, codecs, rotation,
 * block size and shapes: a prefix computed once at build time and shipped to machines with
 * other CPUs. The blocks' layout is the codec's on every
 * variant, but the variants round differently, so continuations from such a prefix are not
 * bitwise those this engine computes from the same tokens (they differ like the variants'
 * own outputs do). Such a file is never offered to the automatic prefix cache, even with
 * LLMKV_PREFIX_LOAD_SHARE: the cache must hold only bytes this engine would compute.
 * Added in 0.4. */
#define LLMKV_PREFIX_LOAD_ANY_KERNEL 0x2u

/* llmkv_prefix_load with flags (LLMKV_PREFIX_LOAD_*; unknown bits are INVALID_ARGUMENT). */
LLMKV_API llmkv_status llmkv_prefix_load_ex(llmkv_engine *e, const char *path, uint32_t flags,
                                            llmkv_prefix **out);

/* Number of tokens of the prefix (0 for NULL). */
LLMKV_API size_t llmkv_prefix_n_tokens(const llmkv_prefix *p);

/* Copies up to capacity of the prefix's tokens; *n_tokens receives the total count.
 * Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_prefix_get_tokens(const llmkv_prefix *p, int32_t *tokens, size_t capacity,
                                               size_t *n_tokens);

/* Releases the handle; sessions created from it keep the blocks they share. NULL is fine. */
LLMKV_API void llmkv_prefix_release(llmkv_prefix *p);

/* ---- Sessions ------------------------------------------------------------------------- */

typedef struct llmkv_sampling {
    float temperature;    /* 0 = greedy */
    int32_t top_k;        /* 0 = off */
    float top_p;          /* 1 = off */
    float min_p;          /* 0 = off */
    float repeat_penalty; /* 1 = off; applies to the last repeat_last_n tokens */
    uint64_t seed;        /* per-session RNG: results never depend on other sessions */
    int32_t repeat_last_n; /* window of repeat_penalty; 0 = 64, -1 = whole context */
} llmkv_sampling;

/* session_params.logit_bias: added to a token's logit before sampling (and before the grammar
 * mask and the repeat penalty); -INFINITY (math.h) bans the token. Several entries for one
 * token add up. */
typedef struct llmkv_logit_bias {
    int32_t token;
    float bias;
} llmkv_logit_bias;

/* session_params.grammar_kind, llmkv_session_set_grammar. */
typedef enum llmkv_grammar_kind {
    LLMKV_GRAMMAR_NONE = 0,
    LLMKV_GRAMMAR_GBNF = 1,        /* GBNF text (docs/GRAMMAR.md: the syntax supported) */
    LLMKV_GRAMMAR_JSON_SCHEMA = 2  /* a JSON Schema document (docs/GRAMMAR.md: the subset) */
} llmkv_grammar_kind;

typedef struct llmkv_session_params {
    uint32_t struct_size;
    const llmkv_prefix *prefix;  /* optional: start from this prefix (shares its blocks); the
                                    prefix must belong to the same engine */
    llmkv_sampling sampling;
    uint32_t max_new_tokens;     /* default limit for generate(); 0 = until stop/context end */
    const int32_t *stop_tokens;  /* in addition to the model's end-of-generation tokens;
                                    copied at create */
    uint32_t n_stop_tokens;
    int32_t priority;            /* higher runs first */
    void *user_data;             /* handed back in events */
    /* ---- Appended in 0.2 (a struct_size ending at user_data is still accepted: these are
     * then all zero). ---- */
    /* Stop strings: generation ends (LLMKV_FINISH_STOP) as soon as the text generated by this
     * generate() contains one of them, matched across token boundaries on the detokenized
     * bytes. llmkv_session_read_text never returns the stop string or anything after it; it
     * holds back only the bytes that could still begin a match, and hands them out when
     * generation ends otherwise. The tokens stay in the context and their KV is kept; TOKEN
     * events report every token (a host that detokenizes events itself sees the stop
     * string). Copied at create; at most 64 strings of 1..256 bytes. */
    const char *const *stop_strings;
    const size_t *stop_string_lengths; /* NULL: each stop string is NUL-terminated */
    uint32_t n_stop_strings;
    const llmkv_logit_bias *logit_bias; /* copied at create; at most n_vocab entries */
    uint32_t n_logit_bias;
    /* End-of-generation and stop tokens are banned until this many tokens were generated
     * by a generate() (unless a grammar's sentence is complete and nothing else may follow). */
    uint32_t min_new_tokens;
    /* Grammar-constrained decoding: each step samples only among tokens that keep the text
     * generated so far a prefix of a sentence of the grammar, and end-of-generation and stop
     * tokens only where that text is a complete sentence. Control tokens are never allowed
     * under a grammar. The grammar covers the text generated since it last started: at
     * create, llmkv_session_set_grammar, each append, and after a generation that ended with
     * STOP or CONSTRAINT; a generation that ended with LENGTH, CANCELLED or CONTEXT is
     * continued by the next generate(), and llmkv_session_fork copies where it stands.
     * A grammar that admits no token the vocabulary can spell ends generation with
     * LLMKV_FINISH_CONSTRAINT. An invalid grammar is INVALID_ARGUMENT at create, with a
     * message giving the line and column (GBNF) or the JSON pointer (JSON Schema). */
    uint32_t grammar_kind;       /* llmkv_grammar_kind; NONE = unconstrained */
    const char *grammar;         /* borrowed for the duration of create */
    size_t grammar_len;
    const char *grammar_root;    /* GBNF start rule; NULL = "root" */
} llmkv_session_params;

typedef enum llmkv_session_state {
    LLMKV_SESSION_IDLE = 0,       /* nothing to do; KV holds all its tokens but the last */
    LLMKV_SESSION_QUEUED = 1,     /* has input or a generate request, not started */
    LLMKV_SESSION_PREFILLING = 2, /* its queued input is being run through the model */
    LLMKV_SESSION_GENERATING = 3,
    LLMKV_SESSION_PARKED = 4,
    LLMKV_SESSION_FINISHED = 5    /* generation ended; append or generate continues it */
} llmkv_session_state;

typedef enum llmkv_finish_reason {
    LLMKV_FINISH_NONE = 0,
    LLMKV_FINISH_STOP = 1,      /* end-of-generation or stop token */
    LLMKV_FINISH_LENGTH = 2,    /* max_new_tokens reached */
    LLMKV_FINISH_CANCELLED = 3,
    LLMKV_FINISH_CONTEXT = 4,   /* max_context reached */
    LLMKV_FINISH_CONSTRAINT = 5 /* the grammar, logit bias and bans leave no token to sample */
} llmkv_finish_reason;

/* Defaults: greedy, no stop tokens or strings beyond the model's, no logit bias, no grammar,
 * max_new_tokens 0, min_new_tokens 0, priority 0. The function of this name fills the
 * 0.2-0.4 struct; programs compiled against this header call
 * llmkv_session_params_init_sized (the macro below), as for llmkv_engine_params_init. */
LLMKV_API void llmkv_session_params_init(llmkv_session_params *p);

/* As llmkv_engine_params_init_sized, for session params. Added in 0.4. */
LLMKV_API void llmkv_session_params_init_sized(llmkv_session_params *p, size_t size);

#if !defined(LLMKV_BUILDING_LIBRARY) && !defined(LLMKV_NO_INIT_MACROS)
#define llmkv_session_params_init(p) llmkv_session_params_init_sized((p), sizeof(llmkv_session_params))
#endif

/* Creates an empty session. *out is owned by the caller until llmkv_session_destroy (or
 * llmkv_engine_destroy). Errors: INVALID_ARGUMENT, KV_CAPACITY (max_sessions live). */
LLMKV_API llmkv_status llmkv_session_create(llmkv_engine *e, const llmkv_session_params *p,
                                            llmkv_session **out);

/* Queues input tokens; the following llmkv_step calls run them through the model (chunked
 * under the step's token budget), all but the session's last token: that one is run by the
 * step that starts generation, so its logits are fresh (session_info.n_cached is then
 * n_tokens - 1). Errors: INVALID_ARGUMENT (bad token id, NULL with n > 0), STATE (the
 * session is generating), KV_CAPACITY (would exceed max_context; nothing is queued). */
LLMKV_API llmkv_status llmkv_session_append(llmkv_session *s, const int32_t *tokens, size_t n);

/* Tokenizes text (special-token text is parsed; BOS is added when the session is empty and
 * the model wants one) and appends it. Same errors as llmkv_session_append. */
LLMKV_API llmkv_status llmkv_session_append_text(llmkv_session *s, const char *text, size_t len);

/* Asks for up to max_new_tokens new tokens (0 = the params default; if that is 0 too, until
 * a stop token or the context end). Tokens arrive as TOKEN events from llmkv_step /
 * llmkv_run, then one DONE event. A stop token (the model's end-of-generation tokens or
 * params.stop_tokens) ends generation with LLMKV_FINISH_STOP: it is added to the context
 * (so a following turn sees it) but gets no TOKEN event, no text, and is not counted in
 * n_generated. Errors: STATE (already generating, or nothing in the context to continue
 * from), KV_CAPACITY (the context already holds max_context tokens). */
LLMKV_API llmkv_status llmkv_session_generate(llmkv_session *s, uint32_t max_new_tokens);

/* Stops generating; the KV of every token so far is kept. A DONE event with
 * LLMKV_FINISH_CANCELLED follows from the next step. Errors: STATE (not generating). */
LLMKV_API llmkv_status llmkv_session_cancel(llmkv_session *s);

/* Moves the session's KV to the host tier now, asynchronously (a copy thread; a CUDA
 * build's copy stream, experimental: compiled, never run on a GPU); device blocks return to
 * the pool when the copy completes. Blocks the session shares with others (prefix blocks)
 * stay on the device. The next step that has work for the session (append + generate)
 * brings its KV back first: tokens are bitwise those of a session never parked. Under memory pressure the scheduler parks
 * idle sessions and swaps out preempted ones itself when the host tier has room (and
 * drops their KV for recomputation when it has not). Parking a parked session, or one
 * with no computed KV, does nothing. Errors: UNSUPPORTED (no host tier: kv_host_bytes
 * is 0), STATE (generating), KV_CAPACITY (the host tier is full). */
LLMKV_API llmkv_status llmkv_session_park(llmkv_session *s);

/* Copies the text generated since the last read into buf: whole UTF-8 characters only (an
 * incomplete character waits for the next token). Reads at most capacity bytes; what does
 * not fit stays for the next read, and a character is never split, so a capacity below 4
 * can return 0 bytes while text is waiting. *n_bytes receives the count. Not
 * NUL-terminated. Bytes that can never form valid UTF-8 are passed through as they are.
 * While the engine's worker thread runs (llmkv_worker_start) this never waits for a step:
 * the worker hands each step's text over before that step's events. */
LLMKV_API llmkv_status llmkv_session_read_text(llmkv_session *s, char *buf, size_t capacity,
                                               size_t *n_bytes);

typedef enum llmkv_tier {
    LLMKV_TIER_DEVICE = 0,
    LLMKV_TIER_HOST = 1,   /* parked or swapped out */
    LLMKV_TIER_MIXED = 2   /* running with its older blocks in the host tier (context longer
                              than the device pool holds); attention reads them there */
} llmkv_tier;

typedef struct llmkv_session_info {
    uint32_t struct_size;
    uint32_t state;          /* llmkv_session_state */
    uint32_t finish_reason;  /* llmkv_finish_reason of the last generation */
    uint32_t n_tokens;       /* tokens in the context (prompt + generated) */
    uint32_t n_cached;       /* tokens whose KV is computed */
    uint32_t n_generated;    /* generated by the current / last generate() */
    uint32_t n_blocks;       /* sealed blocks in its block table */
    uint32_t tier;           /* llmkv_tier: where its KV lives (HOST while parked or swapped out) */
    int32_t priority;
    /* ---- Appended in 0.2 (the 0.1 size is still accepted). ---- */
    int32_t stop_string;     /* index of the stop string that ended the last generation; -1 none */
    uint32_t text_held;      /* generated bytes read_text holds back (a possible stop string start) */
    uint32_t has_grammar;    /* 1 when a grammar constrains generation */
    uint32_t grammar_complete; /* 1 when the text generated under the grammar is a complete sentence */
} llmkv_session_info;

/* Fills *out (out->struct_size must be set). */
LLMKV_API llmkv_status llmkv_session_get_info(const llmkv_session *s, llmkv_session_info *out);

/* Copies up to capacity of the session's context tokens into tokens; *n_tokens receives
 * the total count. Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_session_get_tokens(const llmkv_session *s, int32_t *tokens,
                                                size_t capacity, size_t *n_tokens);

/* A new session with the same context, sharing its sealed blocks (and copying its tail),
 * sampling parameters and RNG state: given the same calls, both continue identically.
 * Errors: STATE (the session is generating), KV_CAPACITY (max_sessions reached),
 * UNSUPPORTED (a long context whose older blocks live in the host tier, session_info.tier =
 * LLMKV_TIER_MIXED). */
LLMKV_API llmkv_status llmkv_session_fork(llmkv_session *s, llmkv_session **out);

/* A prefix handle holding the session's current context (shares its blocks). Errors: STATE
 * (the session is generating or empty), KV_CAPACITY (no tail slot), UNSUPPORTED (as for
 * llmkv_session_fork: older blocks in the host tier). */
LLMKV_API llmkv_status llmkv_session_to_prefix(llmkv_session *s, llmkv_prefix **out);

/* Replaces the session's grammar (LLMKV_GRAMMAR_NONE removes it) for the generations that
 * follow; the grammar starts over. Meant for a conversation whose turns want different
 * formats. text is borrowed for the call; root is the GBNF start rule (NULL = "root").
 * Errors: INVALID_ARGUMENT (bad kind, NULL text with len > 0, an invalid grammar: the
 * message gives the line and column or the JSON pointer; the previous grammar stays),
 * STATE (the session is generating). */
LLMKV_API llmkv_status llmkv_session_set_grammar(llmkv_session *s, llmkv_grammar_kind kind, const char *text,
                                                 size_t len, const char *root);

/* Frees the session and returns its blocks to the pool. Events already queued for it are
 * discarded. NULL is fine. */
LLMKV_API void llmkv_session_destroy(llmkv_session *s);

/* ---- Stepping ------------------------------------------------------------------------- */

typedef enum llmkv_event_kind {
    LLMKV_EVENT_TOKEN = 1,
    LLMKV_EVENT_DONE = 2,
    LLMKV_EVENT_ERROR = 3
} llmkv_event_kind;

typedef struct llmkv_event {
    llmkv_session *session;
    void *user_data;         /* the session's params.user_data */
    uint32_t kind;           /* llmkv_event_kind */
    int32_t token;           /* for TOKEN */
    uint32_t finish_reason;  /* for DONE */
    int32_t status;          /* for ERROR */
} llmkv_event;

/* Runs at most one scheduling iteration (one forward pass over the batch) and returns the
 * events produced, oldest first. Events that do not fit in capacity stay queued for the
 * next call; none is ever dropped. *n_events = 0 and LLMKV_OK when there is no work, but
 * also after a step that only prefilled (a prompt chunk produces no event): a host that
 * steps until nothing is left asks llmkv_engine_has_work (or uses llmkv_run). events may
 * be NULL when capacity is 0. */
LLMKV_API llmkv_status llmkv_step(llmkv_engine *e, llmkv_event *events, size_t capacity,
                                  size_t *n_events);

/* Number of events waiting to be returned by llmkv_step (while the worker thread runs, by
 * llmkv_worker_poll). */
LLMKV_API size_t llmkv_pending_events(const llmkv_engine *e);

/* 1 when a session has input to run, a generation in progress or a submitted request
 * waiting, so that llmkv_step has something to do; 0 otherwise (and for NULL). Added in
 * 0.4. */
LLMKV_API int llmkv_engine_has_work(const llmkv_engine *e);

typedef void (*llmkv_event_fn)(const llmkv_event *event, void *user_data);

/* Steps until no session has work, calling on_event (may be NULL) for each event. The
 * callback must not call into this engine. */
LLMKV_API llmkv_status llmkv_run(llmkv_engine *e, llmkv_event_fn on_event, void *user_data);

/* ---- Worker thread: game-loop mode (added in 0.4) --------------------------------------- */

/* A host that must never wait for a forward pass (a game's frame loop at 60 frames per
 * second, a UI thread) hands stepping to a thread of the engine's own:
 *
 *  - llmkv_worker_start starts it. It steps whenever a session has work and sleeps
 *    otherwise; llmkv_step and llmkv_run are LLMKV_ERR_STATE while it runs.
 *  - Events go to a queue that llmkv_worker_poll drains.
 *  - The calls that never wait for a step in progress (they take only short internal
 *    locks, held for a copy): llmkv_worker_poll, llmkv_session_submit_text,
 *    llmkv_session_submit_tokens, llmkv_session_submit_cancel, llmkv_session_read_text and
 *    llmkv_session_submit_error. A frame calls only these.
 *  - Every other call stays valid from any thread and waits for the step in progress, if
 *    any (at most one forward pass): create and destroy sessions, get_info, fork, park...
 *    outside the frame's critical path.
 *
 * The worker thread runs at engine_params.thread_priority, and its forward passes use the
 * engine's compute threads (engine_params.n_threads, the worker thread being one of them). */

/* Starts the worker thread. Errors: INVALID_ARGUMENT (NULL), STATE (already running),
 * OUT_OF_MEMORY (no thread). */
LLMKV_API llmkv_status llmkv_worker_start(llmkv_engine *e);

/* Stops the worker after the step in progress and joins it; queued events stay for
 * llmkv_worker_poll (and for llmkv_step after it), submitted requests not yet carried out
 * stay queued for the next step. Stopping a stopped worker does nothing. Also done by
 * llmkv_engine_destroy. Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_worker_stop(llmkv_engine *e);

/* Moves up to capacity queued events into events, oldest first (none is dropped; what does
 * not fit stays); *n_events receives the count. timeout_us = 0 returns at once; otherwise,
 * while the worker runs, waits up to that long for a first event (a server's or a
 * binding's event loop). Without the worker it returns the events queued so far (as
 * llmkv_step would, without stepping; it may wait for a call in progress). When a step of
 * the worker failed, returns that status once, with the message in llmkv_last_error of
 * the calling thread, when no event queued before it is left; the worker goes on stepping
 * unless the status is LLMKV_ERR_BACKEND or LLMKV_ERR_INTERNAL, after which it has stopped
 * itself. Errors: INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_worker_poll(llmkv_engine *e, llmkv_event *events, size_t capacity,
                                         uint32_t timeout_us, size_t *n_events);

/* llmkv_session_submit_*: flags */
#define LLMKV_SUBMIT_GENERATE 0x1u /* after appending, generate up to max_new_tokens (0 = the
                                      session's default), as llmkv_session_generate */

/* Queues "append this input, then (with LLMKV_SUBMIT_GENERATE) generate" for the session;
 * the next step carries it out (the worker's, or llmkv_step / llmkv_run without a worker),
 * in submission order. Never waits for a step in progress. The text or tokens are copied;
 * len or n may be 0 (just generate). What the step's append or generate would return as an
 * error (STATE: already generating; KV_CAPACITY; INVALID_ARGUMENT: a bad token id) arrives
 * instead as an LLMKV_EVENT_ERROR event of the session with that status, and
 * llmkv_session_submit_error gives its message; the session is then as before the request.
 * Errors returned at once: INVALID_ARGUMENT (NULL session, NULL input with a length,
 * unknown flag bits). */
LLMKV_API llmkv_status llmkv_session_submit_text(llmkv_session *s, const char *text, size_t len,
                                                 uint32_t flags, uint32_t max_new_tokens);
LLMKV_API llmkv_status llmkv_session_submit_tokens(llmkv_session *s, const int32_t *tokens, size_t n,
                                                   uint32_t flags, uint32_t max_new_tokens);

/* Queues a cancel (as llmkv_session_cancel) for the next step. A session that is not
 * generating by then is left alone (no error event). Never waits for a step. Errors:
 * INVALID_ARGUMENT. */
LLMKV_API llmkv_status llmkv_session_submit_cancel(llmkv_session *s);

/* The message of the session's last submitted request that failed (an empty string if
 * none): as much as fits in capacity - 1 bytes is copied and NUL-terminated (when capacity
 * > 0); *n_bytes receives the message's full length. Never waits for a step. Errors:
 * INVALID_ARGUMENT (NULL session or n_bytes, NULL buf with capacity > 0). */
LLMKV_API llmkv_status llmkv_session_submit_error(const llmkv_session *s, char *buf, size_t capacity,
                                                  size_t *n_bytes);

#ifdef __cplusplus
}
#endif

#endif /* LLMKV_H */
