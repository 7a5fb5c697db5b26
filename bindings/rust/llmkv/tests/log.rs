//! The process-wide log callback.
mod common;
use llmkv::{set_logger, LogLevel};
use std::sync::Mutex;

static SEEN: Mutex<Vec<(LogLevel, String)>> = Mutex::new(Vec::new());

fn record(level: LogLevel, msg: &str) {
    SEEN.lock().unwrap().push((level, msg.to_string()));
}

#[test]
fn the_logger_receives_the_library_messages() {
    let m = need_model!("the_logger_receives_the_library_messages");
    set_logger(Some(record), LogLevel::Debug);
    let engine = common::engine(&m);
    drop(engine);
    set_logger(None, LogLevel::Warn);
    let seen = SEEN.lock().unwrap().clone();
    assert!(!seen.is_empty(), "engine creation logs at INFO or DEBUG");
    assert!(seen.iter().all(|(_, msg)| !msg.is_empty() && !msg.ends_with('\n')), "{seen:?}");
    // After restoring the default, nothing more reaches the function.
    let n = seen.len();
    drop(common::engine(&m));
    assert_eq!(SEEN.lock().unwrap().len(), n);
}
