//! Send/Sync as the header's threading rules allow, checked at compile time.
use llmkv::{Engine, Error, Prefix, Session};

fn send_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    send_sync::<Engine>();
    send_sync::<Session<'static>>();
    send_sync::<Prefix<'static>>();
    send_sync::<Error>();
}
