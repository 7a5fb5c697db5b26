//! The engine.
use crate::error::{check, cstring, Error, Result, Status};
use crate::event::Event;
use crate::params::{path_bytes, EngineBuilder, PrefixLoadFlags, SessionParams, TokenizeFlags};
use crate::{Prefix, Session};
use llmkv_sys as sys;
use std::ffi::{c_char, CStr};
use std::path::Path;
use std::ptr::NonNull;
use std::time::Duration;

/// A loaded model with its KV pool (`llmkv_engine*`). Dropping it destroys it (and stops
/// its worker thread); sessions and prefixes borrow it, so they are all gone by then.
///
/// Every method takes `&self`: the library serializes calls on one engine internally.
pub struct Engine {
    raw: NonNull<sys::llmkv_engine>,
}

// SAFETY: the header's threading rule: "an engine and its sessions may be called from any
// thread; calls on one engine serialize internally". The handle has no thread affinity
// (Send) and concurrent calls through `&Engine` are serialized by the library (Sync).
// Callbacks that must not re-enter the engine are not exposed: `Engine::run` is built on
// `llmkv_step`, and the log callback is a plain `fn` that gets no engine.
unsafe impl Send for Engine {}
// SAFETY: see above.
unsafe impl Sync for Engine {}

/// `llmkv_engine_info`: the numbers as the C struct's public fields (through `Deref`), the
/// names as `&str`.
#[derive(Debug, Clone, Copy)]
pub struct EngineInfo(sys::llmkv_engine_info);

fn c_array_str(a: &[c_char]) -> &str {
    // SAFETY: reinterpreting c_char (i8 or u8) as u8 of the same length.
    let bytes = unsafe { std::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).unwrap_or("")
}

impl EngineInfo {
    pub fn model_name(&self) -> &str {
        c_array_str(&self.0.model_name)
    }
    /// "llama", "gemma3", ...
    pub fn architecture(&self) -> &str {
        c_array_str(&self.0.architecture)
    }
    /// "cpu" or "cuda".
    pub fn backend_name(&self) -> &str {
        c_array_str(&self.0.backend_name)
    }
    fn tok(t: i32) -> Option<i32> {
        (t >= 0).then_some(t)
    }
    pub fn bos_token(&self) -> Option<i32> {
        Self::tok(self.0.bos_token)
    }
    pub fn eos_token(&self) -> Option<i32> {
        Self::tok(self.0.eos_token)
    }
    pub fn eot_token(&self) -> Option<i32> {
        Self::tok(self.0.eot_token)
    }
}

impl std::ops::Deref for EngineInfo {
    type Target = sys::llmkv_engine_info;
    fn deref(&self) -> &sys::llmkv_engine_info {
        &self.0
    }
}

/// `llmkv_stats` (all counters as public fields).
pub type Stats = sys::llmkv_stats;

/// One chat message for [`Engine::chat_format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatMessage<'a> {
    /// "system", "user", "assistant" ("ipython" for Llama 3); checked by the library.
    pub role: &'a str,
    pub content: &'a str,
}

impl<'a> ChatMessage<'a> {
    pub fn new(role: &'a str, content: &'a str) -> Self {
        ChatMessage { role, content }
    }
    pub fn system(content: &'a str) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: &'a str) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: &'a str) -> Self {
        Self::new("assistant", content)
    }
}

impl Engine {
    /// An engine with the library's defaults for everything but the model.
    pub fn new(model_path: impl AsRef<Path>) -> Result<Engine> {
        EngineBuilder::new(model_path).build()
    }

    /// Parameters from the library's defaults, to change and then `build()`.
    pub fn builder(model_path: impl AsRef<Path>) -> EngineBuilder {
        EngineBuilder::new(model_path)
    }

    /// `llmkv_engine_create` with a complete C struct (its pointers must be valid for the
    /// call).
    pub(crate) fn create(p: &sys::llmkv_engine_params) -> Result<Engine> {
        let mut out = std::ptr::null_mut();
        // SAFETY: p is a complete params struct whose pointers live for the call.
        check(unsafe { sys::llmkv_engine_create(p, &mut out) })?;
        Ok(Engine { raw: NonNull::new(out).expect("library returned OK and a NULL engine") })
    }

    pub fn as_ptr(&self) -> *mut sys::llmkv_engine {
        self.raw.as_ptr()
    }

    /// `llmkv_engine_get_info`.
    pub fn info(&self) -> Result<EngineInfo> {
        // SAFETY: an all-zero llmkv_engine_info is valid (integers and char arrays).
        let mut raw: sys::llmkv_engine_info = unsafe { std::mem::zeroed() };
        // A 0.5 library refuses the 0.6 size: it is asked for its own (up to n_expert).
        let before_06 = crate::version() < 600;
        raw.struct_size = if before_06 {
            std::mem::offset_of!(sys::llmkv_engine_info, n_expert) as u32
        } else {
            std::mem::size_of::<sys::llmkv_engine_info>() as u32
        };
        // SAFETY: valid handle; raw is a full struct, at least the size it says.
        check(unsafe { sys::llmkv_engine_get_info(self.raw.as_ptr(), &mut raw) })?;
        if before_06 {
            // What the header says a dense model reports (a 0.5 library loads no other).
            raw.n_params_active = raw.n_params;
            raw.weight_bytes_active = raw.weight_bytes;
        }
        Ok(EngineInfo(raw))
    }

    /// `llmkv_engine_get_stats`.
    pub fn stats(&self) -> Result<Stats> {
        let mut raw = Stats { struct_size: std::mem::size_of::<Stats>() as u32, ..Default::default() };
        // SAFETY: valid handle; raw is a full struct of the size it says.
        check(unsafe { sys::llmkv_engine_get_stats(self.raw.as_ptr(), &mut raw) })?;
        Ok(raw)
    }

    /// Checks the KV pool's invariants (`llmkv_engine_validate`; INTERNAL with a
    /// description when one fails).
    pub fn validate(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::llmkv_engine_validate(self.raw.as_ptr()) })
    }

    /// Tokenizes UTF-8 text (invalid UTF-8 goes byte by byte) (`llmkv_tokenize`).
    pub fn tokenize(&self, text: impl AsRef<[u8]>, flags: TokenizeFlags) -> Result<Vec<i32>> {
        let mut v = Vec::new();
        self.tokenize_into(text, flags, &mut v)?;
        Ok(v)
    }

    /// As [`Engine::tokenize`], into `out` (replacing its contents; reuses its allocation).
    pub fn tokenize_into(&self, text: impl AsRef<[u8]>, flags: TokenizeFlags, out: &mut Vec<i32>) -> Result<()> {
        let t = text.as_ref();
        out.clear();
        // Every token spells at least one byte, plus a BOS: one call is enough.
        out.reserve(t.len() + 2);
        loop {
            let cap = out.capacity();
            let mut n = 0usize;
            // SAFETY: valid handle; t.len() readable bytes; at most cap tokens written.
            let rc = unsafe {
                sys::llmkv_tokenize(self.raw.as_ptr(), t.as_ptr().cast(), t.len(), flags.bits(), out.as_mut_ptr(), cap, &mut n)
            };
            if rc == sys::LLMKV_ERR_INVALID_ARGUMENT && n > cap {
                out.reserve(n);
                continue;
            }
            check(rc)?;
            // SAFETY: n <= cap tokens were written.
            unsafe { out.set_len(n.min(cap)) };
            return Ok(());
        }
    }

    /// The bytes of the tokens' text (`llmkv_detokenize`; special tokens as their text).
    pub fn detokenize(&self, tokens: &[i32]) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.detokenize_into(tokens, &mut v)?;
        Ok(v)
    }

    /// As [`Engine::detokenize`], into `out` (replacing its contents).
    pub fn detokenize_into(&self, tokens: &[i32], out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.reserve(tokens.len() * 8 + 16);
        loop {
            let cap = out.capacity();
            let mut n = 0usize;
            // SAFETY: valid handle; tokens readable; at most cap bytes written.
            let rc = unsafe {
                sys::llmkv_detokenize(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), out.as_mut_ptr().cast(), cap, &mut n)
            };
            if rc == sys::LLMKV_ERR_INVALID_ARGUMENT && n > cap {
                out.reserve(n);
                continue;
            }
            check(rc)?;
            // SAFETY: n <= cap bytes were written.
            unsafe { out.set_len(n.min(cap)) };
            return Ok(());
        }
    }

    /// As [`Engine::detokenize`], as a String (invalid UTF-8 becomes U+FFFD).
    pub fn detokenize_to_string(&self, tokens: &[i32]) -> Result<String> {
        let v = self.detokenize(tokens)?;
        Ok(String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// Formats messages with the model's chat template (`llmkv_chat_format`). A role or
    /// content with a NUL byte is InvalidArgument (they are C strings).
    pub fn chat_format(&self, msgs: &[ChatMessage<'_>], add_generation_prompt: bool) -> Result<String> {
        let mut owned = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            owned.push((
                cstring(&format!("message {i}'s role"), m.role)?,
                cstring(&format!("message {i}'s content"), m.content)?,
            ));
        }
        let raw: Vec<sys::llmkv_chat_message> =
            owned.iter().map(|(r, c)| sys::llmkv_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
        let mut buf: Vec<u8> = Vec::with_capacity(msgs.iter().map(|m| m.content.len() + 64).sum::<usize>() + 64);
        loop {
            let cap = buf.capacity();
            let mut n = 0usize;
            // SAFETY: valid handle; raw holds raw.len() messages of NUL-terminated strings
            // that outlive the call; at most cap bytes are written.
            let rc = unsafe {
                sys::llmkv_chat_format(
                    self.raw.as_ptr(),
                    raw.as_ptr(),
                    raw.len(),
                    add_generation_prompt as i32,
                    buf.as_mut_ptr().cast(),
                    cap,
                    &mut n,
                )
            };
            if rc == sys::LLMKV_ERR_INVALID_ARGUMENT && n > cap {
                buf.reserve(n + 1);
                continue;
            }
            check(rc)?;
            // SAFETY: n <= cap bytes were written.
            unsafe { buf.set_len(n.min(cap)) };
            return Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()));
        }
    }

    /// Creates an empty session (`llmkv_session_create`).
    pub fn session(&self, params: &SessionParams<'_>) -> Result<Session<'_>> {
        let mut raw = params.raw;
        raw.struct_size = std::mem::size_of::<sys::llmkv_session_params>() as u32;
        raw.prefix = match params.prefix {
            Some(p) if p.engine != self.raw => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    "session params: the prefix belongs to another engine",
                ))
            }
            Some(p) => p.as_ptr(),
            None => std::ptr::null(),
        };
        raw.stop_tokens = params.stop_tokens.as_ptr();
        raw.n_stop_tokens = params.stop_tokens.len() as u32;
        let strings: Vec<*const c_char> = params.stop_strings.iter().map(|s| s.as_ptr().cast()).collect();
        let lengths: Vec<usize> = params.stop_strings.iter().map(|s| s.len()).collect();
        raw.stop_strings = if strings.is_empty() { std::ptr::null() } else { strings.as_ptr() };
        raw.stop_string_lengths = if lengths.is_empty() { std::ptr::null() } else { lengths.as_ptr() };
        raw.n_stop_strings = strings.len() as u32;
        raw.logit_bias = params.logit_bias.as_ptr();
        raw.n_logit_bias = params.logit_bias.len() as u32;
        let root = params.grammar.root()?;
        let gtext = params.grammar.text();
        raw.grammar_kind = params.grammar.kind();
        raw.grammar = gtext.as_ptr().cast();
        raw.grammar_len = gtext.len();
        raw.grammar_root = root.as_ref().map_or(std::ptr::null(), |r| r.as_ptr());
        let mut out = std::ptr::null_mut();
        // SAFETY: valid handle; every pointer in raw points into data borrowed by `params`
        // or owned above, all alive for the call (the library copies what it keeps).
        check(unsafe { sys::llmkv_session_create(self.raw.as_ptr(), &raw, &mut out) })?;
        Ok(Session::from_raw(out, self.raw))
    }

    /// Computes the KV of `tokens` now (`llmkv_prefix_create`).
    pub fn create_prefix(&self, tokens: &[i32]) -> Result<Prefix<'_>> {
        let mut out = std::ptr::null_mut();
        // SAFETY: valid handle; tokens readable.
        check(unsafe { sys::llmkv_prefix_create(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), &mut out) })?;
        Ok(Prefix::from_raw(out, self.raw))
    }

    /// Loads a snapshot written by [`Prefix::save`] (`llmkv_prefix_load`, or
    /// `llmkv_prefix_load_ex` with flags). Any mismatch or corruption is
    /// [`Status::SnapshotFormat`].
    pub fn load_prefix(&self, path: impl AsRef<Path>, flags: PrefixLoadFlags) -> Result<Prefix<'_>> {
        let p = cstring("snapshot path", path_bytes(path.as_ref()))?;
        let mut out = std::ptr::null_mut();
        // SAFETY: valid handle; NUL-terminated path.
        let rc = unsafe {
            if flags == PrefixLoadFlags::NONE {
                sys::llmkv_prefix_load(self.raw.as_ptr(), p.as_ptr(), &mut out)
            } else {
                sys::llmkv_prefix_load_ex(self.raw.as_ptr(), p.as_ptr(), flags.bits(), &mut out)
            }
        };
        check(rc)?;
        Ok(Prefix::from_raw(out, self.raw))
    }

    /// Runs at most one scheduling iteration (`llmkv_step`) and returns the events it
    /// produced, written into the caller's buffer (events that do not fit stay queued).
    ///
    /// ```no_run
    /// # let engine = llmkv::Engine::new("m.gguf")?;
    /// let mut events = llmkv::Event::buffer::<32>();
    /// for ev in engine.step(&mut events)? {
    ///     println!("{:?}", ev.kind());
    /// }
    /// # Ok::<(), llmkv::Error>(())
    /// ```
    pub fn step<'b>(&self, events: &'b mut [Event]) -> Result<&'b [Event]> {
        let mut n = 0usize;
        // SAFETY: Event is repr(transparent) over llmkv_event; at most len events written.
        check(unsafe {
            sys::llmkv_step(self.raw.as_ptr(), events.as_mut_ptr().cast(), events.len(), &mut n)
        })?;
        Ok(&events[..n.min(events.len())])
    }

    /// Events waiting to be returned (`llmkv_pending_events`).
    pub fn pending_events(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::llmkv_pending_events(self.raw.as_ptr()) }
    }

    /// Whether a session has input to run, a generation in progress or a submitted request
    /// waiting (`llmkv_engine_has_work`): a step with no events does not mean there is none.
    pub fn has_work(&self) -> bool {
        // SAFETY: valid handle.
        unsafe { sys::llmkv_engine_has_work(self.raw.as_ptr()) != 0 }
    }

    /// Steps until no session has work, calling `on_event` for each event. Unlike the C
    /// `llmkv_run` (not wrapped), the closure may call into the engine and its sessions
    /// (read text, append, generate): it is called between steps, never inside the library.
    pub fn run(&self, mut on_event: impl FnMut(&Event)) -> Result<()> {
        let mut buf = Event::buffer::<64>();
        loop {
            let evs = self.step(&mut buf)?;
            for ev in evs.iter() {
                on_event(ev);
            }
            if evs.is_empty() && self.pending_events() == 0 && !self.has_work() {
                return Ok(());
            }
        }
    }

    /// Starts the engine's worker thread (`llmkv_worker_start`): it steps whenever a
    /// session has work; [`Engine::step`] is then [`Status::State`]. Use [`Engine::poll`]
    /// and the `Session::submit_*` calls, which never wait for a step.
    pub fn start_worker(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::llmkv_worker_start(self.raw.as_ptr()) })
    }

    /// Stops the worker after the step in progress and joins it (`llmkv_worker_stop`);
    /// queued events stay. Dropping the engine also stops it.
    pub fn stop_worker(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::llmkv_worker_stop(self.raw.as_ptr()) })
    }

    /// Moves queued events into `events` (`llmkv_worker_poll`), waiting up to `timeout` for
    /// a first one (zero: return at once). A failed step of the worker comes back once as
    /// the error.
    pub fn poll<'b>(&self, events: &'b mut [Event], timeout: Duration) -> Result<&'b [Event]> {
        let us = u32::try_from(timeout.as_micros()).unwrap_or(u32::MAX);
        let mut n = 0usize;
        // SAFETY: Event is repr(transparent) over llmkv_event; at most len events written.
        check(unsafe {
            sys::llmkv_worker_poll(self.raw.as_ptr(), events.as_mut_ptr().cast(), events.len(), us, &mut n)
        })?;
        Ok(&events[..n.min(events.len())])
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: we own the handle; no session or prefix is alive (they borrow the engine).
        unsafe { sys::llmkv_engine_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("raw", &self.raw).finish()
    }
}

/// MAJOR*10000 + MINOR*100 + PATCH of the library loaded (`llmkv_version`).
pub fn version() -> i32 {
    // SAFETY: no arguments.
    unsafe { sys::llmkv_version() }
}

/// "MAJOR.MINOR.PATCH" of the library loaded.
pub fn version_string() -> &'static str {
    // SAFETY: static NUL-terminated storage.
    let p = unsafe { sys::llmkv_version_string() };
    if p.is_null() {
        return "";
    }
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}
