//! Safe Rust binding of **libllmkv** (C API 0.5, `include/llmkv.h`), an embeddable LLM
//! inference runtime: load a GGUF model into an [`Engine`], run many [`Session`]s in one
//! KV-cache budget, step them yourself ([`Engine::step`]) or let the engine's worker thread
//! do it ([`Engine::start_worker`], [`Engine::poll`], [`Session::submit_text`]).
//!
//! ```no_run
//! use llmkv::{Engine, Event, EventKind, SessionParams};
//! let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").n_threads(2).build()?;
//! let s = engine.session(&SessionParams::new().max_new_tokens(32))?;
//! s.append_text("The capital of France is")?;
//! s.generate(0)?;
//! let (mut events, mut text) = (Event::buffer::<16>(), String::new());
//! 'outer: loop {
//!     for ev in engine.step(&mut events)? {
//!         s.read_text_into(&mut text)?;
//!         if let EventKind::Done(_) = ev.kind() { break 'outer; }
//!     }
//! }
//! println!("{text}");
//! # Ok::<(), llmkv::Error>(())
//! ```
//!
//! Ownership is in the types: a [`Session`] and a [`Prefix`] borrow their engine, so neither
//! can outlive it; each frees its handle when dropped. An [`Event`] holds the raw session
//! address the library handed back and is neither `Send` nor `Sync`:
//!
//! ```compile_fail,E0277
//! fn must_send<T: Send>(_: T) {}
//! must_send(llmkv::Event::EMPTY);
//! ```
//!
//! A session cannot outlive its engine:
//!
//! ```compile_fail,E0597
//! let s = {
//!     let engine = llmkv::Engine::new("m.gguf").unwrap();
//!     engine.session(&llmkv::SessionParams::new()).unwrap()
//! };
//! ```
//!
//! Threads: the header lets an engine and its sessions be called from any thread (calls on
//! one engine serialize inside the library), so [`Engine`], [`Session`] and [`Prefix`] are
//! `Send + Sync` and their methods take `&self`.
#![deny(unsafe_op_in_unsafe_fn)]

mod engine;
mod error;
mod event;
mod log;
mod params;
mod prefix;
mod session;

pub use engine::{version, version_string, ChatMessage, Engine, EngineInfo, Stats};
pub use error::{Error, Result, Status};
pub use event::{Event, EventKind, FinishReason, SessionId};
pub use log::{set_logger, LogFn, LogLevel};
pub use params::{
    Backend, EngineBuilder, Grammar, KvDtype, KvRotation, LogitBias, PrefixLoadFlags, Sampling, SessionParams,
    SubmitFlags, TokenizeFlags,
};
pub use prefix::Prefix;
pub use session::{Session, SessionInfo, SessionState, Tier};

/// The raw declarations, for what the safe layer does not cover.
pub use llmkv_sys as sys;
