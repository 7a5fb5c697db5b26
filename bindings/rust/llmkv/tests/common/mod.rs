//! Shared helpers of the integration tests.
#![allow(dead_code)]
use llmkv::{Engine, EngineBuilder, Event, EventKind, FinishReason, Session, Status};
use std::path::PathBuf;

/// The model named by LLMKV_MODEL, or None after printing why the test is skipped.
pub fn model(test: &str) -> Option<PathBuf> {
    match std::env::var_os("LLMKV_MODEL").filter(|v| !v.is_empty()) {
        None => {
            eprintln!("SKIP {test}: LLMKV_MODEL is not set (a GGUF model, e.g. SmolLM2-135M-Instruct.Q4_1.gguf)");
            None
        }
        Some(p) => {
            let p = PathBuf::from(p);
            if p.is_file() {
                Some(p)
            } else {
                eprintln!("SKIP {test}: LLMKV_MODEL={} does not exist", p.display());
                None
            }
        }
    }
}

/// `let path = need_model!();` returns from the test (skipping it, with the reason printed)
/// when there is no model.
#[macro_export]
macro_rules! need_model {
    () => {
        match common::model(module_path!()) {
            Some(p) => p,
            None => return,
        }
    };
    ($name:expr) => {
        match common::model($name) {
            Some(p) => p,
            None => return,
        }
    };
}

/// Engine parameters for tests: two compute threads that never spin (the test machines
/// are small and shared).
pub fn builder(model: &PathBuf) -> EngineBuilder {
    Engine::builder(model).n_threads(2).spin_us(0)
}

pub fn engine(model: &PathBuf) -> Engine {
    builder(model).build().expect("engine creation")
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub tokens: Vec<i32>,
    pub text: String,
    pub finish: Option<FinishReason>,
    pub error: Option<Status>,
}

/// Steps the engine until every session got its DONE (or ERROR) event; collects tokens and
/// the text read after every step.
pub fn drive(engine: &Engine, sessions: &[&Session<'_>]) -> Vec<Outcome> {
    let mut out = vec![Outcome::default(); sessions.len()];
    let mut events = Event::buffer::<16>();
    for _ in 0..20_000 {
        for ev in engine.step(&mut events).expect("step") {
            let i = sessions.iter().position(|s| ev.is_for(s)).expect("event of an unknown session");
            match ev.kind() {
                EventKind::Token(t) => out[i].tokens.push(t),
                EventKind::Done(r) => out[i].finish = Some(r),
                EventKind::Error(st) => out[i].error = Some(st),
                EventKind::Unknown(k) => panic!("unknown event kind {k}"),
            }
        }
        for (i, s) in sessions.iter().enumerate() {
            s.read_text_into(&mut out[i].text).expect("read_text");
        }
        if out.iter().all(|o| o.finish.is_some() || o.error.is_some()) {
            return out;
        }
    }
    panic!("sessions did not finish in 20000 steps: {out:?}");
}

/// One session alone: append `prompt`, generate `n` greedy tokens, drive to the end.
pub fn generate_alone(engine: &Engine, prompt: &str, n: u32) -> Outcome {
    let s = engine.session(&llmkv::SessionParams::new()).unwrap();
    s.append_text(prompt).unwrap();
    s.generate(n).unwrap();
    drive(engine, &[&s]).remove(0)
}

pub const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "My favourite book is",
    "To make a cup of tea, first",
    "The largest planet in our solar system is",
];

pub fn tmpdir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
