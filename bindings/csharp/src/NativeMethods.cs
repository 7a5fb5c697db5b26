// NativeMethods.cs - the raw layer of the llmkv C# binding: one DllImport per LLMKV_API
// function of include/llmkv.h, structs laid out exactly as the header's, and the header's
// constants under their C names. Names mirror the C header on purpose (the ABI test maps
// them one to one). Handles are IntPtr here; the idiomatic layer (Llmkv.cs) wraps them in
// SafeHandles.
//
// Marshalling rules, so the marshaller never interferes:
//  - every argument and struct is blittable (IntPtr, integers, floats, byte[]/int[] arrays
//    that are pinned, not copied), except llmkv_engine_info's char arrays (ByValArray);
//  - strings go in as NUL-terminated UTF-8 byte arrays and come back as IntPtr decoded by
//    hand (the library owns them: a string return type would make the marshaller free them);
//  - SetLastError = false: the library's detail message is llmkv_last_error(), read on the
//    same thread right after the failing call (see Llmkv.Check).
// Written for C# 7.3 / netstandard2.0 (no unsafe code, no LPUTF8Str).
using System;
using System.Runtime.InteropServices;

namespace Llmkv.Native
{
    /// <summary>0.5: tensor parallelism across processes, how the ranks exchange bytes. The
    /// callbacks are C function pointers (llmkv_tp_broadcast_fn, llmkv_tp_all_gather_fn: from
    /// Marshal.GetFunctionPointerForDelegate, the delegate kept alive while the ranks run).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_tp_transport
    {
        public IntPtr ctx;                 // void *
        public int rank;
        public int size;
        public IntPtr broadcast;           // llmkv_tp_broadcast_fn
        public IntPtr all_gather;          // llmkv_tp_all_gather_fn
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_engine_params
    {
        public uint struct_size;
        public IntPtr model_path;          // const char *
        public int backend;                // llmkv_backend
        public IntPtr devices;             // const int32_t *
        public uint n_devices;
        public uint n_threads;
        public int kv_dtype_k;             // llmkv_kv_dtype
        public int kv_dtype_v;
        public uint kv_block_tokens;
        public ulong kv_device_bytes;
        public ulong kv_host_bytes;
        public uint max_batch_tokens;
        public uint max_context;
        public uint flags;
        public uint max_sessions;
        public uint kv_residual_tokens;
        public int kv_rotation;            // llmkv_kv_rotation
        // 0.4
        public int spin_us;
        public int thread_priority;
        // 0.5
        public uint tp_size;
        public IntPtr tp_transport;        // const llmkv_tp_transport *
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_engine_info
    {
        public uint struct_size;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 128)] public byte[] model_name;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 32)] public byte[] architecture;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 32)] public byte[] backend_name;
        public uint backend;
        public uint n_vocab;
        public uint n_ctx_train;
        public uint max_context;
        public uint n_layers;
        public uint n_embd;
        public uint n_heads;
        public uint n_kv_heads;
        public uint head_dim;
        public uint n_threads;
        public uint kv_block_tokens;
        public uint kv_dtype_k;
        public uint kv_dtype_v;
        public uint tp_size;
        public ulong n_params;
        public ulong weight_bytes;
        public ulong kv_bytes_per_token_device;
        public ulong kv_bytes_per_token_tail;
        public ulong kv_device_bytes;
        public uint kv_blocks_total;
        public uint kv_tail_blocks_total;
        public uint kv_residual_tokens;
        public uint kv_rotate_k;
        public uint kv_rotate_v;
        public int bos_token;
        public int eos_token;
        public int eot_token;
        // 0.2
        public uint n_unrepresentable_bytes;
        // 0.3
        public uint kv_window;
        public uint kv_layer_groups;
        public ulong kv_bytes_per_token_global;
        // 0.5
        public ulong kv_bytes_per_token_rank;
        public ulong weight_bytes_rank;
        // 0.6
        public uint n_expert;
        public uint n_expert_used;
        public ulong n_params_active;
        public ulong weight_bytes_active;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_stats
    {
        public uint struct_size;
        public uint blocks_total;
        public uint blocks_free;
        public uint blocks_cached;
        public uint blocks_used;
        public uint tail_blocks_total;
        public uint tail_blocks_used;
        public uint sessions_total;
        public uint sessions_idle;
        public uint sessions_queued;
        public uint sessions_prefilling;
        public uint sessions_generating;
        public uint sessions_parked;
        public uint sessions_finished;
        public ulong kv_bytes_used;
        public ulong tokens_stored;
        public ulong prefix_hit_tokens;
        public ulong prefix_miss_tokens;
        public ulong bytes_to_host;
        public ulong bytes_to_device;
        public ulong preemptions;
        public ulong tokens_prefilled;
        public ulong tokens_generated;
        public ulong steps;
        public ulong host_bytes_total;
        public ulong host_bytes_used;
        public ulong host_blocks;
        public ulong parks;
        public ulong swaps;
        public ulong resumes;
        public ulong copy_ns;
        public ulong demotions;
        public ulong promotions;
        // 0.2
        public ulong sample_ns;
        public ulong grammar_mask_ns;
        public ulong grammar_masks;
        public ulong grammar_mask_cache_hits;
        // 0.5
        public ulong kv_bytes_used_rank;
        public ulong tp_reduce_ns;
        public ulong tp_reduces;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_chat_message
    {
        public IntPtr role;     // const char *
        public IntPtr content;  // const char *
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_sampling
    {
        public float temperature;
        public int top_k;
        public float top_p;
        public float min_p;
        public float repeat_penalty;
        public ulong seed;
        public int repeat_last_n;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_logit_bias
    {
        public int token;
        public float bias;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_session_params
    {
        public uint struct_size;
        public IntPtr prefix;               // const llmkv_prefix *
        public llmkv_sampling sampling;
        public uint max_new_tokens;
        public IntPtr stop_tokens;          // const int32_t *
        public uint n_stop_tokens;
        public int priority;
        public IntPtr user_data;
        // 0.2
        public IntPtr stop_strings;         // const char *const *
        public IntPtr stop_string_lengths;  // const size_t *
        public uint n_stop_strings;
        public IntPtr logit_bias;           // const llmkv_logit_bias *
        public uint n_logit_bias;
        public uint min_new_tokens;
        public uint grammar_kind;           // llmkv_grammar_kind
        public IntPtr grammar;              // const char *
        public UIntPtr grammar_len;         // size_t
        public IntPtr grammar_root;         // const char *
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_session_info
    {
        public uint struct_size;
        public uint state;
        public uint finish_reason;
        public uint n_tokens;
        public uint n_cached;
        public uint n_generated;
        public uint n_blocks;
        public uint tier;
        public int priority;
        // 0.2
        public int stop_string;
        public uint text_held;
        public uint has_grammar;
        public uint grammar_complete;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct llmkv_event
    {
        public IntPtr session;
        public IntPtr user_data;
        public uint kind;
        public int token;
        public uint finish_reason;
        public int status;
    }

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void llmkv_log_fn(int level, IntPtr message, IntPtr user_data);

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void llmkv_event_fn(IntPtr ev /* const llmkv_event * */, IntPtr user_data);

    /// <summary>0.5: on return every rank's buf (bytes) holds root's; 0 on success.</summary>
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate int llmkv_tp_broadcast_fn(IntPtr ctx, IntPtr buf, UIntPtr bytes, int root);

    /// <summary>0.5: on return every rank's recv (size * bytes) holds each rank's send (bytes),
    /// in rank order; 0 on success.</summary>
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate int llmkv_tp_all_gather_fn(IntPtr ctx, IntPtr send, IntPtr recv, UIntPtr bytes);

    public static class NativeMethods
    {
        public const string Lib = "llmkv";

        // ---- Version
        public const int LLMKV_VERSION_MAJOR = 0;
        public const int LLMKV_VERSION_MINOR = 6;
        public const int LLMKV_VERSION_PATCH = 0;
        public const int LLMKV_VERSION_NUMBER = LLMKV_VERSION_MAJOR * 10000 + LLMKV_VERSION_MINOR * 100 + LLMKV_VERSION_PATCH;

        // ---- Status codes
        public const int LLMKV_OK = 0;
        public const int LLMKV_ERR_INVALID_ARGUMENT = -1;
        public const int LLMKV_ERR_OUT_OF_MEMORY = -2;
        public const int LLMKV_ERR_KV_CAPACITY = -3;
        public const int LLMKV_ERR_IO = -4;
        public const int LLMKV_ERR_MODEL_FORMAT = -5;
        public const int LLMKV_ERR_UNSUPPORTED = -6;
        public const int LLMKV_ERR_BACKEND = -7;
        public const int LLMKV_ERR_STATE = -8;
        public const int LLMKV_ERR_SNAPSHOT_FORMAT = -9;
        public const int LLMKV_ERR_CANCELLED = -10;
        public const int LLMKV_ERR_INTERNAL = -99;

        // ---- Logging
        public const int LLMKV_LOG_ERROR = 0;
        public const int LLMKV_LOG_WARN = 1;
        public const int LLMKV_LOG_INFO = 2;
        public const int LLMKV_LOG_DEBUG = 3;

        // ---- Engine
        public const int LLMKV_BACKEND_AUTO = 0;
        public const int LLMKV_BACKEND_CPU = 1;
        public const int LLMKV_BACKEND_CUDA = 2;
        public const int LLMKV_KV_F16 = 0;
        public const int LLMKV_KV_BF16 = 1;
        public const int LLMKV_KV_FP8_E4M3 = 2;
        public const int LLMKV_KV_INT8 = 3;
        public const int LLMKV_KV_INT4 = 4;
        public const int LLMKV_KV_INT4_COMPACT = 5;
        public const int LLMKV_KV_ROTATION_AUTO = 0;
        public const int LLMKV_KV_ROTATION_NONE = 1;
        public const int LLMKV_KV_ROTATION_K = 2;
        public const int LLMKV_KV_ROTATION_V = 3;
        public const int LLMKV_KV_ROTATION_KV = 4;
        public const uint LLMKV_ENGINE_PREFIX_CACHE = 0x1u;
        public const uint LLMKV_ENGINE_KEEP_WINDOW_BLOCKS = 0x2u;
        public const uint LLMKV_ENGINE_KV_SINK = 0x4u;
        public const uint LLMKV_ENGINE_NO_KV_SINK = 0x8u;

        // ---- Tokens and text
        public const uint LLMKV_TOKENIZE_ADD_BOS = 0x1u;
        public const uint LLMKV_TOKENIZE_PARSE_SPECIAL = 0x2u;
        public const uint LLMKV_TOKENIZE_STRICT = 0x4u;

        // ---- Prefix handles
        public const uint LLMKV_PREFIX_LOAD_SHARE = 0x1u;
        public const uint LLMKV_PREFIX_LOAD_ANY_KERNEL = 0x2u;

        // ---- Sessions
        public const int LLMKV_GRAMMAR_NONE = 0;
        public const int LLMKV_GRAMMAR_GBNF = 1;
        public const int LLMKV_GRAMMAR_JSON_SCHEMA = 2;
        public const int LLMKV_SESSION_IDLE = 0;
        public const int LLMKV_SESSION_QUEUED = 1;
        public const int LLMKV_SESSION_PREFILLING = 2;
        public const int LLMKV_SESSION_GENERATING = 3;
        public const int LLMKV_SESSION_PARKED = 4;
        public const int LLMKV_SESSION_FINISHED = 5;
        public const int LLMKV_FINISH_NONE = 0;
        public const int LLMKV_FINISH_STOP = 1;
        public const int LLMKV_FINISH_LENGTH = 2;
        public const int LLMKV_FINISH_CANCELLED = 3;
        public const int LLMKV_FINISH_CONTEXT = 4;
        public const int LLMKV_FINISH_CONSTRAINT = 5;
        public const int LLMKV_TIER_DEVICE = 0;
        public const int LLMKV_TIER_HOST = 1;
        public const int LLMKV_TIER_MIXED = 2;

        // ---- Stepping
        public const int LLMKV_EVENT_TOKEN = 1;
        public const int LLMKV_EVENT_DONE = 2;
        public const int LLMKV_EVENT_ERROR = 3;

        // ---- Worker
        public const uint LLMKV_SUBMIT_GENERATE = 0x1u;

        // ---- Functions (size_t is UIntPtr; const char * arguments are NUL-terminated UTF-8
        // byte arrays unless a length goes with them)

        [DllImport(Lib, EntryPoint = "llmkv_version", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_version();
        [DllImport(Lib, EntryPoint = "llmkv_version_string", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern IntPtr llmkv_version_string();
        [DllImport(Lib, EntryPoint = "llmkv_status_string", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern IntPtr llmkv_status_string(int status);
        [DllImport(Lib, EntryPoint = "llmkv_last_error", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern IntPtr llmkv_last_error();
        [DllImport(Lib, EntryPoint = "llmkv_log_set", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_log_set(llmkv_log_fn fn, IntPtr user_data, int max_level);

        [DllImport(Lib, EntryPoint = "llmkv_engine_params_init", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_engine_params_init(ref llmkv_engine_params p);
        /// <summary>Overload for a caller-sized buffer: a newer library's init writes its own,
        /// larger struct (see Library.InitParams).</summary>
        [DllImport(Lib, EntryPoint = "llmkv_engine_params_init", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_engine_params_init(IntPtr p);
        /// <summary>0.4: fills exactly size bytes (the unsized init fills only the 0.3 struct).</summary>
        [DllImport(Lib, EntryPoint = "llmkv_engine_params_init_sized", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_engine_params_init_sized(ref llmkv_engine_params p, UIntPtr size);
        [DllImport(Lib, EntryPoint = "llmkv_engine_params_init_sized", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_engine_params_init_sized(IntPtr p, UIntPtr size);
        [DllImport(Lib, EntryPoint = "llmkv_engine_create", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_engine_create(ref llmkv_engine_params p, out IntPtr engine);
        /// <summary>0.5: runs rank p.tp_transport->rank (1 or more) of tensor parallelism across
        /// processes until rank 0's engine is destroyed.</summary>
        [DllImport(Lib, EntryPoint = "llmkv_tp_serve", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_tp_serve(ref llmkv_engine_params p);
        [DllImport(Lib, EntryPoint = "llmkv_engine_destroy", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_engine_destroy(IntPtr engine);
        [DllImport(Lib, EntryPoint = "llmkv_engine_get_info", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_engine_get_info(IntPtr engine, ref llmkv_engine_info info);
        [DllImport(Lib, EntryPoint = "llmkv_engine_get_stats", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_engine_get_stats(IntPtr engine, ref llmkv_stats stats);
        [DllImport(Lib, EntryPoint = "llmkv_engine_validate", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_engine_validate(IntPtr engine);

        [DllImport(Lib, EntryPoint = "llmkv_tokenize", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_tokenize(IntPtr engine, byte[] text, UIntPtr len, uint flags,
                                                [Out] int[] tokens, UIntPtr capacity, out UIntPtr n_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_detokenize", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_detokenize(IntPtr engine, int[] tokens, UIntPtr n,
                                                  [Out] byte[] buf, UIntPtr capacity, out UIntPtr n_bytes);
        [DllImport(Lib, EntryPoint = "llmkv_chat_format", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_chat_format(IntPtr engine, [In] llmkv_chat_message[] msgs, UIntPtr n,
                                                   int add_generation_prompt, [Out] byte[] buf, UIntPtr capacity,
                                                   out UIntPtr n_bytes);

        [DllImport(Lib, EntryPoint = "llmkv_prefix_create", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_prefix_create(IntPtr engine, int[] tokens, UIntPtr n, out IntPtr prefix);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_save", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_prefix_save(IntPtr prefix, byte[] path);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_load", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_prefix_load(IntPtr engine, byte[] path, out IntPtr prefix);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_load_ex", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_prefix_load_ex(IntPtr engine, byte[] path, uint flags, out IntPtr prefix);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_n_tokens", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern UIntPtr llmkv_prefix_n_tokens(IntPtr prefix);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_get_tokens", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_prefix_get_tokens(IntPtr prefix, [Out] int[] tokens, UIntPtr capacity, out UIntPtr n_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_prefix_release", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_prefix_release(IntPtr prefix);

        [DllImport(Lib, EntryPoint = "llmkv_session_params_init", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_session_params_init(ref llmkv_session_params p);
        [DllImport(Lib, EntryPoint = "llmkv_session_params_init", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_session_params_init(IntPtr p);
        [DllImport(Lib, EntryPoint = "llmkv_session_params_init_sized", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_session_params_init_sized(ref llmkv_session_params p, UIntPtr size);
        [DllImport(Lib, EntryPoint = "llmkv_session_params_init_sized", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_session_params_init_sized(IntPtr p, UIntPtr size);
        [DllImport(Lib, EntryPoint = "llmkv_session_create", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_create(IntPtr engine, ref llmkv_session_params p, out IntPtr session);
        [DllImport(Lib, EntryPoint = "llmkv_session_append", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_append(IntPtr session, int[] tokens, UIntPtr n);
        [DllImport(Lib, EntryPoint = "llmkv_session_append_text", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_append_text(IntPtr session, byte[] text, UIntPtr len);
        [DllImport(Lib, EntryPoint = "llmkv_session_generate", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_generate(IntPtr session, uint max_new_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_session_cancel", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_cancel(IntPtr session);
        [DllImport(Lib, EntryPoint = "llmkv_session_park", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_park(IntPtr session);
        [DllImport(Lib, EntryPoint = "llmkv_session_read_text", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_read_text(IntPtr session, [Out] byte[] buf, UIntPtr capacity, out UIntPtr n_bytes);
        [DllImport(Lib, EntryPoint = "llmkv_session_get_info", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_get_info(IntPtr session, ref llmkv_session_info info);
        [DllImport(Lib, EntryPoint = "llmkv_session_get_tokens", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_get_tokens(IntPtr session, [Out] int[] tokens, UIntPtr capacity, out UIntPtr n_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_session_fork", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_fork(IntPtr session, out IntPtr fork);
        [DllImport(Lib, EntryPoint = "llmkv_session_to_prefix", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_to_prefix(IntPtr session, out IntPtr prefix);
        [DllImport(Lib, EntryPoint = "llmkv_session_set_grammar", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_set_grammar(IntPtr session, int kind, byte[] text, UIntPtr len, byte[] root);
        [DllImport(Lib, EntryPoint = "llmkv_session_destroy", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern void llmkv_session_destroy(IntPtr session);

        [DllImport(Lib, EntryPoint = "llmkv_step", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_step(IntPtr engine, [Out] llmkv_event[] events, UIntPtr capacity, out UIntPtr n_events);
        [DllImport(Lib, EntryPoint = "llmkv_pending_events", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern UIntPtr llmkv_pending_events(IntPtr engine);
        /// <summary>Added in 0.4 (after the first 0.4 header): 1 when llmkv_step has something to do.</summary>
        [DllImport(Lib, EntryPoint = "llmkv_engine_has_work", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_engine_has_work(IntPtr engine);
        [DllImport(Lib, EntryPoint = "llmkv_run", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_run(IntPtr engine, llmkv_event_fn on_event, IntPtr user_data);

        [DllImport(Lib, EntryPoint = "llmkv_worker_start", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_worker_start(IntPtr engine);
        [DllImport(Lib, EntryPoint = "llmkv_worker_stop", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_worker_stop(IntPtr engine);
        [DllImport(Lib, EntryPoint = "llmkv_worker_poll", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_worker_poll(IntPtr engine, [Out] llmkv_event[] events, UIntPtr capacity,
                                                   uint timeout_us, out UIntPtr n_events);
        [DllImport(Lib, EntryPoint = "llmkv_session_submit_text", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_submit_text(IntPtr session, byte[] text, UIntPtr len, uint flags, uint max_new_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_session_submit_tokens", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_submit_tokens(IntPtr session, int[] tokens, UIntPtr n, uint flags, uint max_new_tokens);
        [DllImport(Lib, EntryPoint = "llmkv_session_submit_cancel", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_submit_cancel(IntPtr session);
        [DllImport(Lib, EntryPoint = "llmkv_session_submit_error", CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]
        public static extern int llmkv_session_submit_error(IntPtr session, [Out] byte[] buf, UIntPtr capacity, out UIntPtr n_bytes);
    }
}
