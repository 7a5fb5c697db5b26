//! ABI check: the declarations of this crate against the C compiler's view of llmkv.h.
//!
//! The reference is the output of `bindings/abi/gen_layout.py` compiled and run against the
//! header: read from the file named by `LLMKV_ABI_LAYOUT` (test.sh passes it), else generated
//! here with python3 and cc from the header in `LLMKV_INCLUDE_DIR` (default: the repository's
//! `include/`). Checked:
//!  - every struct of the header exists here with the same size and alignment, and every one
//!    of its fields at the same offset with the same size (and no field the header lacks);
//!  - every constant the header defines is declared here, and every constant declared here
//!    has the C value;
//!  - every `LLMKV_API` function is declared here and nothing else, each with the parameter
//!    and return types of the header's prototype (parsed from the header text).
use llmkv_sys::*;
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

struct RustStruct {
    name: &'static str,
    size: usize,
    align: usize,
    fields: Vec<(&'static str, usize, usize)>,
}

fn field_size<S, F>(_: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! structs {
    ($( $s:ident { $($f:ident),* $(,)? } )*) => {
        vec![ $( RustStruct {
            name: stringify!($s),
            size: size_of::<$s>(),
            align: align_of::<$s>(),
            fields: vec![ $( (stringify!($f), offset_of!($s, $f), field_size(|x: &$s| &x.$f)) ),* ],
        } ),* ]
    };
}

fn rust_structs() -> Vec<RustStruct> {
    structs! {
        llmkv_tp_transport { ctx, rank, size, broadcast, all_gather }
        llmkv_engine_params { struct_size, model_path, backend, devices, n_devices, n_threads,
            kv_dtype_k, kv_dtype_v, kv_block_tokens, kv_device_bytes, kv_host_bytes,
            max_batch_tokens, max_context, flags, max_sessions, kv_residual_tokens, kv_rotation,
            spin_us, thread_priority, tp_size, tp_transport }
        llmkv_engine_info { struct_size, model_name, architecture, backend_name, backend, n_vocab,
            n_ctx_train, max_context, n_layers, n_embd, n_heads, n_kv_heads, head_dim, n_threads,
            kv_block_tokens, kv_dtype_k, kv_dtype_v, tp_size, n_params, weight_bytes,
            kv_bytes_per_token_device, kv_bytes_per_token_tail, kv_device_bytes, kv_blocks_total,
            kv_tail_blocks_total, kv_residual_tokens, kv_rotate_k, kv_rotate_v, bos_token,
            eos_token, eot_token, n_unrepresentable_bytes, kv_window, kv_layer_groups,
            kv_bytes_per_token_global, kv_bytes_per_token_rank, weight_bytes_rank, n_expert,
            n_expert_used, n_params_active, weight_bytes_active }
        llmkv_stats { struct_size, blocks_total, blocks_free, blocks_cached, blocks_used,
            tail_blocks_total, tail_blocks_used, sessions_total, sessions_idle, sessions_queued,
            sessions_prefilling, sessions_generating, sessions_parked, sessions_finished,
            kv_bytes_used, tokens_stored, prefix_hit_tokens, prefix_miss_tokens, bytes_to_host,
            bytes_to_device, preemptions, tokens_prefilled, tokens_generated, steps,
            host_bytes_total, host_bytes_used, host_blocks, parks, swaps, resumes, copy_ns,
            demotions, promotions, sample_ns, grammar_mask_ns, grammar_masks,
            grammar_mask_cache_hits, kv_bytes_used_rank, tp_reduce_ns, tp_reduces }
        llmkv_chat_message { role, content }
        llmkv_sampling { temperature, top_k, top_p, min_p, repeat_penalty, seed, repeat_last_n }
        llmkv_logit_bias { token, bias }
        llmkv_session_params { struct_size, prefix, sampling, max_new_tokens, stop_tokens,
            n_stop_tokens, priority, user_data, stop_strings, stop_string_lengths, n_stop_strings,
            logit_bias, n_logit_bias, min_new_tokens, grammar_kind, grammar, grammar_len,
            grammar_root }
        llmkv_session_info { struct_size, state, finish_reason, n_tokens, n_cached, n_generated,
            n_blocks, tier, priority, stop_string, text_held, has_grammar, grammar_complete }
        llmkv_event { session, user_data, kind, token, finish_reason, status }
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn header_path() -> PathBuf {
    match std::env::var_os("LLMKV_INCLUDE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("llmkv.h"),
        _ => repo_root().join("include/llmkv.h"),
    }
}

/// The layout program's output: from LLMKV_ABI_LAYOUT, else generated and run here.
fn layout_text() -> String {
    if let Some(p) = std::env::var_os("LLMKV_ABI_LAYOUT").filter(|p| !p.is_empty()) {
        return std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("cannot read LLMKV_ABI_LAYOUT={}: {e}", PathBuf::from(&p).display()));
    }
    let header = header_path();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let script = repo_root().join("bindings/abi/gen_layout.py");
    let gen = Command::new("python3")
        .arg(&script)
        .arg(&header)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e} (or set LLMKV_ABI_LAYOUT)", script.display()));
    assert!(gen.status.success(), "gen_layout.py failed: {}", String::from_utf8_lossy(&gen.stderr));
    std::fs::write(dir.join("layout.c"), &gen.stdout).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-std=c11", "-I"])
        .arg(header.parent().unwrap())
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(dir.join("layout"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e} (or set LLMKV_ABI_LAYOUT)"));
    assert!(st.success(), "compiling layout.c failed");
    let out = Command::new(dir.join("layout")).output().unwrap();
    assert!(out.status.success(), "layout program failed");
    String::from_utf8(out.stdout).unwrap()
}

#[derive(Default)]
struct CLayout {
    structs: BTreeMap<String, (usize, usize)>,
    fields: BTreeMap<String, Vec<(String, usize, usize)>>,
    consts: BTreeMap<String, i64>,
    funcs: Vec<String>,
}

fn parse_layout(text: &str) -> CLayout {
    let mut l = CLayout::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let c: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| -> usize { c[i].parse().unwrap_or_else(|_| panic!("bad layout line '{line}'")) };
        match c[0] {
            "struct" => {
                l.structs.insert(c[1].into(), (num(2), num(3)));
            }
            "field" => l.fields.entry(c[1].into()).or_default().push((c[2].into(), num(3), num(4))),
            "const" => {
                l.consts.insert(c[1].into(), c[2].parse().unwrap());
            }
            "func" => l.funcs.push(c[1].into()),
            other => panic!("unknown layout line kind '{other}'"),
        }
    }
    assert!(!l.structs.is_empty() && !l.consts.is_empty() && !l.funcs.is_empty(), "layout output looks empty");
    l
}

#[test]
fn structs_match_the_header() {
    let c = parse_layout(&layout_text());
    let rust = rust_structs();
    let mut errors = Vec::new();
    for (name, &(size, align)) in &c.structs {
        let Some(r) = rust.iter().find(|r| r.name == name) else {
            errors.push(format!("struct {name} of the header is not declared in llmkv-sys"));
            continue;
        };
        if r.size != size || r.align != align {
            errors.push(format!("{name}: size/align {}/{} here, {size}/{align} in C", r.size, r.align));
        }
        let cfields = &c.fields[name];
        for (f, off, sz) in cfields {
            match r.fields.iter().find(|x| x.0 == f) {
                None => errors.push(format!("{name}.{f} is missing here")),
                Some(&(_, roff, rsz)) if roff != *off || rsz != *sz => errors.push(format!(
                    "{name}.{f}: offset/size {roff}/{rsz} here, {off}/{sz} in C"
                )),
                _ => {}
            }
        }
        for (f, _, _) in &r.fields {
            if !cfields.iter().any(|x| x.0 == *f) {
                errors.push(format!("{name}.{f} is declared here but not in the header"));
            }
        }
    }
    for r in &rust {
        if !c.structs.contains_key(r.name) {
            errors.push(format!("struct {} is declared here but not in the header", r.name));
        }
    }
    assert!(errors.is_empty(), "ABI mismatches:\n  {}", errors.join("\n  "));
}

#[test]
fn constants_match_the_header() {
    let c = parse_layout(&layout_text());
    let mut errors = Vec::new();
    for (name, value) in CONSTANTS {
        match c.consts.get(*name) {
            Some(v) if v == value => {}
            Some(v) => errors.push(format!("{name} = {value} here, {v} in C")),
            // Derived macros the layout program does not print (LLMKV_VERSION_NUMBER) are
            // checked against their parts below.
            None if *name == "LLMKV_VERSION_NUMBER" => {}
            None => errors.push(format!("{name} is declared here but not in the header")),
        }
    }
    for name in c.consts.keys() {
        if !CONSTANTS.iter().any(|(n, _)| n == name) {
            errors.push(format!("{name} of the header is not declared in llmkv-sys"));
        }
    }
    let v = |n: &str| c.consts[n];
    assert_eq!(
        LLMKV_VERSION_NUMBER as i64,
        v("LLMKV_VERSION_MAJOR") * 10000 + v("LLMKV_VERSION_MINOR") * 100 + v("LLMKV_VERSION_PATCH")
    );
    assert!(errors.is_empty(), "constant mismatches:\n  {}", errors.join("\n  "));
}

// ---- Function prototypes ----------------------------------------------------------------

fn strip_comments_and_directives(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let j = rest[i + 2..].find("*/").expect("unterminated comment");
        out.push(' ');
        rest = &rest[i + 2 + j + 2..];
    }
    out.push_str(rest);
    let mut clean = String::new();
    let mut continued = false;
    for line in out.lines() {
        let line = line.split("//").next().unwrap();
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            clean.push_str(line);
            clean.push('\n');
        }
    }
    clean
}

/// A C type as the Rust type this crate must use, without spaces: "const char *" ->
/// "*constc_char", "llmkv_engine **" -> "*mut*mutllmkv_engine", "void" -> "".
fn c_type_to_rust(c: &str) -> String {
    let spaced = c.replace('*', " * ");
    let mut quals = vec![false];
    let mut base = String::new();
    for tok in spaced.split_whitespace() {
        match tok {
            "const" => *quals.last_mut().unwrap() = true,
            "*" => quals.push(false),
            t => {
                assert!(base.is_empty(), "cannot parse C type '{c}'");
                base = t.to_string();
            }
        }
    }
    let mut ty = match base.as_str() {
        "void" if quals.len() == 1 => return String::new(),
        "void" => "c_void",
        "char" => "c_char",
        "int" => "c_int",
        "int32_t" => "i32",
        "uint32_t" => "u32",
        "int64_t" => "i64",
        "uint64_t" => "u64",
        "size_t" => "usize",
        "float" => "f32",
        "double" => "f64",
        other => other,
    }
    .to_string();
    for &is_const in &quals[..quals.len() - 1] {
        ty = format!("{}{ty}", if is_const { "*const" } else { "*mut" });
    }
    ty
}

/// Splits "const char *name" into ("const char *", "name").
fn split_decl(decl: &str) -> (String, String) {
    let decl = decl.trim();
    let end = decl.len();
    let start = decl
        .char_indices()
        .rev()
        .find(|(_, ch)| !(ch.is_ascii_alphanumeric() || *ch == '_'))
        .map(|(i, _)| i + 1)
        .unwrap_or(0);
    (decl[..start].to_string(), decl[start..end].to_string())
}

fn header_prototypes() -> BTreeMap<String, (Vec<String>, String)> {
    let text = std::fs::read_to_string(header_path()).expect("cannot read llmkv.h");
    let text = strip_comments_and_directives(&text);
    let mut protos = BTreeMap::new();
    for chunk in text.split("LLMKV_API").skip(1) {
        let decl = chunk.split(';').next().unwrap();
        let open = decl.find('(').expect("prototype without '('");
        let close = decl.rfind(')').expect("prototype without ')'");
        let (ret, name) = split_decl(&decl[..open]);
        let params_text = decl[open + 1..close].trim();
        let params = if params_text == "void" {
            Vec::new()
        } else {
            params_text.split(',').map(|p| c_type_to_rust(&split_decl(p).0)).collect()
        };
        protos.insert(name, (params, c_type_to_rust(&ret)));
    }
    protos
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[test]
fn functions_match_the_header() {
    let c = parse_layout(&layout_text());
    let protos = header_prototypes();
    let mut errors = Vec::new();
    // The header parse here and the layout program agree on the function list.
    let proto_names: Vec<&String> = protos.keys().collect();
    let mut layout_names: Vec<&String> = c.funcs.iter().collect();
    layout_names.sort();
    layout_names.dedup();
    assert_eq!(proto_names, layout_names, "prototype parse disagrees with gen_layout.py");
    for name in &c.funcs {
        let Some(f) = FUNCTIONS.iter().find(|f| f.name == name) else {
            errors.push(format!("{name} of the header is not declared in llmkv-sys"));
            continue;
        };
        let (params, ret) = &protos[name];
        let ours: Vec<String> = f.params.iter().map(|p| squash(p)).collect();
        if &ours != params {
            errors.push(format!("{name}: parameters {ours:?} here, C wants {params:?}"));
        }
        if squash(f.ret) != *ret {
            errors.push(format!("{name}: returns '{}' here, C wants '{ret}'", f.ret));
        }
    }
    for f in FUNCTIONS {
        if !c.funcs.iter().any(|n| n == f.name) {
            errors.push(format!("{} is declared here but not in the header", f.name));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in FUNCTIONS {
        assert!(seen.insert(f.name), "{} declared twice", f.name);
    }
    assert!(errors.is_empty(), "function mismatches:\n  {}", errors.join("\n  "));
}

#[test]
fn c_type_mapping() {
    assert_eq!(c_type_to_rust("const char *"), "*constc_char");
    assert_eq!(c_type_to_rust("llmkv_engine **"), "*mut*mutllmkv_engine");
    assert_eq!(c_type_to_rust("const char *const *"), "*const*constc_char");
    assert_eq!(c_type_to_rust("void"), "");
    assert_eq!(c_type_to_rust("void *"), "*mutc_void");
    assert_eq!(c_type_to_rust("size_t"), "usize");
}
