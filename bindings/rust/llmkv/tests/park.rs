//! Parking a session in the host tier.
mod common;
use common::*;
use llmkv::{SessionParams, SessionState, Tier};

#[test]
fn a_parked_session_resumes_with_the_same_tokens() {
    let m = need_model!("a_parked_session_resumes_with_the_same_tokens");
    let engine = builder(&m).kv_host_bytes(64 << 20).build().unwrap();
    let parked = engine.session(&SessionParams::new()).unwrap();
    let plain = engine.session(&SessionParams::new()).unwrap();
    for s in [&parked, &plain] {
        s.append_text(PROMPTS[6]).unwrap();
        s.generate(20).unwrap();
    }
    let first = drive(&engine, &[&parked, &plain]);
    assert_eq!(first[0].tokens, first[1].tokens);
    assert!(parked.info().unwrap().n_blocks > 0, "the session has sealed blocks to move");

    parked.park().unwrap();
    let info = parked.info().unwrap();
    assert_eq!(info.tier, Tier::Host);
    assert_eq!(info.state, SessionState::Parked);
    // Parking a parked session does nothing.
    parked.park().unwrap();
    let stats = engine.stats().unwrap();
    assert_eq!(stats.parks, 1);
    assert!(stats.host_blocks > 0);
    engine.validate().unwrap();

    for s in [&parked, &plain] {
        s.append_text(" Then").unwrap();
        s.generate(12).unwrap();
    }
    let second = drive(&engine, &[&parked, &plain]);
    assert_eq!(second[0].tokens.len(), 12);
    assert_eq!(second[0].tokens, second[1].tokens);
    assert_eq!(second[0].text, second[1].text);
    assert_eq!(parked.info().unwrap().tier, Tier::Device);
    let stats = engine.stats().unwrap();
    assert!(stats.resumes >= 1 && stats.bytes_to_host > 0 && stats.bytes_to_device > 0, "{stats:?}");
    engine.validate().unwrap();
}
