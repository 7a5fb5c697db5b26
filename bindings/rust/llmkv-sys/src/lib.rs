//! Raw FFI declarations for libllmkv: `include/llmkv.h` (C API 0.5), written by hand.
//!
//! Everything here mirrors the header one to one: the same names, `#[repr(C)]` structs with
//! the same fields in the same order, the `#define` and enum constants with their values, and
//! every `LLMKV_API` function. The header is the manual: read it for ownership, threading
//! and the status codes each call returns. The safe layer is the `llmkv` crate.
//!
//! Two tables make the declarations checkable against the C compiler's view of the header
//! (`tests/abi.rs` compares them with the output of `bindings/abi/gen_layout.py`):
//! [`CONSTANTS`] lists every constant this crate declares with its value, and
//! [`FUNCTIONS`] every function with its parameter and return types as written here. Both
//! are produced by the same macro invocation that declares the items, so they cannot drift
//! from the declarations.
#![no_std]
#![allow(non_camel_case_types)]

pub use core::ffi::{c_char, c_int, c_void};

/// One declared function: its name and its types as written in this crate
/// (`stringify!` of each parameter type and of the return type; `""` for none).
#[derive(Debug, Clone, Copy)]
pub struct FunctionSig {
    pub name: &'static str,
    pub params: &'static [&'static str],
    pub ret: &'static str,
}

macro_rules! constants {
    ($( $(#[$m:meta])* $name:ident : $ty:ty = $val:expr; )*) => {
        $( $(#[$m])* pub const $name: $ty = $val; )*
        /// Every constant this crate declares, with its value (for the ABI test).
        pub const CONSTANTS: &[(&str, i64)] = &[ $( (stringify!($name), $name as i64) ),* ];
    };
}

macro_rules! functions {
    ($( $(#[$m:meta])* pub fn $name:ident ( $($arg:ident : $aty:ty),* $(,)? ) $(-> $ret:ty)? ; )*) => {
        extern "C" {
            $( $(#[$m])* pub fn $name( $($arg : $aty),* ) $(-> $ret)?; )*
        }
        /// Every function this crate declares, with its types (for the ABI test).
        pub const FUNCTIONS: &[FunctionSig] = &[ $( FunctionSig {
            name: stringify!($name),
            params: &[ $( stringify!($aty) ),* ],
            ret: concat!("" $(, stringify!($ret))?),
        } ),* ];
    };
}

// ---- Types ---------------------------------------------------------------------------

pub type llmkv_status = i32;
/// C enums: 4 bytes, values fit in `u32` (GCC and Clang give these enums `unsigned int`).
pub type llmkv_log_level = u32;
pub type llmkv_backend = u32;
pub type llmkv_kv_dtype = u32;
pub type llmkv_kv_rotation = u32;
pub type llmkv_grammar_kind = u32;
pub type llmkv_session_state = u32;
pub type llmkv_finish_reason = u32;
pub type llmkv_tier = u32;
pub type llmkv_event_kind = u32;

/// Opaque engine handle.
#[repr(C)]
pub struct llmkv_engine {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// Opaque session handle.
#[repr(C)]
pub struct llmkv_session {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// Opaque prefix handle.
#[repr(C)]
pub struct llmkv_prefix {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

pub type llmkv_log_fn =
    Option<unsafe extern "C" fn(level: llmkv_log_level, message: *const c_char, user_data: *mut c_void)>;
pub type llmkv_event_fn = Option<unsafe extern "C" fn(event: *const llmkv_event, user_data: *mut c_void)>;
/// On return every rank's `buf` (`bytes`) holds `root`'s. Added in 0.5.
pub type llmkv_tp_broadcast_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, buf: *mut c_void, bytes: usize, root: i32) -> c_int>;
/// On return every rank's `recv` (`size * bytes`) holds each rank's `send` (`bytes`), in rank
/// order. Added in 0.5.
pub type llmkv_tp_all_gather_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, send: *const c_void, recv: *mut c_void, bytes: usize) -> c_int>;

/// Tensor parallelism across processes: how the ranks exchange bytes. Added in 0.5.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_tp_transport {
    pub ctx: *mut c_void,
    pub rank: i32,
    pub size: i32,
    pub broadcast: llmkv_tp_broadcast_fn,
    pub all_gather: llmkv_tp_all_gather_fn,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_engine_params {
    pub struct_size: u32,
    pub model_path: *const c_char,
    pub backend: llmkv_backend,
    pub devices: *const i32,
    pub n_devices: u32,
    pub n_threads: u32,
    pub kv_dtype_k: llmkv_kv_dtype,
    pub kv_dtype_v: llmkv_kv_dtype,
    pub kv_block_tokens: u32,
    pub kv_device_bytes: u64,
    pub kv_host_bytes: u64,
    pub max_batch_tokens: u32,
    pub max_context: u32,
    pub flags: u32,
    pub max_sessions: u32,
    pub kv_residual_tokens: u32,
    pub kv_rotation: llmkv_kv_rotation,
    // Appended in 0.4.
    pub spin_us: i32,
    pub thread_priority: i32,
    // Appended in 0.5.
    pub tp_size: u32,
    pub tp_transport: *const llmkv_tp_transport,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_engine_info {
    pub struct_size: u32,
    pub model_name: [c_char; 128],
    pub architecture: [c_char; 32],
    pub backend_name: [c_char; 32],
    pub backend: u32,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    pub max_context: u32,
    pub n_layers: u32,
    pub n_embd: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub n_threads: u32,
    pub kv_block_tokens: u32,
    pub kv_dtype_k: u32,
    pub kv_dtype_v: u32,
    pub tp_size: u32,
    pub n_params: u64,
    pub weight_bytes: u64,
    pub kv_bytes_per_token_device: u64,
    pub kv_bytes_per_token_tail: u64,
    pub kv_device_bytes: u64,
    pub kv_blocks_total: u32,
    pub kv_tail_blocks_total: u32,
    pub kv_residual_tokens: u32,
    pub kv_rotate_k: u32,
    pub kv_rotate_v: u32,
    pub bos_token: i32,
    pub eos_token: i32,
    pub eot_token: i32,
    // Appended in 0.2.
    pub n_unrepresentable_bytes: u32,
    // Appended in 0.3.
    pub kv_window: u32,
    pub kv_layer_groups: u32,
    pub kv_bytes_per_token_global: u64,
    // Appended in 0.5.
    pub kv_bytes_per_token_rank: u64,
    pub weight_bytes_rank: u64,
    // Appended in 0.6.
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_params_active: u64,
    pub weight_bytes_active: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct llmkv_stats {
    pub struct_size: u32,
    pub blocks_total: u32,
    pub blocks_free: u32,
    pub blocks_cached: u32,
    pub blocks_used: u32,
    pub tail_blocks_total: u32,
    pub tail_blocks_used: u32,
    pub sessions_total: u32,
    pub sessions_idle: u32,
    pub sessions_queued: u32,
    pub sessions_prefilling: u32,
    pub sessions_generating: u32,
    pub sessions_parked: u32,
    pub sessions_finished: u32,
    pub kv_bytes_used: u64,
    pub tokens_stored: u64,
    pub prefix_hit_tokens: u64,
    pub prefix_miss_tokens: u64,
    pub bytes_to_host: u64,
    pub bytes_to_device: u64,
    pub preemptions: u64,
    pub tokens_prefilled: u64,
    pub tokens_generated: u64,
    pub steps: u64,
    pub host_bytes_total: u64,
    pub host_bytes_used: u64,
    pub host_blocks: u64,
    pub parks: u64,
    pub swaps: u64,
    pub resumes: u64,
    pub copy_ns: u64,
    pub demotions: u64,
    pub promotions: u64,
    // Appended in 0.2.
    pub sample_ns: u64,
    pub grammar_mask_ns: u64,
    pub grammar_masks: u64,
    pub grammar_mask_cache_hits: u64,
    // Appended in 0.5.
    pub kv_bytes_used_rank: u64,
    pub tp_reduce_ns: u64,
    pub tp_reduces: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

/// No `Default`: all-zero is not the library's default (top_p and repeat_penalty are 1
/// there); start from what `llmkv_session_params_init` fills in.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct llmkv_sampling {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: u64,
    pub repeat_last_n: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct llmkv_logit_bias {
    pub token: i32,
    pub bias: f32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_session_params {
    pub struct_size: u32,
    pub prefix: *const llmkv_prefix,
    pub sampling: llmkv_sampling,
    pub max_new_tokens: u32,
    pub stop_tokens: *const i32,
    pub n_stop_tokens: u32,
    pub priority: i32,
    pub user_data: *mut c_void,
    // Appended in 0.2.
    pub stop_strings: *const *const c_char,
    pub stop_string_lengths: *const usize,
    pub n_stop_strings: u32,
    pub logit_bias: *const llmkv_logit_bias,
    pub n_logit_bias: u32,
    pub min_new_tokens: u32,
    pub grammar_kind: u32,
    pub grammar: *const c_char,
    pub grammar_len: usize,
    pub grammar_root: *const c_char,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct llmkv_session_info {
    pub struct_size: u32,
    pub state: u32,
    pub finish_reason: u32,
    pub n_tokens: u32,
    pub n_cached: u32,
    pub n_generated: u32,
    pub n_blocks: u32,
    pub tier: u32,
    pub priority: i32,
    // Appended in 0.2.
    pub stop_string: i32,
    pub text_held: u32,
    pub has_grammar: u32,
    pub grammar_complete: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmkv_event {
    pub session: *mut llmkv_session,
    pub user_data: *mut c_void,
    pub kind: u32,
    pub token: i32,
    pub finish_reason: u32,
    pub status: i32,
}

// ---- Constants -------------------------------------------------------------------------

constants! {
    LLMKV_VERSION_MAJOR: c_int = 0;
    LLMKV_VERSION_MINOR: c_int = 6;
    LLMKV_VERSION_PATCH: c_int = 0;
    /// MAJOR*10000 + MINOR*100 + PATCH of the header this crate mirrors.
    LLMKV_VERSION_NUMBER: c_int = LLMKV_VERSION_MAJOR * 10000 + LLMKV_VERSION_MINOR * 100 + LLMKV_VERSION_PATCH;

    LLMKV_OK: llmkv_status = 0;
    LLMKV_ERR_INVALID_ARGUMENT: llmkv_status = -1;
    LLMKV_ERR_OUT_OF_MEMORY: llmkv_status = -2;
    LLMKV_ERR_KV_CAPACITY: llmkv_status = -3;
    LLMKV_ERR_IO: llmkv_status = -4;
    LLMKV_ERR_MODEL_FORMAT: llmkv_status = -5;
    LLMKV_ERR_UNSUPPORTED: llmkv_status = -6;
    LLMKV_ERR_BACKEND: llmkv_status = -7;
    LLMKV_ERR_STATE: llmkv_status = -8;
    LLMKV_ERR_SNAPSHOT_FORMAT: llmkv_status = -9;
    LLMKV_ERR_CANCELLED: llmkv_status = -10;
    LLMKV_ERR_INTERNAL: llmkv_status = -99;

    LLMKV_LOG_ERROR: llmkv_log_level = 0;
    LLMKV_LOG_WARN: llmkv_log_level = 1;
    LLMKV_LOG_INFO: llmkv_log_level = 2;
    LLMKV_LOG_DEBUG: llmkv_log_level = 3;

    LLMKV_BACKEND_AUTO: llmkv_backend = 0;
    LLMKV_BACKEND_CPU: llmkv_backend = 1;
    LLMKV_BACKEND_CUDA: llmkv_backend = 2;

    LLMKV_KV_F16: llmkv_kv_dtype = 0;
    LLMKV_KV_BF16: llmkv_kv_dtype = 1;
    LLMKV_KV_FP8_E4M3: llmkv_kv_dtype = 2;
    LLMKV_KV_INT8: llmkv_kv_dtype = 3;
    LLMKV_KV_INT4: llmkv_kv_dtype = 4;
    LLMKV_KV_INT4_COMPACT: llmkv_kv_dtype = 5;

    LLMKV_KV_ROTATION_AUTO: llmkv_kv_rotation = 0;
    LLMKV_KV_ROTATION_NONE: llmkv_kv_rotation = 1;
    LLMKV_KV_ROTATION_K: llmkv_kv_rotation = 2;
    LLMKV_KV_ROTATION_V: llmkv_kv_rotation = 3;
    LLMKV_KV_ROTATION_KV: llmkv_kv_rotation = 4;

    LLMKV_ENGINE_PREFIX_CACHE: u32 = 0x1;
    LLMKV_ENGINE_KEEP_WINDOW_BLOCKS: u32 = 0x2;
    LLMKV_ENGINE_KV_SINK: u32 = 0x4;
    LLMKV_ENGINE_NO_KV_SINK: u32 = 0x8;

    LLMKV_TOKENIZE_ADD_BOS: u32 = 0x1;
    LLMKV_TOKENIZE_PARSE_SPECIAL: u32 = 0x2;
    LLMKV_TOKENIZE_STRICT: u32 = 0x4;

    LLMKV_PREFIX_LOAD_SHARE: u32 = 0x1;
    LLMKV_PREFIX_LOAD_ANY_KERNEL: u32 = 0x2;

    LLMKV_GRAMMAR_NONE: llmkv_grammar_kind = 0;
    LLMKV_GRAMMAR_GBNF: llmkv_grammar_kind = 1;
    LLMKV_GRAMMAR_JSON_SCHEMA: llmkv_grammar_kind = 2;

    LLMKV_SESSION_IDLE: llmkv_session_state = 0;
    LLMKV_SESSION_QUEUED: llmkv_session_state = 1;
    LLMKV_SESSION_PREFILLING: llmkv_session_state = 2;
    LLMKV_SESSION_GENERATING: llmkv_session_state = 3;
    LLMKV_SESSION_PARKED: llmkv_session_state = 4;
    LLMKV_SESSION_FINISHED: llmkv_session_state = 5;

    LLMKV_FINISH_NONE: llmkv_finish_reason = 0;
    LLMKV_FINISH_STOP: llmkv_finish_reason = 1;
    LLMKV_FINISH_LENGTH: llmkv_finish_reason = 2;
    LLMKV_FINISH_CANCELLED: llmkv_finish_reason = 3;
    LLMKV_FINISH_CONTEXT: llmkv_finish_reason = 4;
    LLMKV_FINISH_CONSTRAINT: llmkv_finish_reason = 5;

    LLMKV_TIER_DEVICE: llmkv_tier = 0;
    LLMKV_TIER_HOST: llmkv_tier = 1;
    LLMKV_TIER_MIXED: llmkv_tier = 2;

    LLMKV_EVENT_TOKEN: llmkv_event_kind = 1;
    LLMKV_EVENT_DONE: llmkv_event_kind = 2;
    LLMKV_EVENT_ERROR: llmkv_event_kind = 3;

    LLMKV_SUBMIT_GENERATE: u32 = 0x1;
}

// ---- Functions -------------------------------------------------------------------------

functions! {
    // Version
    pub fn llmkv_version() -> c_int;
    pub fn llmkv_version_string() -> *const c_char;
    // Status codes
    pub fn llmkv_status_string(status: llmkv_status) -> *const c_char;
    pub fn llmkv_last_error() -> *const c_char;
    // Logging
    pub fn llmkv_log_set(func: llmkv_log_fn, user_data: *mut c_void, max_level: llmkv_log_level);
    // Engine
    pub fn llmkv_engine_params_init(p: *mut llmkv_engine_params);
    pub fn llmkv_engine_params_init_sized(p: *mut llmkv_engine_params, size: usize);
    pub fn llmkv_engine_create(p: *const llmkv_engine_params, out: *mut *mut llmkv_engine) -> llmkv_status;
    pub fn llmkv_tp_serve(p: *const llmkv_engine_params) -> llmkv_status;
    pub fn llmkv_engine_destroy(e: *mut llmkv_engine);
    pub fn llmkv_engine_get_info(e: *const llmkv_engine, out: *mut llmkv_engine_info) -> llmkv_status;
    pub fn llmkv_engine_get_stats(e: *const llmkv_engine, out: *mut llmkv_stats) -> llmkv_status;
    pub fn llmkv_engine_validate(e: *const llmkv_engine) -> llmkv_status;
    // Tokens and text
    pub fn llmkv_tokenize(e: *const llmkv_engine, text: *const c_char, len: usize, flags: u32,
                          tokens: *mut i32, capacity: usize, n_tokens: *mut usize) -> llmkv_status;
    pub fn llmkv_detokenize(e: *const llmkv_engine, tokens: *const i32, n: usize, buf: *mut c_char,
                            capacity: usize, n_bytes: *mut usize) -> llmkv_status;
    pub fn llmkv_chat_format(e: *const llmkv_engine, msgs: *const llmkv_chat_message, n: usize,
                             add_generation_prompt: c_int, buf: *mut c_char, capacity: usize,
                             n_bytes: *mut usize) -> llmkv_status;
    // Prefix handles
    pub fn llmkv_prefix_create(e: *mut llmkv_engine, tokens: *const i32, n: usize,
                               out: *mut *mut llmkv_prefix) -> llmkv_status;
    pub fn llmkv_prefix_save(p: *const llmkv_prefix, path: *const c_char) -> llmkv_status;
    pub fn llmkv_prefix_load(e: *mut llmkv_engine, path: *const c_char, out: *mut *mut llmkv_prefix) -> llmkv_status;
    pub fn llmkv_prefix_load_ex(e: *mut llmkv_engine, path: *const c_char, flags: u32,
                                out: *mut *mut llmkv_prefix) -> llmkv_status;
    pub fn llmkv_prefix_n_tokens(p: *const llmkv_prefix) -> usize;
    pub fn llmkv_prefix_get_tokens(p: *const llmkv_prefix, tokens: *mut i32, capacity: usize,
                                   n_tokens: *mut usize) -> llmkv_status;
    pub fn llmkv_prefix_release(p: *mut llmkv_prefix);
    // Sessions
    pub fn llmkv_session_params_init(p: *mut llmkv_session_params);
    pub fn llmkv_session_params_init_sized(p: *mut llmkv_session_params, size: usize);
    pub fn llmkv_session_create(e: *mut llmkv_engine, p: *const llmkv_session_params,
                                out: *mut *mut llmkv_session) -> llmkv_status;
    pub fn llmkv_session_append(s: *mut llmkv_session, tokens: *const i32, n: usize) -> llmkv_status;
    pub fn llmkv_session_append_text(s: *mut llmkv_session, text: *const c_char, len: usize) -> llmkv_status;
    pub fn llmkv_session_generate(s: *mut llmkv_session, max_new_tokens: u32) -> llmkv_status;
    pub fn llmkv_session_cancel(s: *mut llmkv_session) -> llmkv_status;
    pub fn llmkv_session_park(s: *mut llmkv_session) -> llmkv_status;
    pub fn llmkv_session_read_text(s: *mut llmkv_session, buf: *mut c_char, capacity: usize,
                                   n_bytes: *mut usize) -> llmkv_status;
    pub fn llmkv_session_get_info(s: *const llmkv_session, out: *mut llmkv_session_info) -> llmkv_status;
    pub fn llmkv_session_get_tokens(s: *const llmkv_session, tokens: *mut i32, capacity: usize,
                                    n_tokens: *mut usize) -> llmkv_status;
    pub fn llmkv_session_fork(s: *mut llmkv_session, out: *mut *mut llmkv_session) -> llmkv_status;
    pub fn llmkv_session_to_prefix(s: *mut llmkv_session, out: *mut *mut llmkv_prefix) -> llmkv_status;
    pub fn llmkv_session_set_grammar(s: *mut llmkv_session, kind: llmkv_grammar_kind, text: *const c_char,
                                     len: usize, root: *const c_char) -> llmkv_status;
    pub fn llmkv_session_destroy(s: *mut llmkv_session);
    // Stepping
    pub fn llmkv_step(e: *mut llmkv_engine, events: *mut llmkv_event, capacity: usize,
                      n_events: *mut usize) -> llmkv_status;
    pub fn llmkv_pending_events(e: *const llmkv_engine) -> usize;
    pub fn llmkv_engine_has_work(e: *const llmkv_engine) -> c_int;
    pub fn llmkv_run(e: *mut llmkv_engine, on_event: llmkv_event_fn, user_data: *mut c_void) -> llmkv_status;
    // Worker thread (0.4)
    pub fn llmkv_worker_start(e: *mut llmkv_engine) -> llmkv_status;
    pub fn llmkv_worker_stop(e: *mut llmkv_engine) -> llmkv_status;
    pub fn llmkv_worker_poll(e: *mut llmkv_engine, events: *mut llmkv_event, capacity: usize,
                             timeout_us: u32, n_events: *mut usize) -> llmkv_status;
    pub fn llmkv_session_submit_text(s: *mut llmkv_session, text: *const c_char, len: usize, flags: u32,
                                     max_new_tokens: u32) -> llmkv_status;
    pub fn llmkv_session_submit_tokens(s: *mut llmkv_session, tokens: *const i32, n: usize, flags: u32,
                                       max_new_tokens: u32) -> llmkv_status;
    pub fn llmkv_session_submit_cancel(s: *mut llmkv_session) -> llmkv_status;
    pub fn llmkv_session_submit_error(s: *const llmkv_session, buf: *mut c_char, capacity: usize,
                                      n_bytes: *mut usize) -> llmkv_status;
}
