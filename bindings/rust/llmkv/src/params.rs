//! Engine and session parameters, and the small enums and flag sets of the header.
use crate::error::{cstring, Result};
use crate::{Engine, Prefix};
use llmkv_sys as sys;
use std::path::{Path, PathBuf};

/// `llmkv_backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// CUDA when available, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

impl Backend {
    fn raw(self) -> sys::llmkv_backend {
        match self {
            Backend::Auto => sys::LLMKV_BACKEND_AUTO,
            Backend::Cpu => sys::LLMKV_BACKEND_CPU,
            Backend::Cuda => sys::LLMKV_BACKEND_CUDA,
        }
    }
}

/// `llmkv_kv_dtype`: the codec of sealed K or V blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    F16,
    Bf16,
    Fp8E4m3,
    Int8,
    Int4,
    /// 0.28x of f16 (Int4: 0.34x) at somewhat lower quality; CPU backend only.
    Int4Compact,
}

impl KvDtype {
    pub(crate) fn raw(self) -> sys::llmkv_kv_dtype {
        match self {
            KvDtype::F16 => sys::LLMKV_KV_F16,
            KvDtype::Bf16 => sys::LLMKV_KV_BF16,
            KvDtype::Fp8E4m3 => sys::LLMKV_KV_FP8_E4M3,
            KvDtype::Int8 => sys::LLMKV_KV_INT8,
            KvDtype::Int4 => sys::LLMKV_KV_INT4,
            KvDtype::Int4Compact => sys::LLMKV_KV_INT4_COMPACT,
        }
    }
}

/// `llmkv_kv_rotation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvRotation {
    /// On for int4 codecs, off otherwise.
    Auto,
    None,
    K,
    V,
    Kv,
}

impl KvRotation {
    fn raw(self) -> sys::llmkv_kv_rotation {
        match self {
            KvRotation::Auto => sys::LLMKV_KV_ROTATION_AUTO,
            KvRotation::None => sys::LLMKV_KV_ROTATION_NONE,
            KvRotation::K => sys::LLMKV_KV_ROTATION_K,
            KvRotation::V => sys::LLMKV_KV_ROTATION_V,
            KvRotation::Kv => sys::LLMKV_KV_ROTATION_KV,
        }
    }
}

macro_rules! flag_set {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $val:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
        pub struct $name(u32);
        impl $name {
            pub const NONE: $name = $name(0);
            $( $(#[$fm])* pub const $flag: $name = $name($val); )*
            /// The C bits.
            pub const fn bits(self) -> u32 { self.0 }
            /// Any bits, passed to the library as they are (unknown bits are its
            /// INVALID_ARGUMENT).
            pub const fn from_bits_retain(bits: u32) -> $name { $name(bits) }
            pub const fn contains(self, other: $name) -> bool { self.0 & other.0 == other.0 }
        }
        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name { $name(self.0 | rhs.0) }
        }
    };
}

flag_set! {
    /// `LLMKV_TOKENIZE_*`.
    TokenizeFlags {
        /// Prepend BOS if the model's file asks for one.
        ADD_BOS = sys::LLMKV_TOKENIZE_ADD_BOS,
        /// Special-token text ("<|im_start|>") becomes its token.
        PARSE_SPECIAL = sys::LLMKV_TOKENIZE_PARSE_SPECIAL,
        /// A byte the vocabulary has no token for is an error instead of being dropped.
        STRICT = sys::LLMKV_TOKENIZE_STRICT,
    }
}

flag_set! {
    /// `LLMKV_PREFIX_LOAD_*`.
    PrefixLoadFlags {
        /// Offer the loaded KV to the automatic prefix cache (trusted files only).
        SHARE = sys::LLMKV_PREFIX_LOAD_SHARE,
        /// Accept a snapshot written by another kernel variant of the same configuration.
        ANY_KERNEL = sys::LLMKV_PREFIX_LOAD_ANY_KERNEL,
    }
}

flag_set! {
    /// `LLMKV_SUBMIT_*`.
    SubmitFlags {
        /// After appending, generate (as `Session::generate`).
        GENERATE = sys::LLMKV_SUBMIT_GENERATE,
    }
}

/// Engine parameters (`llmkv_engine_params`), started from the library's defaults
/// (`llmkv_engine_params_init_sized`). Finish with [`EngineBuilder::build`].
///
/// ```no_run
/// let engine = llmkv::Engine::builder("model.gguf").n_threads(4).spin_us(0).thread_priority(5).build()?;
/// # Ok::<(), llmkv::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    raw: sys::llmkv_engine_params,
    model_path: PathBuf,
    devices: Vec<i32>,
}

impl EngineBuilder {
    pub fn new(model_path: impl AsRef<Path>) -> EngineBuilder {
        let mut raw = std::mem::MaybeUninit::<sys::llmkv_engine_params>::zeroed();
        // SAFETY: the sized init fills exactly this struct (struct_size included; the unsized
        // llmkv_engine_params_init fills only the 0.3 struct); the zeroed start makes every
        // field valid even before.
        let raw = unsafe {
            sys::llmkv_engine_params_init_sized(raw.as_mut_ptr(), std::mem::size_of::<sys::llmkv_engine_params>());
            raw.assume_init()
        };
        EngineBuilder { raw, model_path: model_path.as_ref().to_path_buf(), devices: Vec::new() }
    }
    pub fn backend(mut self, b: Backend) -> Self {
        self.raw.backend = b.raw();
        self
    }
    /// GPU ordinals (more than one = tensor parallel over GPUs, not supported by the library
    /// yet; [`EngineBuilder::tp_size`] runs CPU ranks).
    pub fn devices(mut self, d: &[i32]) -> Self {
        self.devices = d.to_vec();
        self
    }
    /// CPU compute threads; 0 = all cores.
    pub fn n_threads(mut self, n: u32) -> Self {
        self.raw.n_threads = n;
        self
    }
    /// Codecs of sealed K and V blocks.
    pub fn kv_dtype(mut self, k: KvDtype, v: KvDtype) -> Self {
        self.raw.kv_dtype_k = k.raw();
        self.raw.kv_dtype_v = v.raw();
        self
    }
    /// Tokens per block; 0 = 16.
    pub fn kv_block_tokens(mut self, n: u32) -> Self {
        self.raw.kv_block_tokens = n;
        self
    }
    /// Device-tier KV budget in bytes; 0 = automatic.
    pub fn kv_device_bytes(mut self, n: u64) -> Self {
        self.raw.kv_device_bytes = n;
        self
    }
    /// Host-tier budget in bytes; 0 = no host tier (parking is then UNSUPPORTED).
    pub fn kv_host_bytes(mut self, n: u64) -> Self {
        self.raw.kv_host_bytes = n;
        self
    }
    /// Token budget of one step; 0 = automatic.
    pub fn max_batch_tokens(mut self, n: u32) -> Self {
        self.raw.max_batch_tokens = n;
        self
    }
    /// Per-session token limit; 0 = the model's.
    pub fn max_context(mut self, n: u32) -> Self {
        self.raw.max_context = n;
        self
    }
    /// Live sessions and prefix handles at once; 0 = 256.
    pub fn max_sessions(mut self, n: u32) -> Self {
        self.raw.max_sessions = n;
        self
    }
    pub fn kv_residual_tokens(mut self, n: u32) -> Self {
        self.raw.kv_residual_tokens = n;
        self
    }
    pub fn kv_rotation(mut self, r: KvRotation) -> Self {
        self.raw.kv_rotation = r.raw();
        self
    }
    /// The automatic prefix cache (`LLMKV_ENGINE_PREFIX_CACHE`, on by default).
    pub fn prefix_cache(mut self, on: bool) -> Self {
        self.set_flag(sys::LLMKV_ENGINE_PREFIX_CACHE, on);
        self
    }
    /// `LLMKV_ENGINE_KEEP_WINDOW_BLOCKS`.
    pub fn keep_window_blocks(mut self, on: bool) -> Self {
        self.set_flag(sys::LLMKV_ENGINE_KEEP_WINDOW_BLOCKS, on);
        self
    }
    /// The KV sink: position 0's K and V kept in fp16 (`LLMKV_ENGINE_KV_SINK` when true,
    /// `LLMKV_ENGINE_NO_KV_SINK` when false). Not called: on with an int4 codec.
    pub fn kv_sink(mut self, on: bool) -> Self {
        self.set_flag(sys::LLMKV_ENGINE_KV_SINK, on);
        self.set_flag(sys::LLMKV_ENGINE_NO_KV_SINK, !on);
        self
    }
    /// The raw `flags` word (`LLMKV_ENGINE_*`), as is.
    pub fn flags(mut self, flags: u32) -> Self {
        self.raw.flags = flags;
        self
    }
    /// Microseconds an idle compute thread polls before sleeping (0..100000; 0 never
    /// polls; -1 = `LLMKV_SPIN_US` or 200). Added in 0.4.
    pub fn spin_us(mut self, us: i32) -> Self {
        self.raw.spin_us = us;
        self
    }
    /// Nice levels (1..19) below the creating thread for llmkv's threads; 0 = same. Added
    /// in 0.4.
    pub fn thread_priority(mut self, nice: i32) -> Self {
        self.raw.thread_priority = nice;
        self
    }
    /// Tensor parallelism on CPU ranks run as threads of this process, `n_threads` split
    /// among them: the query and KV heads, feed-forward columns and vocabulary are split over
    /// the ranks. The model's heads must divide by `n` (or its KV heads replicate evenly),
    /// else `build` is `Status::Unsupported`. 0 or 1 = none. Added in 0.5.
    pub fn tp_size(mut self, n: u32) -> Self {
        self.raw.tp_size = n;
        self
    }
    fn set_flag(&mut self, bit: u32, on: bool) {
        if on {
            self.raw.flags |= bit
        } else {
            self.raw.flags &= !bit
        }
    }
    /// The C struct as it will be passed (model path and devices are set at build).
    pub fn raw(&self) -> &sys::llmkv_engine_params {
        &self.raw
    }
    /// Loads the model and creates the engine (`llmkv_engine_create`).
    pub fn build(&self) -> Result<Engine> {
        let path = cstring("model path", path_bytes(&self.model_path))?;
        let mut raw = self.raw;
        raw.model_path = path.as_ptr();
        raw.devices = if self.devices.is_empty() { std::ptr::null() } else { self.devices.as_ptr() };
        raw.n_devices = self.devices.len() as u32;
        Engine::create(&raw)
    }
}

pub(crate) fn path_bytes(p: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        p.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        p.to_string_lossy().into_owned().into_bytes()
    }
}

/// Sampling (`llmkv_sampling`). Start from the library's defaults (greedy):
/// `SessionParams::new().get_sampling()`, or use the `SessionParams` setters.
pub type Sampling = sys::llmkv_sampling;

/// A session's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar<'a> {
    /// Unconstrained.
    None,
    /// GBNF text and its start rule (`None` = "root").
    Gbnf { text: &'a str, root: Option<&'a str> },
    /// A JSON Schema document.
    JsonSchema(&'a str),
}

impl Grammar<'_> {
    pub(crate) fn kind(&self) -> sys::llmkv_grammar_kind {
        match self {
            Grammar::None => sys::LLMKV_GRAMMAR_NONE,
            Grammar::Gbnf { .. } => sys::LLMKV_GRAMMAR_GBNF,
            Grammar::JsonSchema(_) => sys::LLMKV_GRAMMAR_JSON_SCHEMA,
        }
    }
    pub(crate) fn text(&self) -> &[u8] {
        match self {
            Grammar::None => &[],
            Grammar::Gbnf { text, .. } => text.as_bytes(),
            Grammar::JsonSchema(t) => t.as_bytes(),
        }
    }
    pub(crate) fn root(&self) -> Result<Option<std::ffi::CString>> {
        match self {
            Grammar::Gbnf { root: Some(r), .. } => Ok(Some(cstring("grammar root", *r)?)),
            _ => Ok(None),
        }
    }
}

/// A logit bias entry (`llmkv_logit_bias`); `f32::NEG_INFINITY` bans the token.
pub type LogitBias = sys::llmkv_logit_bias;

/// Session parameters (`llmkv_session_params`), from the library's defaults (greedy, no
/// limits). Borrowed data (prefix, stop tokens and strings, logit bias, grammar) only needs
/// to live until the session is created: the library copies it.
#[derive(Debug, Clone)]
pub struct SessionParams<'a> {
    pub(crate) raw: sys::llmkv_session_params,
    pub(crate) prefix: Option<&'a Prefix<'a>>,
    pub(crate) stop_tokens: &'a [i32],
    pub(crate) stop_strings: Vec<&'a [u8]>,
    pub(crate) logit_bias: &'a [LogitBias],
    pub(crate) grammar: Grammar<'a>,
}

impl Default for SessionParams<'_> {
    fn default() -> Self {
        SessionParams::new()
    }
}

impl<'a> SessionParams<'a> {
    pub fn new() -> SessionParams<'a> {
        let mut raw = std::mem::MaybeUninit::<sys::llmkv_session_params>::zeroed();
        // SAFETY: fills the whole struct; zeroed before, so every field is valid regardless.
        let raw = unsafe {
            sys::llmkv_session_params_init_sized(raw.as_mut_ptr(), std::mem::size_of::<sys::llmkv_session_params>());
            raw.assume_init()
        };
        SessionParams {
            raw,
            prefix: None,
            stop_tokens: &[],
            stop_strings: Vec::new(),
            logit_bias: &[],
            grammar: Grammar::None,
        }
    }
    /// Start from this prefix's tokens and KV (it must belong to the same engine).
    pub fn prefix(mut self, p: &'a Prefix<'a>) -> Self {
        self.prefix = Some(p);
        self
    }
    pub fn sampling(mut self, s: Sampling) -> Self {
        self.raw.sampling = s;
        self
    }
    /// The current sampling settings (the library's defaults unless changed).
    pub fn get_sampling(&self) -> Sampling {
        self.raw.sampling
    }
    pub fn temperature(mut self, t: f32) -> Self {
        self.raw.sampling.temperature = t;
        self
    }
    pub fn top_k(mut self, k: i32) -> Self {
        self.raw.sampling.top_k = k;
        self
    }
    pub fn top_p(mut self, p: f32) -> Self {
        self.raw.sampling.top_p = p;
        self
    }
    pub fn min_p(mut self, p: f32) -> Self {
        self.raw.sampling.min_p = p;
        self
    }
    pub fn repeat_penalty(mut self, penalty: f32, last_n: i32) -> Self {
        self.raw.sampling.repeat_penalty = penalty;
        self.raw.sampling.repeat_last_n = last_n;
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.raw.sampling.seed = seed;
        self
    }
    /// Default limit of `generate(0)`; 0 = until a stop token or the context end.
    pub fn max_new_tokens(mut self, n: u32) -> Self {
        self.raw.max_new_tokens = n;
        self
    }
    pub fn min_new_tokens(mut self, n: u32) -> Self {
        self.raw.min_new_tokens = n;
        self
    }
    /// Higher runs first and is preempted last.
    pub fn priority(mut self, p: i32) -> Self {
        self.raw.priority = p;
        self
    }
    /// A number handed back in this session's events ([`crate::Event::user_data`]).
    pub fn user_data(mut self, tag: usize) -> Self {
        self.raw.user_data = tag as *mut std::ffi::c_void;
        self
    }
    pub fn stop_tokens(mut self, t: &'a [i32]) -> Self {
        self.stop_tokens = t;
        self
    }
    /// Stop strings (any bytes, NUL included; at most 64 of 1..256 bytes).
    pub fn stop_strings<S: AsRef<[u8]> + ?Sized>(mut self, s: &'a [&'a S]) -> Self {
        self.stop_strings = s.iter().map(|x| x.as_ref()).collect();
        self
    }
    pub fn logit_bias(mut self, b: &'a [LogitBias]) -> Self {
        self.logit_bias = b;
        self
    }
    pub fn grammar(mut self, g: Grammar<'a>) -> Self {
        self.grammar = g;
        self
    }
    /// The C struct's scalar fields (pointers are filled at session creation).
    pub fn raw(&self) -> &sys::llmkv_session_params {
        &self.raw
    }
    /// Mutable access to the C struct's scalar fields, for settings without a method.
    /// Pointer fields set here are overwritten at session creation.
    pub fn raw_mut(&mut self) -> &mut sys::llmkv_session_params {
        &mut self.raw
    }
}
