//! Tensor parallelism on CPU ranks (C API 0.5): `EngineBuilder::tp_size` and the per-rank
//! byte counts of `EngineInfo` and `Stats`.
mod common;
use common::*;
use llmkv::{SessionParams, Status};

/// The smallest rank count in 2..=4 the model's heads split over (query heads divide by it,
/// KV heads divide by it or replicate evenly), and one the query heads do not divide by
/// (SmolLM2: 9 heads, 3 KV heads -> 3 and 2).
fn tp_sizes(n_heads: u32, n_kv_heads: u32) -> (Option<u32>, Option<u32>) {
    let good = (2..=4).find(|tp| n_heads % tp == 0 && (n_kv_heads % tp == 0 || tp % n_kv_heads == 0));
    let bad = (2..=4).find(|tp| n_heads % tp != 0);
    (good, bad)
}

#[test]
fn one_rank_reports_the_engines_bytes() {
    let m = need_model!("one_rank_reports_the_engines_bytes");
    let engine = engine(&m);
    let i = engine.info().unwrap();
    assert_eq!(i.tp_size, 1);
    assert_eq!(i.kv_bytes_per_token_rank, i.kv_bytes_per_token_device);
    assert_eq!(i.weight_bytes_rank, i.weight_bytes);
    // SmolLM2 is dense: no experts, every parameter read per token (0.6 fields).
    assert_eq!((i.n_expert, i.n_expert_used), (0, 0));
    assert_eq!((i.n_params_active, i.weight_bytes_active), (i.n_params, i.weight_bytes));
    let s = engine.session(&SessionParams::new()).unwrap();
    s.append_text("The capital of France is").unwrap();
    s.generate(4).unwrap();
    drive(&engine, &[&s]);
    let st = engine.stats().unwrap();
    assert!(st.kv_bytes_used > 0);
    assert_eq!(st.kv_bytes_used_rank, st.kv_bytes_used);
    assert_eq!((st.tp_reduces, st.tp_reduce_ns), (0, 0), "no collectives with one rank");
}

#[test]
fn tp_size_splits_the_model_over_ranks_and_generates() {
    let m = need_model!("tp_size_splits_the_model_over_ranks_and_generates");
    let one = engine(&m).info().unwrap();
    let (good, bad) = tp_sizes(one.n_heads, one.n_kv_heads);
    if let Some(bad) = bad {
        let e = builder(&m).tp_size(bad).build().unwrap_err();
        assert_eq!(e.status, Status::Unsupported, "tp_size {bad}: {e}");
        assert!(e.message.contains("tensor parallelism") && e.message.contains("heads"), "{e}");
    }
    let Some(tp) = good else {
        eprintln!("SKIP tp_size_splits_the_model_over_ranks_and_generates: {} query / {} KV heads split over no rank count in 2..=4",
                  one.n_heads, one.n_kv_heads);
        return;
    };
    let engine = builder(&m).tp_size(tp).build().expect("engine with tp_size");
    let i = engine.info().unwrap();
    assert_eq!(i.tp_size, tp);
    assert_eq!((i.kv_bytes_per_token_device, i.weight_bytes), (one.kv_bytes_per_token_device, one.weight_bytes));
    assert!(i.kv_bytes_per_token_rank > 0 && i.kv_bytes_per_token_rank <= i.kv_bytes_per_token_device);
    if i.n_kv_heads > 1 {
        assert!(i.kv_bytes_per_token_rank < i.kv_bytes_per_token_device, "a rank holds only its KV heads");
    }
    assert!(i.weight_bytes_rank > 0 && i.weight_bytes_rank < i.weight_bytes, "{} of {}", i.weight_bytes_rank, i.weight_bytes);

    let s = engine.session(&SessionParams::new()).unwrap();
    s.append_text("The capital of France is").unwrap();
    s.generate(8).unwrap();
    let out = drive(&engine, &[&s]).remove(0);
    assert_eq!(out.error, None, "{out:?}");
    assert!(!out.tokens.is_empty() && !out.text.is_empty(), "{out:?}");
    let st = engine.stats().unwrap();
    assert!(st.kv_bytes_used > 0 && st.kv_bytes_used_rank > 0 && st.kv_bytes_used_rank <= st.kv_bytes_used, "{st:?}");
    if i.n_kv_heads > 1 {
        assert!(st.kv_bytes_used_rank < st.kv_bytes_used, "{st:?}");
    }
    assert!(st.tp_reduces > 0, "the forward passes reduced across ranks: {st:?}");
    engine.validate().unwrap();
}
