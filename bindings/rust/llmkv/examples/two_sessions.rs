//! Two sessions over one engine, stepped together, their text streamed interleaved.
//!
//!     LLMKV_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf cargo run --example two_sessions
//!
//! Each chunk of text is printed as it arrives, on its own line, prefixed with the session
//! it came from: `[1] " Paris"`. At the end, each session's whole answer.
use llmkv::{ChatMessage, Engine, Event, EventKind, FinishReason, SessionParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LLMKV_MODEL").ok())
        .ok_or("usage: two_sessions MODEL.gguf (or set LLMKV_MODEL)")?;
    let engine = Engine::builder(&model).n_threads(2).build()?;
    let info = engine.info()?;
    println!("model {} ({}, {} backend), libllmkv {}", info.model_name(), info.architecture(), info.backend_name(),
        llmkv::version_string());

    let questions = ["What is the capital of France?", "Name three colours of the rainbow."];
    let sessions = questions
        .iter()
        .enumerate()
        .map(|(i, q)| -> llmkv::Result<_> {
            let s = engine.session(&SessionParams::new().max_new_tokens(48).user_data(i + 1))?;
            let prompt = engine.chat_format(&[ChatMessage::system("Answer in one sentence."), ChatMessage::user(q)], true)?;
            s.append_text(prompt)?;
            s.generate(0)?;
            Ok(s)
        })
        .collect::<llmkv::Result<Vec<_>>>()?;

    // One event array and one text buffer, reused for every step: no allocation per token.
    let mut events = Event::buffer::<16>();
    let mut chunk = String::with_capacity(256);
    let mut answers = vec![String::new(); sessions.len()];
    let mut finished: Vec<Option<FinishReason>> = vec![None; sessions.len()];
    let mut n_tokens = vec![0usize; sessions.len()];
    while finished.iter().any(Option::is_none) {
        for ev in engine.step(&mut events)? {
            let i = ev.user_data() - 1;
            match ev.kind() {
                EventKind::Token(_) => n_tokens[i] += 1,
                EventKind::Done(r) => finished[i] = Some(r),
                EventKind::Error(st) => return Err(format!("session {}: {st}", i + 1).into()),
                EventKind::Unknown(_) => {}
            }
        }
        for (i, s) in sessions.iter().enumerate() {
            chunk.clear();
            if s.read_text_into(&mut chunk)? > 0 {
                println!("[{}] {:?}", i + 1, chunk);
                answers[i].push_str(&chunk);
            }
        }
    }
    for (i, a) in answers.iter().enumerate() {
        println!("session {} ({} tokens, {:?}): {}", i + 1, n_tokens[i], finished[i].unwrap(), a.trim());
    }
    Ok(())
}
