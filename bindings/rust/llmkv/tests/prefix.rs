//! Prefix handles and snapshots.
mod common;
use common::*;
use llmkv::{ChatMessage, PrefixLoadFlags, SessionParams, Status, TokenizeFlags};

const SYSTEM: &str = "You are the innkeeper of the Prancing Pony in the village of Bree. You are cheerful, \
talkative and know every rumour of the road. You answer travellers in two or three sentences, \
always mention the weather, and never reveal the secrets of the rangers.";

fn system_tokens(engine: &llmkv::Engine) -> Vec<i32> {
    let text = engine.chat_format(&[ChatMessage::system(SYSTEM)], false).unwrap();
    let t = engine.tokenize(text, TokenizeFlags::PARSE_SPECIAL | TokenizeFlags::ADD_BOS).unwrap();
    assert!(t.len() > 40, "the system prompt spans several blocks ({} tokens)", t.len());
    t
}

const USER: &str = "<|im_start|>user\nWhat news from the road?<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn a_session_from_a_prefix_matches_one_without() {
    let m = need_model!("a_session_from_a_prefix_matches_one_without");
    // Without the automatic prefix cache, the plain session computes everything itself.
    let engine = builder(&m).prefix_cache(false).build().unwrap();
    let sys_toks = system_tokens(&engine);
    let p = engine.create_prefix(&sys_toks).unwrap();
    assert_eq!(p.n_tokens(), sys_toks.len());
    assert_eq!(p.tokens().unwrap(), sys_toks);
    let with = engine.session(&SessionParams::new().prefix(&p)).unwrap();
    assert_eq!(with.tokens().unwrap(), sys_toks);
    with.append_text(USER).unwrap();
    with.generate(16).unwrap();
    let before = engine.stats().unwrap().tokens_prefilled;
    let a = drive(&engine, &[&with]).remove(0);
    let prefilled_with = engine.stats().unwrap().tokens_prefilled - before;
    let plain = engine.session(&SessionParams::new()).unwrap();
    plain.append(&sys_toks).unwrap();
    plain.append_text(USER).unwrap();
    plain.generate(16).unwrap();
    let before = engine.stats().unwrap().tokens_prefilled;
    let b = drive(&engine, &[&plain]).remove(0);
    let prefilled_plain = engine.stats().unwrap().tokens_prefilled - before;
    assert_eq!(a.tokens.len(), 16);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.text, b.text);
    assert!(
        prefilled_with + (sys_toks.len() as u64) / 2 < prefilled_plain,
        "the prefix's tokens were recomputed ({prefilled_with} vs {prefilled_plain})"
    );
    // The prefix outlives nothing it should not: released while sessions made from it live.
    drop(p);
    with.append_text("<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n").unwrap();
    with.generate(4).unwrap();
    assert_eq!(drive(&engine, &[&with])[0].tokens.len(), 4);
    engine.validate().unwrap();
}

#[test]
fn snapshots_save_load_and_reject_corruption() {
    let m = need_model!("snapshots_save_load_and_reject_corruption");
    let dir = tmpdir("prefix-snapshots");
    let path = dir.join("system.snap");
    let reference = {
        let engine = engine(&m);
        let toks = system_tokens(&engine);
        let p = engine.create_prefix(&toks).unwrap();
        p.save(&path).unwrap();
        let s = engine.session(&SessionParams::new().prefix(&p)).unwrap();
        s.append_text(USER).unwrap();
        s.generate(12).unwrap();
        drive(&engine, &[&s]).remove(0)
    };
    assert!(path.metadata().unwrap().len() > 1000);
    // A new engine loads it, no recomputation, same continuation.
    let engine = engine(&m);
    let before = engine.stats().unwrap().tokens_prefilled;
    let p = engine.load_prefix(&path, PrefixLoadFlags::NONE).unwrap();
    assert_eq!(engine.stats().unwrap().tokens_prefilled, before, "loading recomputed tokens");
    assert_eq!(p.tokens().unwrap(), system_tokens(&engine));
    let s = engine.session(&SessionParams::new().prefix(&p)).unwrap();
    s.append_text(USER).unwrap();
    s.generate(12).unwrap();
    assert_eq!(drive(&engine, &[&s]).remove(0).tokens, reference.tokens);
    // load_ex with flags works too.
    let shared = engine.load_prefix(&path, PrefixLoadFlags::SHARE).unwrap();
    assert_eq!(shared.n_tokens(), p.n_tokens());
    let e = engine.load_prefix(&path, PrefixLoadFlags::from_bits_retain(0x80)).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "unknown flag bits: {e}");

    // Corruption: a flipped byte in the middle, a truncated file, garbage.
    let bytes = std::fs::read(&path).unwrap();
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let cases: [(&str, Vec<u8>); 3] = [
        ("flipped", flipped),
        ("truncated", bytes[..bytes.len() - 100].to_vec()),
        ("garbage", b"this is not a snapshot".repeat(50)),
    ];
    let before = engine.stats().unwrap();
    for (name, data) in cases {
        let bad = dir.join(format!("{name}.snap"));
        std::fs::write(&bad, data).unwrap();
        let e = engine.load_prefix(&bad, PrefixLoadFlags::NONE).unwrap_err();
        assert_eq!(e.status, Status::SnapshotFormat, "{name}: {e}");
        assert!(!e.message.is_empty(), "{name}");
    }
    let after = engine.stats().unwrap();
    assert_eq!(before.blocks_used, after.blocks_used, "a failed load left blocks behind");
    engine.validate().unwrap();
    let e = engine.load_prefix(dir.join("missing.snap"), PrefixLoadFlags::NONE).unwrap_err();
    assert_eq!(e.status, Status::Io, "{e}");
    let e = p.save("/nonexistent-dir/x.snap").unwrap_err();
    assert_eq!(e.status, Status::Io, "{e}");
}

#[test]
fn session_to_prefix() {
    let m = need_model!("session_to_prefix");
    let engine = engine(&m);
    let s = engine.session(&SessionParams::new()).unwrap();
    assert_eq!(s.to_prefix().unwrap_err().status, Status::State, "an empty session");
    s.append_text(PROMPTS[5]).unwrap();
    s.generate(5).unwrap();
    drive(&engine, &[&s]);
    let p = s.to_prefix().unwrap();
    assert_eq!(p.tokens().unwrap(), s.tokens().unwrap());
    let t = engine.session(&SessionParams::new().prefix(&p)).unwrap();
    t.generate(6).unwrap();
    s.generate(6).unwrap();
    let out = drive(&engine, &[&s, &t]);
    assert_eq!(out[0].tokens, out[1].tokens);
}

#[test]
fn a_prefix_larger_than_the_pool_is_kv_capacity() {
    let m = need_model!("a_prefix_larger_than_the_pool_is_kv_capacity");
    let engine = builder(&m).kv_device_bytes(1 << 20).max_sessions(4).build().unwrap();
    let info = engine.info().unwrap();
    let long: String = (0..200).map(|i| format!("word{i} ")).collect();
    let toks = engine.tokenize(&long, TokenizeFlags::NONE).unwrap();
    let pool_tokens = info.kv_device_bytes / info.kv_bytes_per_token_device.max(1);
    assert!(toks.len() as u64 > 2 * pool_tokens, "{} tokens vs a pool of {pool_tokens}", toks.len());
    let e = engine.create_prefix(&toks).unwrap_err();
    assert_eq!(e.status, Status::KvCapacity, "{e}");
    assert!(!e.message.is_empty());
    // Nothing was kept, and a small prefix still fits.
    assert_eq!(engine.stats().unwrap().blocks_used, 0);
    engine.validate().unwrap();
    let small = engine.create_prefix(&toks[..8]).unwrap();
    assert_eq!(small.n_tokens(), 8);
}
