//! Worker mode (C API 0.4): the engine's own thread steps; the host submits and polls.
mod common;
use common::*;
use llmkv::{Engine, Event, EventKind, FinishReason, Session, SessionParams, Status, SubmitFlags};
use std::time::Duration;

/// Polls until every session got DONE or ERROR; reads each session's text after each poll.
fn poll_until_done(engine: &Engine, sessions: &[&Session<'_>]) -> Vec<Outcome> {
    let mut out = vec![Outcome::default(); sessions.len()];
    let mut events = Event::buffer::<16>();
    for _ in 0..6000 {
        for ev in engine.poll(&mut events, Duration::from_millis(100)).expect("poll") {
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
    panic!("the worker did not finish the requests: {out:?}");
}

#[test]
fn submitted_requests_give_the_tokens_of_step_mode() {
    let m = need_model!("submitted_requests_give_the_tokens_of_step_mode");
    let engine = engine(&m);
    let reference: Vec<Outcome> = PROMPTS[..3].iter().map(|p| generate_alone(&engine, p, 16)).collect();

    engine.start_worker().unwrap();
    let e = engine.start_worker().unwrap_err();
    assert_eq!(e.status, Status::State, "started twice: {e}");
    let mut events = Event::buffer::<4>();
    let e = engine.step(&mut events).unwrap_err();
    assert_eq!(e.status, Status::State, "step while the worker runs: {e}");

    let sessions: Vec<Session> = (0..3).map(|_| engine.session(&SessionParams::new()).unwrap()).collect();
    for (s, p) in sessions.iter().zip(PROMPTS) {
        s.submit_text(p, SubmitFlags::GENERATE, 16).unwrap();
    }
    let refs: Vec<&Session> = sessions.iter().collect();
    let out = poll_until_done(&engine, &refs);
    for i in 0..3 {
        assert_eq!(out[i].finish, Some(FinishReason::Length), "{:?}", out[i]);
        assert_eq!(out[i].tokens, reference[i].tokens, "session {i}");
        assert_eq!(out[i].text, reference[i].text, "session {i}");
        assert_eq!(sessions[i].submit_error().unwrap(), "", "no failed request");
    }

    // A second turn: append without generating, then generate with an empty submit.
    sessions[0].submit_text(" Next,", SubmitFlags::NONE, 0).unwrap();
    sessions[0].submit_tokens(&[], SubmitFlags::GENERATE, 4).unwrap();
    let turn = poll_until_done(&engine, &[&sessions[0]]).remove(0);
    assert_eq!(turn.tokens.len(), 4);

    engine.stop_worker().unwrap();
    engine.stop_worker().unwrap(); // stopping a stopped worker does nothing
    assert!(engine.step(&mut events).unwrap().is_empty());
    engine.validate().unwrap();
}

#[test]
fn a_failed_submission_arrives_as_an_error_event() {
    let m = need_model!("a_failed_submission_arrives_as_an_error_event");
    let engine = engine(&m);
    let n_vocab = engine.info().unwrap().n_vocab as i32;
    engine.start_worker().unwrap();
    let bad_token = engine.session(&SessionParams::new()).unwrap();
    let empty = engine.session(&SessionParams::new()).unwrap();
    bad_token.submit_tokens(&[1, 2, n_vocab], SubmitFlags::GENERATE, 4).unwrap();
    empty.submit_text("", SubmitFlags::GENERATE, 4).unwrap();
    let out = poll_until_done(&engine, &[&bad_token, &empty]);
    assert_eq!(out[0].error, Some(Status::InvalidArgument), "{:?}", out[0]);
    assert!(out[0].tokens.is_empty());
    let msg = bad_token.submit_error().unwrap();
    assert!(!msg.is_empty(), "submit_error gives the message");
    assert!(msg.contains("vocabulary") && msg.contains(&n_vocab.to_string()), "{msg}");
    assert_eq!(out[1].error, Some(Status::State), "generate with nothing to continue: {:?}", out[1]);
    assert!(!empty.submit_error().unwrap().is_empty());
    // The sessions are as before the requests.
    assert_eq!(bad_token.info().unwrap().n_tokens, 0);
    assert_eq!(empty.info().unwrap().n_tokens, 0);
    // Errors returned at once: unknown flag bits.
    let e = empty.submit_text("x", SubmitFlags::from_bits_retain(0x100), 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    let e = empty.submit_tokens(&[1], SubmitFlags::from_bits_retain(0x8000_0000), 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    // A later good request of the same session works; its submit_error stays the old one
    // ("the last submitted request that failed").
    bad_token.submit_text(PROMPTS[0], SubmitFlags::GENERATE, 3).unwrap();
    let ok = poll_until_done(&engine, &[&bad_token]).remove(0);
    assert_eq!(ok.tokens.len(), 3);
    engine.stop_worker().unwrap();
}

#[test]
fn submit_cancel_stops_generation() {
    let m = need_model!("submit_cancel_stops_generation");
    let engine = engine(&m);
    engine.start_worker().unwrap();
    // End-of-generation tokens are banned, so only the cancel can end it early.
    let s = engine.session(&SessionParams::new().min_new_tokens(400)).unwrap();
    s.submit_text(PROMPTS[1], SubmitFlags::GENERATE, 400).unwrap();
    let mut tokens = Vec::new();
    let mut finish = None;
    let mut events = Event::buffer::<8>();
    let mut cancelled = false;
    for _ in 0..6000 {
        for ev in engine.poll(&mut events, Duration::from_millis(100)).unwrap() {
            match ev.kind() {
                EventKind::Token(t) => tokens.push(t),
                EventKind::Done(r) => finish = Some(r),
                other => panic!("{other:?}"),
            }
        }
        if tokens.len() >= 3 && !cancelled {
            s.submit_cancel().unwrap();
            cancelled = true;
        }
        if finish.is_some() {
            break;
        }
    }
    assert_eq!(finish, Some(FinishReason::Cancelled));
    assert!(tokens.len() < 400);
    engine.stop_worker().unwrap();
    let info = s.info().unwrap();
    assert_eq!(info.n_generated as usize, tokens.len());
    assert_eq!(info.n_cached, info.n_tokens - 1);
    // A cancel for a session that is not generating is ignored (no error event).
    s.submit_cancel().unwrap();
    let mut events = Event::buffer::<8>();
    assert!(engine.step(&mut events).unwrap().is_empty());
}

#[test]
fn other_threads_submit_while_one_polls() {
    let m = need_model!("other_threads_submit_while_one_polls");
    let engine = engine(&m);
    let reference = [generate_alone(&engine, PROMPTS[4], 10), generate_alone(&engine, PROMPTS[7], 10)];
    engine.start_worker().unwrap();
    let a = engine.session(&SessionParams::new()).unwrap();
    let b = engine.session(&SessionParams::new()).unwrap();
    let out = std::thread::scope(|scope| {
        // Sessions are Sync: a "game logic" thread submits while this one polls.
        scope.spawn(|| a.submit_text(PROMPTS[4], SubmitFlags::GENERATE, 10).unwrap());
        scope.spawn(|| b.submit_text(PROMPTS[7], SubmitFlags::GENERATE, 10).unwrap());
        poll_until_done(&engine, &[&a, &b])
    });
    assert_eq!(out[0].tokens, reference[0].tokens);
    assert_eq!(out[1].tokens, reference[1].tokens);
    assert_eq!(out[0].text, reference[0].text);
    // The engine itself can move to another thread and be dropped there, worker running.
    drop((a, b));
    std::thread::spawn(move || drop(engine)).join().unwrap();
}

#[test]
fn without_the_worker_a_step_carries_out_submissions() {
    let m = need_model!("without_the_worker_a_step_carries_out_submissions");
    let engine = engine(&m);
    let reference = generate_alone(&engine, PROMPTS[5], 6);
    let s = engine.session(&SessionParams::new()).unwrap();
    s.submit_text(PROMPTS[5], SubmitFlags::GENERATE, 6).unwrap();
    let out = drive(&engine, &[&s]).remove(0);
    assert_eq!(out.tokens, reference.tokens);
    // A failing submission comes as an ERROR event from the step too.
    let n_vocab = engine.info().unwrap().n_vocab as i32;
    s.submit_tokens(&[n_vocab + 5], SubmitFlags::GENERATE, 2).unwrap();
    let out = drive(&engine, &[&s]).remove(0);
    assert_eq!(out.error, Some(Status::InvalidArgument));
    assert!(s.submit_error().unwrap().contains(&(n_vocab + 5).to_string()));
}
