/*
 * cuda_module.h - the C ABI between libllmkv and the run-time loaded CUDA module
 * libllmkv-cuda.so (built from kernels/). Plain C, no CUDA types: libllmkv is compiled and
 * shipped without any CUDA header or library and dlopens the module when it is present.
 *
 * The module exports exactly one symbol:
 *     const llmkv_cuda_api *llmkv_cuda_get_api(uint32_t abi_version);
 * which returns NULL when abi_version != LLMKV_CUDA_ABI_VERSION. Every struct begins with
 * (or carries) struct_size; fields are only appended, and the ABI version is bumped on any
 * change of meaning.
 *
 * Conventions
 *  - Every fallible function returns an llmkv_cuda_status (0 = ok, negative = error).
 *    Functions taking `err` write a NUL-terminated message there (truncated to err_cap).
 *    Functions on a context leave their message in last_error(ctx).
 *  - Device (CUDA / cuBLAS) errors are STICKY: after one, every later call on that context
 *    fails with LLMKV_CUDA_ERR_DEVICE and the first error's text; only destroy is useful.
 *    Argument errors (LLMKV_CUDA_ERR_INVALID) are not sticky and change nothing.
 *  - No call aborts the process or lets a C++ exception escape.
 *  - A context is not thread-safe: calls on one context must be serialized by the caller
 *    (the engine does). Any thread may make them (each call selects the context's device).
 *  - All device memory is allocated in create (weights, activations for max_batch_tokens,
 *    the sealed-block pool and the tail slots, workspaces); forward() allocates nothing
 *    except when a step's block tables exceed every earlier step's (buffers then double).
 *
 * KV layouts are EXACTLY those of src/kv/kv_cache.h and src/kv/codec.h (sealed blocks of
 * sealed_block_bytes, tail slots of tail_block_bytes), so read_block / write_block move the
 * same bytes the CPU backend stores: snapshots and the host tier are backend-independent.
 */
#ifndef LLMKV_CUDA_MODULE_H
#define LLMKV_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLMKV_CUDA_ABI_VERSION 1u
#define LLMKV_CUDA_MODULE_NAME "libllmkv-cuda.so"
#define LLMKV_CUDA_GET_API_SYMBOL "llmkv_cuda_get_api"

typedef int32_t llmkv_cuda_status;
#define LLMKV_CUDA_OK 0
#define LLMKV_CUDA_NOT_READY 1            /* copy_query: the copy is still in flight */
#define LLMKV_CUDA_ERR_INVALID (-1)       /* bad argument; nothing changed */
#define LLMKV_CUDA_ERR_OUT_OF_MEMORY (-2) /* cudaMalloc / cudaHostAlloc failed */
#define LLMKV_CUDA_ERR_UNSUPPORTED (-3)   /* shape or codec the kernels do not handle */
#define LLMKV_CUDA_ERR_NO_DEVICE (-4)     /* no CUDA device / driver, or bad ordinal */
#define LLMKV_CUDA_ERR_DEVICE (-5)        /* CUDA or cuBLAS failure: sticky */

/* KV dtypes: the values of llmkv_kv_dtype in include/llmkv.h. */
#define LLMKV_CUDA_KV_F16 0u
#define LLMKV_CUDA_KV_BF16 1u
#define LLMKV_CUDA_KV_FP8_E4M3 2u
#define LLMKV_CUDA_KV_INT8 3u
#define LLMKV_CUDA_KV_INT4 4u

/* Weights of one layer: HOST pointers, read only during create / upload_layer (the module
 * copies them to the device; the caller frees them afterwards). Matrices are fp16 (IEEE
 * binary16 bit patterns), row-major [out][in]: row r holds the weights of output feature r. */
typedef struct llmkv_cuda_layer_weights {
    const uint16_t *wq;     /* [n_heads * head_dim][n_embd] */
    const uint16_t *wk;     /* [n_kv_heads * head_dim][n_embd] */
    const uint16_t *wv;     /* [n_kv_heads * head_dim][n_embd] */
    const uint16_t *wo;     /* [n_embd][n_heads * head_dim] */
    const uint16_t *w_gate; /* [n_ff][n_embd] */
    const uint16_t *w_up;   /* [n_ff][n_embd] */
    const uint16_t *w_down; /* [n_embd][n_ff] */
    const float *attn_norm; /* [n_embd] f32 */
    const float *ffn_norm;  /* [n_embd] f32 */
} llmkv_cuda_layer_weights;

/* The model: Llama architecture. */
typedef struct llmkv_cuda_model_desc {
    uint32_t struct_size; /* sizeof(llmkv_cuda_model_desc) */
    uint32_t n_layers;
    uint32_t n_embd;
    uint32_t n_heads;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t n_ff;
    uint32_t n_vocab;
    uint32_t rope_dim; /* rotated dims per head (even, <= head_dim) */
    float rms_eps;
    float rope_freq_scale; /* positions are multiplied by this (linear scaling) */
    const float *inv_freq; /* [rope_dim / 2] host: final per-pair frequencies (factors applied) */
    const uint16_t *token_embd; /* [n_vocab][n_embd] fp16, host */
    const uint16_t *output;     /* [n_vocab][n_embd] fp16, host; may equal token_embd (tied:
                                   uploaded once) */
    const float *output_norm;   /* [n_embd] f32, host */
    /* [n_layers] host, or NULL: then create only allocates the layers and the caller uploads
     * each one with upload_layer() before the first forward (bounds the host temporaries to
     * one layer). */
    const llmkv_cuda_layer_weights *layers;
} llmkv_cuda_model_desc;

/* The KV store: mirrors KvGeometry plus the pool sizes. The module recomputes both byte
 * sizes from the geometry and rejects a mismatch (a cheap layout-agreement check). */
typedef struct llmkv_cuda_kv_desc {
    uint32_t struct_size; /* sizeof(llmkv_cuda_kv_desc) */
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t block_tokens;
    uint32_t residual_tokens;
    uint32_t dtype_k; /* LLMKV_CUDA_KV_* */
    uint32_t dtype_v;
    uint32_t rotate_k; /* 0/1: sealed K stored Hadamard-rotated */
    uint32_t rotate_v;
    uint32_t n_sealed_blocks; /* device sealed pool: block ids [0, n_sealed_blocks) */
    uint32_t n_tail_slots;    /* device tail pool: slot ids [0, n_tail_slots) */
    uint64_t sealed_block_bytes;
    uint64_t tail_block_bytes;
} llmkv_cuda_kv_desc;

/* Limits of one context. */
typedef struct llmkv_cuda_context_params {
    uint32_t struct_size;               /* sizeof(llmkv_cuda_context_params) */
    int32_t device;                     /* CUDA ordinal */
    uint32_t max_batch_tokens;          /* most tokens (sum of span n) in one forward */
    uint32_t max_spans;                 /* most spans in one forward; 0 = max_batch_tokens */
    uint64_t attention_workspace_bytes; /* split-context partial results; 0 = 128 MiB */
} llmkv_cuda_context_params;

/* One span of a forward step: consecutive tokens of one session (ForwardSpan). */
typedef struct llmkv_cuda_span {
    const uint32_t *blocks; /* host: the session's sealed block ids in position order */
    uint32_t n_blocks;      /* >= sealed_blocks(pos0 + n) (blocks past it are ignored) */
    uint32_t tail_slot;     /* the session's tail slot */
    uint32_t pos0;          /* tokens already computed (= SessionKv::n_tokens) */
    const int32_t *tokens;  /* host: n token ids */
    uint32_t n;             /* > 0 */
    uint32_t want_logits;   /* 0/1: logits for the span's last token */
    uint32_t all_logits;    /* 0/1: with want_logits, logits for every token of the span */
} llmkv_cuda_span;

typedef struct llmkv_cuda_context llmkv_cuda_context;

typedef struct llmkv_cuda_api {
    uint32_t struct_size; /* sizeof(llmkv_cuda_api) as built into the module */
    uint32_t abi_version; /* LLMKV_CUDA_ABI_VERSION */

    /* Number of usable devices. 0 devices is LLMKV_CUDA_ERR_NO_DEVICE with the reason
     * (no driver, no device) in err. */
    llmkv_cuda_status (*device_count)(int32_t *count, char *err, size_t err_cap);
    /* Device name and memory, for logs and automatic budgets. */
    llmkv_cuda_status (*device_info)(int32_t device, char *name, size_t name_cap,
                                     uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                                     size_t err_cap);

    /* Creates a context: uploads the model (unless desc->layers is NULL), allocates the KV
     * pools (cudaMalloc, never managed memory; contents zeroed) and every buffer a forward
     * of params->max_batch_tokens needs. OUT_OF_MEMORY when the device cannot hold it all
     * (nothing is left allocated). *out is NULL on failure. */
    llmkv_cuda_status (*create)(const llmkv_cuda_model_desc *model, const llmkv_cuda_kv_desc *kv,
                                const llmkv_cuda_context_params *params, llmkv_cuda_context **out,
                                char *err, size_t err_cap);
    /* Frees everything (waits for in-flight work). NULL is fine. */
    void (*destroy)(llmkv_cuda_context *ctx);
    /* Uploads layer `layer`'s weights (host pointers as in llmkv_cuda_layer_weights). */
    llmkv_cuda_status (*upload_layer)(llmkv_cuda_context *ctx, uint32_t layer,
                                      const llmkv_cuda_layer_weights *weights);

    /* Runs one batched forward pass, exactly Forward::run's contract: the spans' KV
     * (tail slot, sealed blocks completed by the span) is written on the device, and
     * logits_host receives one n_vocab row of f32 per span with want_logits (n rows with
     * all_logits), in span order. Validates everything first (INVALID changes nothing).
     * Synchronous: returns when the logits are on the host. The caller advances its
     * n_tokens. logits_host may be NULL when no span wants logits. */
    llmkv_cuda_status (*forward)(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                                 uint32_t n_spans, float *logits_host);

    /* Synchronous copies between the device KV pools and host memory (any host memory),
     * ordered after every forward and async copy submitted before. Sizes are the
     * sealed_block_bytes / tail_block_bytes of the kv desc. */
    llmkv_cuda_status (*read_block)(llmkv_cuda_context *ctx, uint32_t block, void *host);
    llmkv_cuda_status (*write_block)(llmkv_cuda_context *ctx, uint32_t block, const void *host);
    llmkv_cuda_status (*read_tail)(llmkv_cuda_context *ctx, uint32_t slot, void *host);
    llmkv_cuda_status (*write_tail)(llmkv_cuda_context *ctx, uint32_t slot, const void *host);
    /* Device-to-device copy of a whole tail slot (fork / prefix share), stream-ordered. */
    llmkv_cuda_status (*copy_tail)(llmkv_cuda_context *ctx, uint32_t from, uint32_t to);

    /* Asynchronous sealed-block copies on the context's copy stream (host tier offload and
     * onboard). host[i] should be pinned (host_alloc) for the copy to overlap compute.
     * A read starts after every forward submitted before it (it sees their writes); every
     * later forward and synchronous copy waits for writes submitted before it. The caller
     * must keep the block ids and host buffers untouched until the ticket completes.
     * *ticket identifies the batch of copies (tickets increase; 0 is never used). */
    llmkv_cuda_status (*read_blocks_async)(llmkv_cuda_context *ctx, const uint32_t *blocks,
                                           uint32_t n, void *const *host, uint64_t *ticket);
    llmkv_cuda_status (*write_blocks_async)(llmkv_cuda_context *ctx, const uint32_t *blocks,
                                            uint32_t n, const void *const *host, uint64_t *ticket);
    /* LLMKV_CUDA_OK when the ticket's copies are complete, LLMKV_CUDA_NOT_READY if not. */
    llmkv_cuda_status (*copy_query)(llmkv_cuda_context *ctx, uint64_t ticket);
    llmkv_cuda_status (*copy_wait)(llmkv_cuda_context *ctx, uint64_t ticket);

    /* Pinned host memory (cudaHostAlloc, portable) for the host tier. host_free(NULL) is
     * fine. Memory must be freed before destroy(ctx). */
    llmkv_cuda_status (*host_alloc)(llmkv_cuda_context *ctx, uint64_t bytes, void **out);
    void (*host_free)(llmkv_cuda_context *ctx, void *p);

    /* The sticky device error (LLMKV_CUDA_OK while healthy) and the message of the last
     * failing call on this context ("" if none). The string lives until the next call. */
    llmkv_cuda_status (*sticky_error)(const llmkv_cuda_context *ctx);
    const char *(*last_error)(const llmkv_cuda_context *ctx);
    /* Device bytes held by the context: weights, KV pools, everything else. */
    llmkv_cuda_status (*memory_usage)(const llmkv_cuda_context *ctx, uint64_t *weight_bytes,
                                      uint64_t *kv_bytes, uint64_t *other_bytes);
} llmkv_cuda_api;

typedef const llmkv_cuda_api *(*llmkv_cuda_get_api_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* LLMKV_CUDA_MODULE_H */
