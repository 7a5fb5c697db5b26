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
 *  - Device memory is allocated in create (KV pools, per-batch tables, workspaces) and in the
 *    set-up calls (upload_matrix, upload_vector, alloc_activation); the ops of a batch
 *    allocate nothing, except begin_batch when a batch's block tables exceed every earlier
 *    batch's (the tables then double; a failed growth changes nothing).
 *
 * Level of the ABI (version 3: version 2 plus the sliding window of attention and the ops
 * add_bias, scale, geglu; version 5: the collectives of tensor-parallel ranks; version 6: the
 * KV sink and layer groups, llmkv_cuda_kv_desc's and llmkv_cuda_span's last fields; version 7:
 * the mixture-of-experts ops route_experts, matmul_experts, combine_experts and mul_sigmoid,
 * which synchronize once per layer to pick experts on the host; version 8: gpt-oss's
 * attention_sinks, swiglu_oai, add_expert_bias and LLMKV_CUDA_MOE_SOFTMAX_CHOSEN): OPERATIONS,
 * not a model. The architecture's forward pass is
 * written once in libllmkv (src/model/arch/) against the Backend interface
 * (src/backend/backend.h); the module executes its ops on the device. One batch is
 *     begin_batch (spans: tokens, positions, block tables, tail slots, logit rows)
 *     embed / rms_norm / matmul / rope / write_kv / attention / add / add_bias / scale /
 *     swiglu / geglu / gather_logit_rows ...   queued on the compute stream, no host
 *                                  synchronization
 *     logits                       the only op that synchronizes (f32 rows to host memory)
 *     end_batch
 * Activations are device buffers of f32 rows (alloc_activation), named by
 * llmkv_cuda_tensor {data, rows, cols}; an op checks that every tensor lies inside one
 * buffer from alloc_activation. Weights are handles returned by upload_matrix (fp16 on the
 * device; upload_matrix_packed decodes GGUF rows to it on the device), upload_matrix_quantized
 * (GGUF rows kept as they are) and upload_vector (f32). write_kv(layer) builds the layer's
 * fp16 window of every span; attention(layer) must follow it for the same layer before the
 * next write_kv.
 *
 * KV layouts are EXACTLY those of src/kv/kv_layout.h (KvGeometry) and src/kv/codec.h
 * (sealed blocks of sealed_block_bytes, tail slots of tail_block_bytes), so read_block /
 * write_block move the same bytes the CPU backend stores: snapshots and the host tier are
 * backend-independent.
 */
#ifndef LLMKV_CUDA_MODULE_H
#define LLMKV_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLMKV_CUDA_ABI_VERSION 8u
/* File stem of the module: libllmkv-cuda.so on Linux, llmkv-cuda.dll on Windows
 * (os::shared_library_file). */
#define LLMKV_CUDA_MODULE_STEM "llmkv-cuda"
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

/* The KV store: KvGeometry (src/kv/kv_layout.h) plus the pool sizes, as plain C. Built
 * from a KvGeometry in one place on each side (CudaBackend, module.cpp: geometry_of). The
 * module recomputes both byte sizes from the geometry and rejects a mismatch (a cheap
 * layout-agreement check). */
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
    /* Version 6. KV sink (KvGeometry::sink): 1 = each tail head has one row more, holding
     * position 0's K / V in fp16 (written by the write_kv of a span with pos0 == 0); attention
     * reads position 0 there instead of sealed block 0. */
    uint32_t sink;
    /* Layer groups (KvGeometry::window / n_groups / group_layers / local_mask): n_groups 1 =
     * none (the other three 0). With groups, llmkv_cuda_span.local_blocks holds each sealed
     * token block's local-group blocks. */
    uint32_t window;
    uint32_t n_groups;
    uint32_t group_layers;
    uint64_t local_mask[2];
} llmkv_cuda_kv_desc;

/* Limits of one context. */
typedef struct llmkv_cuda_context_params {
    uint32_t struct_size;               /* sizeof(llmkv_cuda_context_params) */
    int32_t device;                     /* CUDA ordinal */
    uint32_t max_batch_tokens;          /* most tokens (sum of span n) in one batch */
    uint32_t max_spans;                 /* most spans in one batch; 0 = max_batch_tokens */
    uint64_t attention_workspace_bytes; /* split-context partial results; 0 = 128 MiB */
    /* Version 4: 1 = every matmul / logits product, whatever its number of rows and however
     * its matrix is stored, runs the matvec kernel (launches of 8 rows; fp16 matrices read as
     * F16 rows): a row's outputs then depend only on its own inputs, so a session's results
     * are bitwise independent of batching and chunking, at the price of prefill reading the
     * weights once per 8 rows. 0 = cuBLAS for prefill-sized products (see
     * upload_matrix_quantized). */
    uint32_t batch_invariant;
} llmkv_cuda_context_params;

/* A block id of llmkv_cuda_span.blocks that names a block in host memory (host_blocks). */
#define LLMKV_CUDA_HOST_BLOCK 0xffffffffu
/* A local_blocks entry whose block was released (SessionKv::kReleased). */
#define LLMKV_CUDA_RELEASED_BLOCK 0xfffffffeu

/* Bytes of a communicator id (comm_unique_id, comm_init): NCCL's ncclUniqueId. */
#define LLMKV_CUDA_COMM_ID_BYTES 128u

/* One span of a batch: consecutive tokens of one session (ForwardSpan). */
typedef struct llmkv_cuda_span {
    const uint32_t *blocks; /* host: the session's sealed block ids in position order;
                               LLMKV_CUDA_HOST_BLOCK for a block read from host memory */
    uint32_t n_blocks;      /* >= sealed_blocks(pos0 + n) (blocks past it are ignored) */
    uint32_t tail_slot;     /* the session's tail slot */
    uint32_t pos0;          /* tokens already computed (= SessionKv::n_tokens) */
    const int32_t *tokens;  /* host: n token ids */
    uint32_t n;             /* > 0 */
    uint32_t want_logits;   /* 0/1: logits for the span's last token */
    uint32_t all_logits;    /* 0/1: with want_logits, logits for every token of the span */
    /* Version 4. host_blocks[b] for each b whose blocks[b] is LLMKV_CUDA_HOST_BLOCK: the
     * block's sealed_block_bytes in memory from host_alloc (mapped: the attention kernels
     * read it in place over the bus, layer by layer as they need it, like the CPU backend
     * reads host-tier blocks); NULL when the span has none. A host block never is one the
     * batch seals. The bytes must stay until the batch's work is done (end_batch and the
     * next synchronizing call). */
    const void *const *host_blocks;
    /* Version 6, with layer groups (n_groups > 1): local_blocks[j * (n_groups - 1) + (g - 1)]
     * is token block j's block of local group g (SessionKv::local), for j < sealed_blocks(pos0
     * + n); entries of token blocks before local_live_from(pos0) (KvGeometry) may be released
     * (LLMKV_CUDA_RELEASED_BLOCK: no query of the span can see them). Every other id names a
     * pool block (no host blocks with groups). NULL without groups. */
    const uint32_t *local_blocks;
} llmkv_cuda_span;

/* An activation: rows x cols f32 values, row-major (row stride = cols), at a device address
 * inside a buffer from alloc_activation. */
typedef struct llmkv_cuda_tensor {
    void *data;
    uint32_t rows;
    uint32_t cols;
} llmkv_cuda_tensor;

/* A weight on the device: a matrix (upload_matrix) or a vector (upload_vector); 0 is never
 * a valid handle. Handles live as long as the context. */
typedef uint32_t llmkv_cuda_weight;

/* Pair styles of rope(). */
#define LLMKV_CUDA_ROPE_ADJACENT 0u /* (v[2i], v[2i+1]): GGUF Llama q/k */
#define LLMKV_CUDA_ROPE_HALVES 1u   /* (v[i], v[i + rope_dim/2]): NeoX */

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

    /* ---- set-up ---------------------------------------------------------------------- */
    /* Creates a context: the KV pools (cudaMalloc, never managed memory; contents zeroed),
     * the per-batch tables for params->max_batch_tokens / max_spans, the KV window, the
     * attention / cuBLAS / logits workspaces. OUT_OF_MEMORY when the device cannot hold it
     * all (nothing is left allocated). *out is NULL on failure. */
    llmkv_cuda_status (*create)(const llmkv_cuda_kv_desc *kv,
                                const llmkv_cuda_context_params *params, llmkv_cuda_context **out,
                                char *err, size_t err_cap);
    /* Frees everything (waits for in-flight work). NULL is fine. */
    void (*destroy)(llmkv_cuda_context *ctx);
    /* Copies a weight matrix to the device: fp16 (IEEE binary16 bit patterns) row-major
     * [rows][cols], row r = output feature r; HOST memory, read only during the call.
     * Synchronous. */
    llmkv_cuda_status (*upload_matrix)(llmkv_cuda_context *ctx, const uint16_t *host, uint32_t rows,
                                       uint32_t cols, llmkv_cuda_weight *out);
    /* Copies an f32 vector of n values (norm weights, rope frequencies) to the device. */
    llmkv_cuda_status (*upload_vector)(llmkv_cuda_context *ctx, const float *host, uint32_t n,
                                       llmkv_cuda_weight *out);
    /* A zeroed device buffer of rows x cols f32 (rows <= max_batch_tokens). */
    llmkv_cuda_status (*alloc_activation)(llmkv_cuda_context *ctx, uint32_t rows, uint32_t cols,
                                          llmkv_cuda_tensor *out);

    /* ---- one batch (ops run in call order on the compute stream) ----------------------- */
    /* Validates the spans (tail slots distinct and in range, block ids in range and enough
     * of them, host blocks inside memory from host_alloc and not sealed by this batch,
     * token ids >= 0, at most max_batch_tokens / max_spans; INVALID changes nothing
     * and leaves no batch open) and uploads the batch's tables once: tokens, positions,
     * row -> span, block tables, seal jobs, logit rows. *n_tokens / *n_logit_rows (may be
     * NULL) receive the batch's row counts. A batch still open is replaced. */
    llmkv_cuda_status (*begin_batch)(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                                     uint32_t n_spans, uint32_t *n_tokens, uint32_t *n_logit_rows);
    /* out (T, cols) = rows of matrix `table` for the batch's tokens (T = the batch's tokens;
     * the table's cols = out.cols; INVALID, before any work, if a token id >= the table's
     * rows). */
    llmkv_cuda_status (*embed)(llmkv_cuda_context *ctx, llmkv_cuda_weight table,
                               llmkv_cuda_tensor out);
    /* out[t] = x[t] * weight / sqrt(mean(x[t]^2) + eps) for x.rows rows; weight a vector of
     * x.cols. out may equal x. */
    llmkv_cuda_status (*rms_norm)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                  llmkv_cuda_weight weight, float eps, llmkv_cuda_tensor out);
    /* y (x.rows, w.rows) = x * w^T (cuBLAS: x rounded to fp16, fp16 weights, f32
     * accumulation and output; a matrix of upload_matrix_quantized: see there). y must not
     * overlap x. */
    llmkv_cuda_status (*matmul)(llmkv_cuda_context *ctx, llmkv_cuda_weight w, llmkv_cuda_tensor x,
                                llmkv_cuda_tensor y);
    /* Rotates the first n_heads heads (head_dim wide) of each row r < x.rows at the batch
     * position of row r: pair i < rope_dim / 2 by pos * freq_scale * inv_freq[i];
     * inv_freq a vector of rope_dim / 2; style LLMKV_CUDA_ROPE_*. */
    llmkv_cuda_status (*rope)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, uint32_t n_heads,
                              uint32_t head_dim, uint32_t rope_dim, uint32_t style,
                              float freq_scale, llmkv_cuda_weight inv_freq);
    /* Layer `layer`'s K and V (T, n_kv_heads * head_dim) into the KV store: builds each
     * span's fp16 window (tail rows + the new rows), seals the blocks the span completes
     * into the sealed pool, writes the rows that stay unsealed back to the tail slot. */
    llmkv_cuda_status (*write_kv)(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor k,
                                  llmkv_cuda_tensor v);
    /* Causal paged attention of q (T, n_heads * head_dim) over each span's sealed blocks and
     * window of `layer` (the layer of the last write_kv of this batch) -> out (T, n_heads *
     * head_dim). window 0: the query at position p sees positions <= p; window W > 0
     * (sliding window): positions j with p - W < j <= p, and sealed blocks wholly before
     * p - W + 1 are not read. UNSUPPORTED when the attention workspace cannot hold one row's
     * context. */
    llmkv_cuda_status (*attention)(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                   uint32_t n_heads, float scale, uint32_t window,
                                   llmkv_cuda_tensor out);
    /* x += y, elementwise over x.rows rows (same shapes). */
    llmkv_cuda_status (*add)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, llmkv_cuda_tensor y);
    /* gate = silu(gate) * up, elementwise over gate.rows rows (same shapes). */
    llmkv_cuda_status (*swiglu)(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                                llmkv_cuda_tensor up);
    /* out's first n_logit_rows rows = the rows of x whose logits the batch wants, in span
     * order (same cols). */
    llmkv_cuda_status (*gather_logit_rows)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                           llmkv_cuda_tensor out);
    /* host (x.rows, w.rows) f32 = x * w^T, in chunks through a device buffer; returns when
     * the rows are in host memory (synchronizes the compute stream). */
    llmkv_cuda_status (*logits)(llmkv_cuda_context *ctx, llmkv_cuda_weight w, llmkv_cuda_tensor x,
                                float *host);
    /* Closes the batch (queued work keeps running; later calls are ordered after it). */
    llmkv_cuda_status (*end_batch)(llmkv_cuda_context *ctx);

    /* ---- KV copies ----------------------------------------------------------------------- */
    /* Synchronous copies between the device KV pools and host memory (any host memory),
     * ordered after every op and async copy submitted before. Sizes are the
     * sealed_block_bytes / tail_block_bytes of the kv desc. */
    llmkv_cuda_status (*read_block)(llmkv_cuda_context *ctx, uint32_t block, void *host);
    llmkv_cuda_status (*write_block)(llmkv_cuda_context *ctx, uint32_t block, const void *host);
    llmkv_cuda_status (*read_tail)(llmkv_cuda_context *ctx, uint32_t slot, void *host);
    llmkv_cuda_status (*write_tail)(llmkv_cuda_context *ctx, uint32_t slot, const void *host);
    /* Device-to-device copy of a whole tail slot (fork / prefix share), stream-ordered. */
    llmkv_cuda_status (*copy_tail)(llmkv_cuda_context *ctx, uint32_t from, uint32_t to);

    /* Asynchronous sealed-block copies on the context's copy stream (host tier offload and
     * onboard). host[i] should be pinned (host_alloc) for the copy to overlap compute.
     * A read starts after every op submitted before it (it sees their writes); every later
     * op and synchronous copy waits for writes submitted before it. The caller must keep
     * the block ids and host buffers untouched until the ticket completes. *ticket
     * identifies the batch of copies (tickets increase; 0 is never used). */
    llmkv_cuda_status (*read_blocks_async)(llmkv_cuda_context *ctx, const uint32_t *blocks,
                                           uint32_t n, void *const *host, uint64_t *ticket);
    llmkv_cuda_status (*write_blocks_async)(llmkv_cuda_context *ctx, const uint32_t *blocks,
                                            uint32_t n, const void *const *host, uint64_t *ticket);
    /* LLMKV_CUDA_OK when the ticket's copies are complete, LLMKV_CUDA_NOT_READY if not. */
    llmkv_cuda_status (*copy_query)(llmkv_cuda_context *ctx, uint64_t ticket);
    llmkv_cuda_status (*copy_wait)(llmkv_cuda_context *ctx, uint64_t ticket);

    /* Pinned host memory (cudaHostAlloc, portable and mapped: the device reads it in place,
     * see llmkv_cuda_span.host_blocks) for the host tier. host_free(ctx or NULL,
     * p) is fine with p NULL; it needs no context (portable memory), so memory may outlive
     * the context that allocated it. */
    llmkv_cuda_status (*host_alloc)(llmkv_cuda_context *ctx, uint64_t bytes, void **out);
    void (*host_free)(llmkv_cuda_context *ctx, void *p);

    /* The sticky device error (LLMKV_CUDA_OK while healthy) and the message of the last
     * failing call on this context ("" if none). The string lives until the next call. */
    llmkv_cuda_status (*sticky_error)(const llmkv_cuda_context *ctx);
    const char *(*last_error)(const llmkv_cuda_context *ctx);
    /* Device bytes held by the context: weights, KV pools, everything else. */
    llmkv_cuda_status (*memory_usage)(const llmkv_cuda_context *ctx, uint64_t *weight_bytes,
                                      uint64_t *kv_bytes, uint64_t *other_bytes);

    /* ---- ops added in version 3 (same rules as the ops above) -------------------------- */
    /* x[t] += bias for x.rows rows; bias a vector of x.cols (Qwen2's q/k/v biases). */
    llmkv_cuda_status (*add_bias)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                  llmkv_cuda_weight bias);
    /* x *= s, elementwise over x.rows rows (Gemma's embedding scale). */
    llmkv_cuda_status (*scale)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float s);
    /* gate = gelu_tanh(gate) * up, elementwise over gate.rows rows (same shapes), with
     * gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's GeGLU). */
    llmkv_cuda_status (*geglu)(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                               llmkv_cuda_tensor up);
    /* ---- also version 3: packed weight upload ------------------------------------------ */
    /* A weight matrix in its GGUF encoding, decoded on the device to the fp16 matrix that
     * upload_matrix would hold: `type` a GGML type id (src/tensor/tensor_type.h: F32, F16,
     * BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K); rows
     * packed rows of row_bytes bytes each (row r at host + r * row_bytes, cols elements, a
     * whole number of the type's blocks), HOST memory read only during the call. Each value
     * is dequantize_row_reference's f32 value rounded with fp32_to_fp16, bit for bit. The
     * rows go up through a device staging buffer of at most 64 MiB. UNSUPPORTED, with
     * nothing kept, for a type without a device decoder or when a finite value is beyond
     * the fp16 range (the message names the value, its row and column); INVALID when
     * row_bytes does not match type and cols. Synchronous. */
    llmkv_cuda_status (*upload_matrix_packed)(llmkv_cuda_context *ctx, uint32_t type,
                                              const void *host, uint32_t rows, uint32_t cols,
                                              uint64_t row_bytes, llmkv_cuda_weight *out);
    /* ---- version 4: weights kept in their GGUF encoding ------------------------------------ */
    /* A weight matrix kept on the device as its packed GGUF rows (the file's bytes: 0.56
     * bytes per parameter for Q4_K instead of fp16's 2), same arguments and errors as
     * upload_matrix_packed (every row is decoded once here to refuse a value beyond fp16).
     * The ops read it where they read an fp16 matrix:
     *  - matmul / logits with at most 32 activation rows (decode steps): the f32 rows times
     *    the exact weights, straight from the packed rows (kernels/matvec_q.cu: one FMA chain
     *    per lane, a fixed butterfly; a row's result does not depend on the other rows);
     *  - more rows (prefill): row chunks decoded to fp16 (the values upload_matrix_packed
     *    would hold) into a scratch of at most 64 MiB, one cuBLAS GEMM per chunk;
     *  - embed: the rows decoded to f32 (the CPU reference's values, not rounded to fp16).
     * The scratch (other_bytes) grows with the first uploads. Synchronous. */
    llmkv_cuda_status (*upload_matrix_quantized)(llmkv_cuda_context *ctx, uint32_t type,
                                                 const void *host, uint32_t rows, uint32_t cols,
                                                 uint64_t row_bytes, llmkv_cuda_weight *out);
    /* ---- version 5: tensor-parallel ranks ------------------------------------------------ */
    /* Activation rows to / from host memory (x.rows x x.cols f32), ordered after every op
     * submitted before; synchronous. The rank collectives without NCCL (ranks sharing a
     * device, or NCCL missing) go through these and the host communicator. */
    llmkv_cuda_status (*read_activation)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float *host);
    llmkv_cuda_status (*write_activation)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                          const float *host);
    /* A new NCCL communicator id (ncclGetUniqueId) for comm_init, made by rank 0 and sent to
     * the others by the host. The module loads NCCL (libnccl.so.2, the CUDA toolkit's) on the
     * first call: a single-device install needs no NCCL. NO_DEVICE with the reason in err
     * when NCCL cannot be loaded. */
    llmkv_cuda_status (*comm_unique_id)(uint8_t id[LLMKV_CUDA_COMM_ID_BYTES], char *err,
                                        size_t err_cap);
    /* Everything of joining a communicator that can fail on one rank alone: loads NCCL and
     * allocates the all-gather buffer for n_ranks ranks (all_reduce_sum runs in chunks of
     * min(max_elements, 4 Mi) floats per rank). The ranks agree that every one prepared
     * before any calls comm_init, which waits for all of them. */
    llmkv_cuda_status (*comm_prepare)(llmkv_cuda_context *ctx, uint32_t n_ranks,
                                      uint64_t max_elements);
    /* Joins the prepared context to communicator `id` as rank `rank` of n_ranks (the
     * n_ranks of comm_prepare) with ncclCommInitRank: every rank calls it at the same time,
     * from its own thread or process, each on its own device; it returns when all have
     * joined (a rank that never calls it leaves the others waiting, as in any NCCL program).
     * A context joins once. */
    llmkv_cuda_status (*comm_init)(llmkv_cuda_context *ctx,
                                   const uint8_t id[LLMKV_CUDA_COMM_ID_BYTES], uint32_t n_ranks,
                                   uint32_t rank);
    /* x = the sum of x over the communicator's ranks, added in rank order (rank 0 + rank 1 +
     * ...: an NCCL all-gather of every rank's x, then one kernel summing the copies in that
     * order, chunk by chunk), so that every rank holds the same bits, run after run — a ring
     * or tree all-reduce promises neither. Queued on the compute stream; every rank must call
     * it in the same order with the same shape. INVALID without comm_init. */
    llmkv_cuda_status (*all_reduce_sum)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x);
    /* ---- version 7: mixture-of-experts layers --------------------------------------------- */
    /* routes (T x 2 n_used, T = logits.rows) = for each row of logits (T x n_expert, a token's
     * router logits) the ids of its n_used experts (exact as floats), best first, then their
     * weights: chosen on the host by libllmkv's own routing (src/tensor/expert_routing.h,
     * softmax (LLMKV_CUDA_MOE_SOFTMAX_CHOSEN: the n_used highest logits, then the softmax
     * over them), top n_used, ties to the lower id, divided by their sum with
     * LLMKV_CUDA_MOE_NORM_WEIGHTS, times weight_scale) after copying the logits back, so the
     * experts and weights are bitwise the CPU backend's for the same logits. Synchronizes the
     * compute stream (once per layer); the routes stay known to the host for matmul_experts. */
    llmkv_cuda_status (*route_experts)(llmkv_cuda_context *ctx, llmkv_cuda_tensor logits,
                                       uint32_t n_expert, uint32_t n_used, uint32_t flags,
                                       float weight_scale, llmkv_cuda_tensor routes);
    /* For token t of routes (T rows) and its i-th expert e: row t n_used + i of y
     * (T n_used x rows of the experts) = x_row . experts[e]^T, x_row = x[t] when x.rows == T,
     * x[t n_used + i] when x.rows == T n_used. experts[e] == 0: the expert is held by another
     * rank, its rows of y are zero. The rows routed to one expert are gathered and multiplied
     * together (the matmul path of their count), then scattered back. Reads the host's copy
     * of the routes when routes is the output of the last route_experts (with no
     * write_activation or begin_batch since: no op may write that tensor in between), else
     * copies them back first. */
    llmkv_cuda_status (*matmul_experts)(llmkv_cuda_context *ctx, const llmkv_cuda_weight *experts,
                                        uint32_t n_expert, llmkv_cuda_tensor x,
                                        llmkv_cuda_tensor routes, uint32_t n_used,
                                        llmkv_cuda_tensor y);
    /* out[t] = sum over i < n_used, in that order, of routes[t][n_used + i] * y[t n_used + i]
     * (rounded multiplies and adds, bitwise the CPU's). */
    llmkv_cuda_status (*combine_experts)(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                         llmkv_cuda_tensor routes, uint32_t n_used,
                                         llmkv_cuda_tensor out);
    /* x[t] *= 1 / (1 + e^-g[t][0]) (g: x.rows x 1). */
    llmkv_cuda_status (*mul_sigmoid)(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                     llmkv_cuda_tensor g);
    /* ---- version 8: gpt-oss ------------------------------------------------------------- */
    /* attention with learned sinks: sinks a vector of n_heads logits (upload_vector), head
     * h's joining every softmax of the head unscaled and weighing no value: out = sum_j
     * e^(scale q.k_j) v_j / (sum_j e^(scale q.k_j) + e^sinks[h]) (added in the partitions'
     * merge). INVALID when sinks is not a vector of n_heads values. */
    llmkv_cuda_status (*attention_sinks)(llmkv_cuda_context *ctx, uint32_t layer,
                                         llmkv_cuda_tensor q, uint32_t n_heads, float scale,
                                         uint32_t window, llmkv_cuda_weight sinks,
                                         llmkv_cuda_tensor out);
    /* gpt-oss's clamped SwiGLU over gate.rows rows (same shapes): with x = min(gate, limit)
     * and y = clamp(up, -limit, limit), gate = x / (1 + e^(-alpha x)) * (y + 1). */
    llmkv_cuda_status (*swiglu_oai)(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                                    llmkv_cuda_tensor up, float alpha, float limit);
    /* Row t n_used + i of y (T n_used rows, T = routes.rows) += bias[e], e the i-th expert of
     * token t in routes; bias[e] a vector of y.cols values, or 0 (another rank's expert, or
     * none: nothing added). Reads the host's copy of the routes as matmul_experts does. */
    llmkv_cuda_status (*add_expert_bias)(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                         llmkv_cuda_tensor routes, uint32_t n_used,
                                         const llmkv_cuda_weight *bias, uint32_t n_expert);
} llmkv_cuda_api;

/* route_experts flags. */
#define LLMKV_CUDA_MOE_NORM_WEIGHTS 1u
/* gpt-oss: the n_used highest logits, weighed by the softmax over those n_used only. */
#define LLMKV_CUDA_MOE_SOFTMAX_CHOSEN 2u

typedef const llmkv_cuda_api *(*llmkv_cuda_get_api_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* LLMKV_CUDA_MODULE_H */
