//! Parameter builders start from the library's defaults (no model needed).
use llmkv::{Engine, KvDtype, SessionParams};

#[test]
fn session_params_start_from_the_library_defaults() {
    let p = SessionParams::new();
    let s = p.get_sampling();
    assert_eq!((s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty), (0.0, 0, 1.0, 0.0, 1.0), "greedy");
    assert_eq!(p.raw().struct_size as usize, std::mem::size_of::<llmkv::sys::llmkv_session_params>());
    assert_eq!(p.raw().max_new_tokens, 0);
    let p = p.temperature(0.7).top_k(40).top_p(0.9).min_p(0.05).seed(42).repeat_penalty(1.1, 32).max_new_tokens(9).priority(3);
    let s = p.get_sampling();
    assert_eq!((s.temperature, s.top_k, s.top_p, s.min_p, s.seed), (0.7, 40, 0.9, 0.05, 42));
    assert_eq!((s.repeat_penalty, s.repeat_last_n), (1.1, 32));
    assert_eq!((p.raw().max_new_tokens, p.raw().priority), (9, 3));
}

#[test]
fn engine_params_start_from_the_library_defaults() {
    let b = Engine::builder("x.gguf");
    let r = *b.raw();
    assert_eq!(r.struct_size as usize, std::mem::size_of::<llmkv::sys::llmkv_engine_params>());
    assert_eq!(r.struct_size, 120, "the 0.5 size");
    assert_eq!((r.spin_us, r.thread_priority), (-1, 0), "0.4 defaults");
    assert_eq!((r.tp_size, r.tp_transport), (0, std::ptr::null()), "0.5 defaults");
    assert_eq!(r.flags & llmkv::sys::LLMKV_ENGINE_PREFIX_CACHE, llmkv::sys::LLMKV_ENGINE_PREFIX_CACHE);
    let b = b.spin_us(50).thread_priority(7).kv_dtype(KvDtype::Int8, KvDtype::Int4).prefix_cache(false).max_sessions(3).tp_size(3);
    let r = *b.raw();
    assert_eq!((r.spin_us, r.thread_priority, r.max_sessions, r.tp_size), (50, 7, 3, 3));
    assert_eq!((r.kv_dtype_k, r.kv_dtype_v), (llmkv::sys::LLMKV_KV_INT8, llmkv::sys::LLMKV_KV_INT4));
    assert_eq!(r.flags & llmkv::sys::LLMKV_ENGINE_PREFIX_CACHE, 0);
}
