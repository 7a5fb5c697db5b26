//! Generation over the real model: determinism, batching, fork, cancellation, a full pool.
mod common;
use common::*;
use llmkv::{ChatMessage, Event, EventKind, FinishReason, SessionParams, SessionState, Status, TokenizeFlags};

#[test]
fn engine_info_tokenizer_and_chat_format() {
    let m = need_model!("engine_info_tokenizer_and_chat_format");
    let engine = engine(&m);
    let info = engine.info().unwrap();
    assert_eq!(info.architecture(), "llama");
    assert_eq!(info.backend_name(), "cpu");
    assert_eq!(info.n_vocab, 49152);
    assert_eq!(info.n_threads, 2);
    assert!(info.eos_token().is_some());
    let toks = engine.tokenize("Hello, world!", TokenizeFlags::NONE).unwrap();
    assert!(!toks.is_empty() && toks.len() < 13);
    assert_eq!(engine.detokenize_to_string(&toks).unwrap(), "Hello, world!");
    let chat = engine
        .chat_format(&[ChatMessage::system("Be brief."), ChatMessage::user("Hi there")], true)
        .unwrap();
    assert!(chat.contains("<|im_start|>user\nHi there<|im_end|>"), "{chat:?}");
    assert!(chat.ends_with("<|im_start|>assistant\n"), "{chat:?}");
    let special = engine.tokenize("<|im_start|>", TokenizeFlags::PARSE_SPECIAL).unwrap();
    assert_eq!(special.len(), 1);
    let stats = engine.stats().unwrap();
    assert!(stats.blocks_total > 0);
    assert_eq!(stats.sessions_total, 0);
}

#[test]
fn greedy_generation_is_deterministic_and_text_matches_tokens() {
    let m = need_model!("greedy_generation_is_deterministic_and_text_matches_tokens");
    let engine = engine(&m);
    let a = generate_alone(&engine, PROMPTS[0], 12);
    let b = generate_alone(&engine, PROMPTS[0], 12);
    assert_eq!(a.finish, Some(FinishReason::Length));
    assert_eq!(a.tokens.len(), 12);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.text, engine.detokenize_to_string(&a.tokens).unwrap());
    assert!(!a.text.trim().is_empty());
    engine.validate().unwrap();
}

#[test]
fn eight_concurrent_sessions_match_each_alone() {
    let m = need_model!("eight_concurrent_sessions_match_each_alone");
    let engine = engine(&m);
    let alone: Vec<Outcome> = PROMPTS.iter().map(|p| generate_alone(&engine, p, 16)).collect();
    let sessions: Vec<_> = (0..8).map(|i| engine.session(&SessionParams::new().user_data(100 + i)).unwrap()).collect();
    for (s, p) in sessions.iter().zip(PROMPTS) {
        s.append_text(p).unwrap();
        s.generate(16).unwrap();
    }
    let refs: Vec<_> = sessions.iter().collect();
    let together = drive(&engine, &refs);
    for i in 0..8 {
        assert_eq!(together[i].tokens, alone[i].tokens, "session {i} ({:?})", PROMPTS[i]);
        assert_eq!(together[i].text, alone[i].text, "session {i}");
        assert_eq!(together[i].finish, alone[i].finish);
    }
    // The prompts differ, so the sessions do too: the comparison means something.
    assert_ne!(alone[0].tokens, alone[1].tokens);
    assert!(engine.stats().unwrap().steps > 0);
    engine.validate().unwrap();
}

#[test]
fn events_carry_user_data_and_run_drives_to_the_end() {
    let m = need_model!("events_carry_user_data_and_run_drives_to_the_end");
    let engine = engine(&m);
    let a = engine.session(&SessionParams::new().user_data(7).max_new_tokens(5)).unwrap();
    let b = engine.session(&SessionParams::new().user_data(9).max_new_tokens(6)).unwrap();
    a.append_text(PROMPTS[3]).unwrap();
    b.append_text(PROMPTS[4]).unwrap();
    a.generate(0).unwrap();
    b.generate(0).unwrap();
    let (mut na, mut nb, mut done) = (0, 0, 0);
    let mut text_a = String::new();
    engine
        .run(|ev| {
            // The closure may call into the engine's sessions.
            a.read_text_into(&mut text_a).unwrap();
            match (ev.user_data(), ev.kind()) {
                (7, EventKind::Token(_)) => na += 1,
                (9, EventKind::Token(_)) => nb += 1,
                (_, EventKind::Done(r)) => {
                    assert_eq!(r, FinishReason::Length);
                    done += 1
                }
                other => panic!("unexpected event {other:?}"),
            }
        })
        .unwrap();
    a.read_text_into(&mut text_a).unwrap();
    assert_eq!((na, nb, done), (5, 6, 2));
    assert_eq!(text_a, engine.detokenize_to_string(&a.tokens().unwrap()[a.tokens().unwrap().len() - 5..]).unwrap());
    assert_eq!(b.info().unwrap().n_generated, 6);
    assert_eq!(b.info().unwrap().state, SessionState::Finished);
}

#[test]
fn a_fork_continues_identically() {
    let m = need_model!("a_fork_continues_identically");
    let engine = engine(&m);
    let s = engine.session(&SessionParams::new()).unwrap();
    s.append_text(PROMPTS[1]).unwrap();
    s.generate(6).unwrap();
    drive(&engine, &[&s]);
    let f = s.fork().unwrap();
    assert_eq!(f.tokens().unwrap(), s.tokens().unwrap());
    assert_ne!(f.id(), s.id());
    s.generate(10).unwrap();
    f.generate(10).unwrap();
    let out = drive(&engine, &[&s, &f]);
    assert_eq!(out[0].tokens.len(), 10);
    assert_eq!(out[0].tokens, out[1].tokens);
    assert_eq!(out[0].text, out[1].text);
    // And both match one session that generated 16 without a fork.
    let whole = generate_alone(&engine, PROMPTS[1], 16);
    assert_eq!(&whole.tokens[6..], &out[0].tokens[..]);
    drop(s);
    // The fork outlives its parent.
    f.append_text(" And").unwrap();
    f.generate(2).unwrap();
    assert_eq!(drive(&engine, &[&f])[0].tokens.len(), 2);
    engine.validate().unwrap();
}

#[test]
fn cancel_during_generation_keeps_the_kv() {
    let m = need_model!("cancel_during_generation_keeps_the_kv");
    let engine = engine(&m);
    // End-of-generation tokens are banned, so only the cancel can end it early.
    let s = engine.session(&SessionParams::new().min_new_tokens(200)).unwrap();
    s.append_text(PROMPTS[2]).unwrap();
    let prompt_len = s.info().unwrap().n_tokens;
    s.generate(200).unwrap();
    let mut got = Vec::new();
    let mut finish = None;
    let mut events = Event::buffer::<8>();
    let mut cancelled = false;
    while finish.is_none() {
        for ev in engine.step(&mut events).unwrap() {
            match ev.kind() {
                EventKind::Token(t) => got.push(t),
                EventKind::Done(r) => finish = Some(r),
                other => panic!("{other:?}"),
            }
        }
        if got.len() >= 4 && !cancelled {
            s.cancel().unwrap();
            cancelled = true;
        }
    }
    assert_eq!(finish, Some(FinishReason::Cancelled));
    assert!(got.len() >= 4 && got.len() < 200, "{} tokens", got.len());
    let info = s.info().unwrap();
    assert_eq!(info.finish_reason, FinishReason::Cancelled);
    assert_eq!(info.n_generated as usize, got.len());
    assert_eq!(info.n_tokens as usize, prompt_len as usize + got.len());
    assert_eq!(info.n_cached, info.n_tokens - 1, "the KV of every token but the last is kept");
    let ctx = s.tokens().unwrap();
    assert_eq!(&ctx[prompt_len as usize..], &got[..]);
    // Continuing from the kept KV gives what a fresh session with the same context gives.
    let before = engine.stats().unwrap().tokens_prefilled;
    s.append_text(" # next").unwrap();
    s.generate(8).unwrap();
    let cont = drive(&engine, &[&s]).remove(0);
    let prefilled = engine.stats().unwrap().tokens_prefilled - before;
    assert!(prefilled < 10, "continuing recomputed {prefilled} tokens: the KV was not kept");
    let fresh = engine.session(&SessionParams::new().min_new_tokens(200)).unwrap();
    fresh.append(&ctx).unwrap();
    fresh.append_text(" # next").unwrap();
    fresh.generate(8).unwrap();
    let again = drive(&engine, &[&fresh]).remove(0);
    assert_eq!(cont.tokens, again.tokens);
}

#[test]
fn a_full_pool_is_kv_capacity() {
    let m = need_model!("a_full_pool_is_kv_capacity");
    let engine = builder(&m).max_sessions(2).build().unwrap();
    let a = engine.session(&SessionParams::new()).unwrap();
    let b = engine.session(&SessionParams::new()).unwrap();
    let e = engine.session(&SessionParams::new()).unwrap_err();
    assert_eq!(e.status, Status::KvCapacity, "{e}");
    assert!(!e.message.is_empty());
    // A prefix handle counts too, and so does a fork.
    a.append_text("Hi").unwrap();
    let toks = engine.tokenize("Hello", TokenizeFlags::NONE).unwrap();
    assert_eq!(engine.create_prefix(&toks).unwrap_err().status, Status::KvCapacity);
    assert_eq!(a.fork().unwrap_err().status, Status::KvCapacity);
    drop(b);
    let c = engine.session(&SessionParams::new()).unwrap();
    c.append_text(PROMPTS[0]).unwrap();
    c.generate(3).unwrap();
    assert_eq!(drive(&engine, &[&c])[0].tokens.len(), 3);
}

#[test]
fn stop_strings_and_grammar() {
    let m = need_model!("stop_strings_and_grammar");
    let engine = engine(&m);
    let free = generate_alone(&engine, PROMPTS[1], 24);
    // Stop at the third word the model generates: the text ends just before it.
    let stop = free.text.split_whitespace().nth(2).expect("three words in 24 tokens").to_string();
    let cut = free.text.find(stop.as_str()).unwrap();
    let stops = [stop.as_str()];
    let s = engine.session(&SessionParams::new().stop_strings(&stops)).unwrap();
    s.append_text(PROMPTS[1]).unwrap();
    s.generate(24).unwrap();
    let out = drive(&engine, &[&s]).remove(0);
    assert_eq!(out.finish, Some(FinishReason::Stop));
    assert_eq!(out.text, free.text[..cut], "stop string {stop:?}");
    assert_eq!(s.info().unwrap().stop_string, Some(0));
    // A GBNF grammar forces the answer.
    let g = engine
        .session(&SessionParams::new().grammar(llmkv::Grammar::Gbnf { text: "root ::= \"yes\" | \"no\"", root: None }))
        .unwrap();
    g.append_text("Is the sky blue? Answer:").unwrap();
    g.generate(8).unwrap();
    let out = drive(&engine, &[&g]).remove(0);
    assert!(out.text == "yes" || out.text == "no", "{:?}", out.text);
    assert_eq!(out.finish, Some(FinishReason::Stop));
    // (After STOP the grammar starts over, so it is not "complete" any more.)
    assert!(g.info().unwrap().has_grammar);
}

#[test]
fn text_waiting_beyond_one_buffer_is_read_whole() {
    let m = need_model!("text_waiting_beyond_one_buffer_is_read_whole");
    let engine = engine(&m);
    let s = engine.session(&SessionParams::new().min_new_tokens(120)).unwrap();
    s.append_text(PROMPTS[1]).unwrap();
    s.generate(120).unwrap();
    let mut tokens = Vec::new();
    let mut events = Event::buffer::<4>(); // smaller than a step's events: the rest stay queued
    let mut done = false;
    while !done {
        for ev in engine.step(&mut events).unwrap() {
            match ev.kind() {
                EventKind::Token(t) => tokens.push(t),
                EventKind::Done(r) => {
                    assert_eq!(r, FinishReason::Length);
                    done = true
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(tokens.len(), 120);
    // Nothing was read while generating: one call must return all of it.
    let mut text = String::new();
    let n = s.read_text_into(&mut text).unwrap();
    assert!(n > 300, "{n} bytes");
    assert_eq!(n, text.len());
    assert_eq!(text, engine.detokenize_to_string(&tokens).unwrap());
    assert_eq!(s.read_text_into(&mut text).unwrap(), 0, "nothing left");
    let mut bytes = Vec::new();
    assert_eq!(s.read_bytes_into(&mut bytes).unwrap(), 0);
}

#[test]
fn run_keeps_stepping_through_steps_without_events() {
    let m = need_model!("run_keeps_stepping_through_steps_without_events");
    // A 16-token step budget: the long prompt's prefill takes several steps with no event.
    let engine = builder(&m).max_batch_tokens(16).prefix_cache(false).build().unwrap();
    let long: String = (0..60).map(|i| format!("w{i} ")).collect();
    let reference = generate_alone(&engine, &long, 4);
    let s = engine.session(&SessionParams::new()).unwrap();
    s.append_text(&long).unwrap();
    s.generate(4).unwrap();
    let steps_before = engine.stats().unwrap().steps;
    let mut tokens = Vec::new();
    let mut finish = None;
    engine
        .run(|ev| match ev.kind() {
            EventKind::Token(t) => tokens.push(t),
            EventKind::Done(r) => finish = Some(r),
            other => panic!("{other:?}"),
        })
        .unwrap();
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(tokens, reference.tokens);
    assert!(engine.stats().unwrap().steps - steps_before > 5, "the prefill was chunked");
}
