//! Errors: status codes, the library's detail messages, and bad arguments of every kind.
mod common;
use common::*;
use llmkv::{ChatMessage, Engine, Error, Grammar, SessionParams, Status, TokenizeFlags};

#[test]
fn status_codes_round_trip_and_match_the_library_names() {
    let mut seen = 0;
    for (name, value) in llmkv::sys::CONSTANTS {
        if !name.starts_with("LLMKV_ERR_") {
            continue;
        }
        let st = Status::from_code(*value as i32).expect("an error code is a Status");
        assert!(!matches!(st, Status::Unknown(_)), "{name} maps to Unknown");
        assert_eq!(st.code() as i64, *value);
        assert_eq!(st.name(), *name, "llmkv_status_string({value})");
        seen += 1;
    }
    assert_eq!(seen, 11, "the header's eleven error codes");
    assert_eq!(Status::from_code(0), None);
    assert_eq!(Status::from_code(-1234), Some(Status::Unknown(-1234)));
    assert_eq!(Status::Unknown(-1234).name(), "LLMKV_ERR_UNKNOWN");
    assert_eq!(Status::State.code(), -8);
}

#[test]
fn error_display_names_status_and_message() {
    let e = Error::new(Status::KvCapacity, "pool full");
    assert_eq!(e.to_string(), "LLMKV_ERR_KV_CAPACITY: pool full");
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("pool full"));
}

#[test]
fn library_version_is_0_5() {
    assert!(llmkv::version() >= 500, "library {} predates C API 0.5", llmkv::version_string());
    assert!(llmkv::version_string().starts_with("0."), "{}", llmkv::version_string());
}

#[test]
fn missing_model_file_is_io_with_the_path() {
    let e = Engine::new("/nonexistent/dir/missing-model.gguf").unwrap_err();
    assert_eq!(e.status, Status::Io, "{e}");
    assert!(e.message.contains("missing-model.gguf"), "message should name the file: {e}");
}

#[test]
fn malformed_model_file_is_model_format() {
    let d = tmpdir("errors-malformed");
    let p = d.join("garbage.gguf");
    std::fs::write(&p, b"GGUF but not really a model file at all, just some bytes....").unwrap();
    let e = Engine::new(&p).unwrap_err();
    assert_eq!(e.status, Status::ModelFormat, "{e}");
    assert!(!e.message.is_empty());
}

#[test]
fn interior_nul_in_path_is_invalid_argument() {
    let e = Engine::new("models/a\0b.gguf").unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("NUL"), "{e}");
    assert!(e.message.contains("model path"), "{e}");
}

#[test]
fn bad_engine_param_values_name_the_field() {
    let m = need_model!("bad_engine_param_values_name_the_field");
    for (b, field) in [
        (builder(&m).thread_priority(20), "thread_priority"),
        (builder(&m).thread_priority(-1), "thread_priority"),
        (builder(&m).spin_us(100_001), "spin_us"),
        (builder(&m).spin_us(-2), "spin_us"),
        (builder(&m).kv_residual_tokens(5000), "kv_residual_tokens"),
    ] {
        let e = b.build().unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{field}: {e}");
        assert!(e.message.contains(field), "message should name {field}: {e}");
    }
    let e = builder(&m).tp_size(257).build().unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "tp_size: {e}");
    assert!(e.message.contains("tp_size"), "message should name tp_size: {e}");
    // The 0.4 fields at their limits are accepted.
    let e = builder(&m).thread_priority(19).spin_us(100_000).build().unwrap();
    assert_eq!(e.info().unwrap().n_threads, 2);
}

#[test]
fn tokens_outside_the_vocabulary_are_rejected() {
    let m = need_model!("tokens_outside_the_vocabulary_are_rejected");
    let engine = engine(&m);
    let n_vocab = engine.info().unwrap().n_vocab as i32;
    assert!(n_vocab > 1000);
    let s = engine.session(&SessionParams::new()).unwrap();
    for bad in [n_vocab, -1, i32::MAX] {
        let e = s.append(&[1, bad]).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "append {bad}: {e}");
        assert!(e.message.contains("vocabulary") && e.message.contains(&bad.to_string()), "{e}");
        let e = engine.detokenize(&[bad]).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "detokenize {bad}: {e}");
        let e = engine.create_prefix(&[1, 2, bad]).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "prefix {bad}: {e}");
    }
    // Nothing was queued by the failed appends.
    assert_eq!(s.info().unwrap().n_tokens, 0);
    let e = engine.create_prefix(&[]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    engine.validate().unwrap();
}

#[test]
fn calls_in_the_wrong_state() {
    let m = need_model!("calls_in_the_wrong_state");
    let engine = engine(&m);
    let s = engine.session(&SessionParams::new()).unwrap();
    let e = s.generate(4).unwrap_err();
    assert_eq!(e.status, Status::State, "generate on an empty session: {e}");
    assert!(e.message.contains("append"), "says what to do: {e}");
    let e = s.cancel().unwrap_err();
    assert_eq!(e.status, Status::State, "cancel while idle: {e}");
    let e = s.park().unwrap_err();
    assert_eq!(e.status, Status::Unsupported, "park without a host tier: {e}");
    assert!(e.message.contains("host"), "{e}");
    s.append_text("Hello").unwrap();
    s.generate(4).unwrap();
    let e = s.generate(4).unwrap_err();
    assert_eq!(e.status, Status::State, "generate twice: {e}");
    let e = s.append_text(" more").unwrap_err();
    assert_eq!(e.status, Status::State, "append while generating: {e}");
    let e = s.fork().unwrap_err();
    assert_eq!(e.status, Status::State, "fork while generating: {e}");
    // The session is still fine.
    let out = drive(&engine, &[&s]).remove(0);
    assert_eq!(out.tokens.len(), 4);
}

#[test]
fn errors_carry_the_message_of_their_own_call() {
    let m = need_model!("errors_carry_the_message_of_their_own_call");
    let engine = engine(&m);
    let e1 = engine.chat_format(&[ChatMessage::new("wizard", "hi")], true).unwrap_err();
    assert_eq!(e1.status, Status::InvalidArgument);
    assert!(e1.message.contains("wizard"), "names the role: {e1}");
    let s = engine.session(&SessionParams::new()).unwrap();
    let e2 = s.generate(1).unwrap_err();
    assert_eq!(e2.status, Status::State);
    assert!(!e2.message.contains("wizard"), "a stale message: {e2}");
    assert_ne!(e1.message, e2.message);
}

#[test]
fn chat_and_tokenizer_input_errors() {
    let m = need_model!("chat_and_tokenizer_input_errors");
    let engine = engine(&m);
    // A NUL byte cannot be passed in a C string: the binding refuses it.
    let e = engine.chat_format(&[ChatMessage::user("a\0b")], true).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("message 0's content") && e.message.contains("NUL"), "{e}");
    // Text arguments with a length carry NUL bytes through.
    let with_nul = engine.tokenize("a\0b", TokenizeFlags::NONE).unwrap();
    assert!(!with_nul.is_empty());
    // STRICT: a byte SmolLM2's vocabulary cannot spell (0x04) is an error; otherwise dropped.
    let e = engine.tokenize("a\u{4}b", TokenizeFlags::STRICT).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    assert!(e.message.contains("0x04"), "names the byte: {e}");
    let lax = engine.tokenize("a\u{4}b", TokenizeFlags::NONE).unwrap();
    assert_eq!(engine.detokenize(&lax).unwrap(), b"ab");
    // Invalid UTF-8 is tokenized byte by byte and comes back unchanged.
    let bytes: &[u8] = b"caf\xc3";
    let t = engine.tokenize(bytes, TokenizeFlags::NONE).unwrap();
    assert_eq!(engine.detokenize(&t).unwrap(), bytes);
}

#[test]
fn bad_grammars_and_session_params() {
    let m = need_model!("bad_grammars_and_session_params");
    let engine = engine(&m);
    let e = engine
        .session(&SessionParams::new().grammar(Grammar::Gbnf { text: "root ::= \"a\" | (", root: None }))
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("line"), "GBNF errors give the line: {e}");
    let e = engine.session(&SessionParams::new().grammar(Grammar::JsonSchema("{\"type\": 7}"))).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    let e = engine
        .session(&SessionParams::new().grammar(Grammar::Gbnf { text: "root ::= \"a\"", root: Some("ro\0ot") }))
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("grammar root"), "{e}");
    let e = engine.session(&SessionParams::new().stop_strings(&[""])).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "an empty stop string: {e}");
    let n_vocab = engine.info().unwrap().n_vocab as i32;
    let e = engine.session(&SessionParams::new().stop_tokens(&[n_vocab])).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "a stop token outside the vocabulary: {e}");
    let s = engine.session(&SessionParams::new()).unwrap();
    let e = s.set_grammar(Grammar::Gbnf { text: "root ::= (", root: None }).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
}

#[test]
fn a_prefix_of_another_engine_is_refused() {
    let m = need_model!("a_prefix_of_another_engine_is_refused");
    let e1 = engine(&m);
    let e2 = engine(&m);
    let toks = e1.tokenize("You are a helpful assistant.", TokenizeFlags::NONE).unwrap();
    let p = e1.create_prefix(&toks).unwrap();
    let err = e2.session(&SessionParams::new().prefix(&p)).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("another engine"), "{err}");
    assert!(e1.session(&SessionParams::new().prefix(&p)).is_ok());
}
