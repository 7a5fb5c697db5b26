#!/usr/bin/env python3
# make_arch_fixtures.py: writes tests/fixtures/arch/<arch>.gguf (a tiny model with random
# weights, laid out exactly as llama.cpp's converter writes that architecture, with a
# trained tokenizer section) and tests/fixtures/arch/<arch>.json (the logits HuggingFace
# transformers computes for it after loading that very GGUF with its own GGUF loader).
# tests/unit/arch_reference_test.cpp (ctest label `arch`) checks the runtime against them.
#
# Run from the repository root (see tests/fixtures/arch/README.md):
#   .venv-golden/bin/python scripts/make_arch_fixtures.py [--only qwen2,gemma3]
"""Tiny GGUF models of every supported architecture, and transformers' logits for them."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (corpus text for the tokenizers)

N_PROMPT = 64   # prompt tokens (BOS included where the vocabulary adds one)
N_GEN = 16      # greedy tokens
TOP_K = 16      # stored (id, logit) pairs per position
MIN_GREEDY_CLEAR = 4  # mixtures of experts: greedy steps before the first near-tie, at least
SEED = 1234

CORPUS = mg.LONG_PROSE + (
    " The quick brown fox jumps over the lazy dog. 0123456789, 42 + 7 = 49! "
    "def f(x):\n    return x * 2\n\nWhat is the tallest mountain? Mount Everest.\n"
)

# Architectures. n_ff and dims are multiples of 32 so every row is whole q8 blocks.
ARCHS = {
    # Qwen2.5-style: biases on Q/K/V, NeoX RoPE, tied embeddings, byte-level BPE "qwen2".
    "qwen2": dict(arch="qwen2", name="Qwen2 Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2, head_dim=16,
                  n_ff=128, rope_base=1_000_000.0, eps=1e-6, tied=True, tok="gpt2", pre="qwen2",
                  qkv_bias=True, n_merges=96),
    # Qwen3-style: RMSNorm on each Q/K head, head_dim 32 with n_head * head_dim = 128 != n_embd.
    "qwen3": dict(arch="qwen3", name="Qwen3 Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2, head_dim=32,
                  n_ff=96, rope_base=1_000_000.0, eps=1e-6, tied=True, tok="gpt2", pre="qwen2",
                  qk_norm=True, n_merges=96),
    # Llama 3-style: GQA 4/1, rope_freqs.weight (llama3 rope scaling), untied output, "llama-bpe".
    "llama": dict(arch="llama", name="Llama 3 Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=1, head_dim=16,
                  n_ff=128, rope_base=500_000.0, eps=1e-5, tied=False, tok="gpt2", pre="llama-bpe",
                  rope_freqs=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=32),
                  permute_qk=True, n_merges=96),
    # Mistral (7B v0.1-0.3 style) as llama.cpp writes it: architecture "llama", SentencePiece
    # vocabulary with byte fallback, GQA 4/2, Q/K rows permuted, untied output.
    "mistral": dict(arch="llama", name="Mistral Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2, head_dim=16,
                    n_ff=128, rope_base=1_000_000.0, eps=1e-5, tied=False, tok="llama", pre="default",
                    permute_qk=True, n_merges=80),
    # Phi-3-mini-style: fused attn_qkv and fused ffn_up (gate then up), NeoX RoPE, MHA.
    "phi3": dict(arch="phi3", name="Phi3 Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=4, head_dim=16,
                 n_ff=128, rope_base=10_000.0, eps=1e-5, tied=False, tok="llama", pre="default",
                 fused=True, sliding_window=2047, n_merges=80),
    # Gemma 3-style: 6 layers so the 5 local : 1 global pattern appears once (layer 5 global),
    # sliding window 16 (the prompt is 64), local RoPE base 10000, global 1e6, q/k norms,
    # pre/post norms around attention and FFN, GELU-tanh, embeddings scaled by sqrt(n_embd),
    # norm weights stored +1, attention scale 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim).
    "gemma3": dict(arch="gemma3", name="Gemma 3 Tiny Test", n_embd=64, n_layer=6, n_head=2, n_kv=1, head_dim=32,
                   n_ff=32, rope_base=1_000_000.0, eps=1e-6, tied=True, tok="llama", pre="default",
                   sliding_window=16, qk_norm=True, n_merges=48),
    # Mixtures of experts. transformers' GGUF loader has no expert tensors for these, so the
    # script builds the HF model from its config and the very tensors it wrote (checked
    # bit for bit as for the others). 8 experts, 2 per token; router weights of gain 3 so the
    # experts' ranking is clear (each fixture records its smallest routing gap).
    # Qwen3-MoE (Qwen3-30B-A3B style): qwen3's attention, softmax router, norm_topk_prob.
    "qwen3moe": dict(arch="qwen3moe", name="Qwen3 MoE Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2,
                     head_dim=32, n_ff=96, rope_base=1_000_000.0, eps=1e-6, tied=True, tok="gpt2", pre="qwen2",
                     qk_norm=True, n_merges=96, moe=dict(n_expert=8, n_used=2, n_ff_exp=32)),
    # Qwen1.5/2-MoE style: biases on Q/K/V, no normalisation of the top-k weights, a shared
    # expert gated by sigmoid(ffn_gate_inp_shexp . x), untied output.
    "qwen2moe": dict(arch="qwen2moe", name="Qwen2 MoE Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2,
                     head_dim=16, n_ff=96, rope_base=1_000_000.0, eps=1e-6, tied=False, tok="gpt2", pre="qwen2",
                     qkv_bias=True, n_merges=96, moe=dict(n_expert=8, n_used=2, n_ff_exp=32, n_ff_shexp=64)),
    # Mixtral as llama.cpp writes it: architecture "llama" with expert tensors, SentencePiece
    # vocabulary, permuted Q/K, experts feed_forward_length wide, untied output.
    "mixtral": dict(arch="llama", name="Mixtral Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2, head_dim=16,
                    n_ff=32, rope_base=1_000_000.0, eps=1e-5, tied=False, tok="llama", pre="default",
                    permute_qk=True, n_merges=80, moe=dict(n_expert=8, n_used=2, n_ff_exp=32)),
    # gpt-oss (20b/120b style): MXFP4 experts with biases, a router with a bias whose best
    # logits are weighed by their own softmax (4 experts, all 4 used: the runtimes round the
    # MXFP4 experts' inputs to q8 blocks, whose rounding steps move this tiny model's router
    # logits by more than its routing gaps, so no choice among experts could be compared; the
    # choice itself is the ranking the softmax fixtures above check), the clamped SwiGLU (alpha 1.702, limit 7),
    # learned attention sinks, biases on Q/K/V/O, sliding window 16 on the even layers, YaRN
    # (factor 32 from 4096 positions, base 150000: pairs 4..9 of 16 in the ramp), head_dim 32
    # with n_head * head_dim = 128 != n_embd, o200k pre-tokenizer ("gpt-4o"), untied output.
    # The YaRN correction range is truncated (floor/ceil) as llama.cpp always does: the GGUF
    # has no key for transformers' truncate=False (gpt-oss's HF default), so the HF model is
    # built with truncate=True (hf_config_overrides).
    "gptoss": dict(arch="gpt-oss", name="gpt-oss Tiny Test", n_embd=64, n_layer=2, n_head=4, n_kv=2,
                   head_dim=32, n_ff=32, rope_base=150_000.0, eps=1e-5, tied=False, tok="gpt2", pre="gpt-4o",
                   qkv_bias=True, n_merges=96, sliding_window=16, sinks=True, mxfp4=True,
                   yarn=dict(factor=32.0, original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0),
                   moe=dict(n_expert=4, n_used=4, n_ff_exp=32)),
}


# ---------------------------------------------------------------------------- vocabularies

def train_bpe(n_merges: int, byte_level: bool):
    """A BPE trained on CORPUS: (alphabet tokens, merged tokens, merges) in merge order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        alphabet = []
    chars = sorted(set(alphabet) | (set() if byte_level else set(CORPUS.replace(" ", "\u2581"))))
    trainer = trainers.BpeTrainer(vocab_size=len(chars) + n_merges, initial_alphabet=chars,
                                  special_tokens=[], show_progress=False, min_frequency=2)
    tok.train_from_iterator([CORPUS], trainer)
    spec = json.loads(tok.to_str())["model"]
    vocab = sorted(spec["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    base = [t for t, _ in vocab[: len(vocab) - len(merges)]]
    merged = [t for t, _ in vocab[len(vocab) - len(merges):]]
    assert all("".join(m.split(" ")) == t for m, t in zip(merges, merged))
    return base, merged, merges


def vocab_gpt2(cfg):
    """Byte-level BPE as _set_vocab_gpt2 writes it: all 256 byte symbols, merges, specials."""
    base, merged, merges = train_bpe(cfg["n_merges"], byte_level=True)
    assert len(base) == 256
    tokens = base + merged
    types = [1] * len(tokens)
    if cfg["pre"] == "llama-bpe":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    elif cfg["pre"] == "gpt-4o":  # o200k_harmony's specials
        specials = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                    "<|end|>", "<|message|>", "<|call|>"]
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    first = len(tokens)
    tokens += specials
    types += [3] * len(specials)
    ids = {t: first + i for i, t in enumerate(specials)}
    if cfg["pre"] == "llama-bpe":
        special = dict(bos=ids["<|begin_of_text|>"], eos=ids["<|eot_id|>"], add_bos=True)
    elif cfg["pre"] == "gpt-4o":
        special = dict(bos=ids["<|startoftext|>"], eos=ids["<|return|>"], pad=ids["<|endoftext|>"], add_bos=False)
    else:
        special = dict(bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"], add_bos=False)
    return dict(model="gpt2", tokens=tokens, types=types, merges=merges, scores=None, **special)


def vocab_spm(cfg):
    """SentencePiece BPE as _set_vocab_sentencepiece writes it: control tokens, the 256
    <0xNN> byte-fallback tokens (type BYTE), then pieces with scores in merge order."""
    base, merged, _ = train_bpe(cfg["n_merges"], byte_level=False)
    if cfg["arch"] == "gemma3":
        head = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
        head_types = [3, 3, 3, 2, 3, 3, 3]
    else:
        head = ["<unk>", "<s>", "</s>"]
        head_types = [2, 3, 3]
    tokens = list(head)
    types = list(head_types)
    scores = [0.0] * len(head)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    scores += [0.0] * 256
    pieces = base + merged
    tokens += pieces
    types += [1] * len(pieces)
    scores += [-float(i) for i in range(len(pieces))]
    if cfg["arch"] == "phi3":
        extra = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"]
        tokens += extra
        types += [3] * len(extra)
        scores += [0.0] * len(extra)
    ix = {t: i for i, t in enumerate(tokens)}
    if cfg["arch"] == "gemma3":
        special = dict(bos=2, eos=1, unk=3, pad=0, add_bos=True, add_space_prefix=False)
    elif cfg["arch"] == "phi3":
        special = dict(bos=1, eos=ix["<|endoftext|>"], unk=0, pad=ix["<|endoftext|>"], add_bos=False)
    else:
        special = dict(bos=1, eos=2, unk=0, add_bos=True)
    return dict(model="llama", tokens=tokens, types=types, merges=None, scores=scores, **special)


# ----------------------------------------------------------------------------- weights

def llama3_rope_factors(head_dim, base, p):
    """rope_freqs.weight exactly as llama.cpp's converter computes it from rope_scaling llama3."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    lo = p["original_max_position_embeddings"] / p["low_freq_factor"]
    hi = p["original_max_position_embeddings"] / p["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < hi:
            out.append(1.0)
        elif wavelen > lo:
            out.append(p["factor"])
        else:
            smooth = (p["original_max_position_embeddings"] / wavelen - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / p["factor"] + smooth))
    return np.asarray(out, dtype=np.float32)


def mxfp4_exact(arr):
    """arr rounded to MXFP4 (E2M1 values, one E8M0 scale per 32), as float32; quantizing the
    result again gives the same bytes (checked)."""
    import gguf
    from gguf import quants

    q = quants.quantize(arr.astype(np.float32), gguf.GGMLQuantizationType.MXFP4)
    out = quants.dequantize(q, gguf.GGMLQuantizationType.MXFP4).astype(np.float32).reshape(arr.shape)
    assert np.array_equal(quants.quantize(out, gguf.GGMLQuantizationType.MXFP4), q)
    return out


def yarn_inv_freq(cfg):
    """llama.cpp's YaRN frequencies (truncated correction range) for a yarn fixture."""
    D, base, y = cfg["head_dim"], cfg["rope_base"], cfg["yarn"]
    inv = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))

    def corr(beta):
        return D * math.log(y["original_max_position_embeddings"] / (beta * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(0.0, math.floor(corr(y["beta_fast"]))), min(D - 1.0, math.ceil(corr(y["beta_slow"])))
    ramp = np.clip((np.arange(D // 2) - lo) / max(0.001, hi - lo), 0, 1)
    mix = 1 - ramp  # 1: extrapolation (unscaled), 0: interpolation (positions / factor)
    return inv * (mix + (1 - mix) / y["factor"])


def make_tensors(cfg, n_vocab, rng):
    """GGUF name -> float32 array (rows, cols) in GGUF row order. Matrices are rounded to
    f16 here (they are stored as F16), so the float32 values are exactly the file's."""
    E, H, KV, D, F = cfg["n_embd"], cfg["n_head"], cfg["n_kv"], cfg["head_dim"], cfg["n_ff"]
    t = {}

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16).astype(np.float32)

    def norm(n, center=1.0):
        return (center + 0.2 * rng.standard_normal(n)).astype(np.float32)

    gemma = cfg["arch"] == "gemma3"
    oss = cfg["arch"] == "gpt-oss"
    # Gemma scales embeddings by sqrt(n_embd) itself; the others get rows of norm ~sqrt(n_embd)/4.
    t["token_embd.weight"] = (rng.standard_normal((n_vocab, E)) * (1.0 / math.sqrt(E) if gemma else 0.25)
                              ).astype(np.float16).astype(np.float32)
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = norm(E)
        if cfg.get("fused"):
            t[p + "attn_qkv.weight"] = mat(H * D + 2 * KV * D, E)
        else:
            t[p + "attn_q.weight"] = mat(H * D, E)
            t[p + "attn_k.weight"] = mat(KV * D, E)
            t[p + "attn_v.weight"] = mat(KV * D, E)
        if cfg.get("qkv_bias"):
            t[p + "attn_q.bias"] = (0.3 * rng.standard_normal(H * D)).astype(np.float32)
            t[p + "attn_k.bias"] = (0.3 * rng.standard_normal(KV * D)).astype(np.float32)
            t[p + "attn_v.bias"] = (0.3 * rng.standard_normal(KV * D)).astype(np.float32)
        if cfg.get("sinks"):  # logits of the order of the attention scores, so they matter
            t[p + "attn_sinks.weight"] = (1.0 + 1.5 * rng.standard_normal(H)).astype(np.float32)
        if cfg.get("qk_norm"):
            t[p + "attn_q_norm.weight"] = norm(D)
            t[p + "attn_k_norm.weight"] = norm(D)
        t[p + "attn_output.weight"] = mat(E, H * D)
        if oss:
            t[p + "attn_output.bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
        if gemma:
            t[p + "post_attention_norm.weight"] = norm(E)
        t[p + ("post_attention_norm.weight" if oss else "ffn_norm.weight")] = norm(E)
        moe = cfg.get("moe")
        if moe:
            NE, FE = moe["n_expert"], moe["n_ff_exp"]
            t[p + "ffn_gate_inp.weight"] = mat(NE, E, gain=3.0)
            t[p + "ffn_gate_exps.weight"] = np.stack([mat(FE, E) for _ in range(NE)])
            t[p + "ffn_up_exps.weight"] = np.stack([mat(FE, E) for _ in range(NE)])
            # (gpt-oss: the experts' outputs a third of the others', so that the runtimes' q8
            # rounding of their inputs, see Q8ExpertInputs, moves the logits less.)
            t[p + "ffn_down_exps.weight"] = np.stack([mat(E, FE, gain=0.3 if oss else 1.0) for _ in range(NE)])
            if cfg.get("mxfp4"):  # the values MXFP4 holds exactly (written as MXFP4, lossless)
                for n in ("gate", "up", "down"):
                    t[p + f"ffn_{n}_exps.weight"] = mxfp4_exact(t[p + f"ffn_{n}_exps.weight"])
            if oss:
                t[p + "ffn_gate_inp.bias"] = (0.5 * rng.standard_normal(NE)).astype(np.float32)
                t[p + "ffn_gate_exps.bias"] = (0.2 * rng.standard_normal((NE, FE))).astype(np.float32)
                t[p + "ffn_up_exps.bias"] = (0.2 * rng.standard_normal((NE, FE))).astype(np.float32)
                t[p + "ffn_down_exps.bias"] = (0.1 * rng.standard_normal((NE, E))).astype(np.float32)
            if moe.get("n_ff_shexp"):
                FS = moe["n_ff_shexp"]
                t[p + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(E) / math.sqrt(E)).astype(np.float32)
                t[p + "ffn_gate_shexp.weight"] = mat(FS, E)
                t[p + "ffn_up_shexp.weight"] = mat(FS, E)
                t[p + "ffn_down_shexp.weight"] = mat(E, FS)
            continue
        if cfg.get("fused"):
            t[p + "ffn_up.weight"] = mat(2 * F, E)  # rows: gate, then up
        else:
            t[p + "ffn_gate.weight"] = mat(F, E)
            t[p + "ffn_up.weight"] = mat(F, E)
        t[p + "ffn_down.weight"] = mat(E, F)
        if gemma:
            t[p + "post_ffw_norm.weight"] = norm(E)
    t["output_norm.weight"] = norm(E)
    if not cfg["tied"]:
        t["output.weight"] = mat(n_vocab, E, gain=2.0)
    if cfg.get("rope_freqs"):
        t["rope_freqs.weight"] = llama3_rope_factors(D, cfg["rope_base"], cfg["rope_freqs"])
    return t


def write_gguf(path, cfg, voc, tensors):
    import gguf

    a = cfg["arch"]
    w = gguf.GGUFWriter(path, a)
    w.add_name(cfg["name"])
    w.add_type("model")
    w.add_context_length(256)
    w.add_embedding_length(cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["n_ff"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_kv"])
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if a == "llama":
        w.add_vocab_size(len(voc["tokens"]))
        w.add_rope_dimension_count(cfg["head_dim"])
    moe = cfg.get("moe")
    if moe:
        w.add_expert_count(moe["n_expert"])
        w.add_expert_used_count(moe["n_used"])
        if a != "llama":
            w.add_expert_feed_forward_length(moe["n_ff_exp"])
        if moe.get("n_ff_shexp"):
            w.add_expert_shared_feed_forward_length(moe["n_ff_shexp"])
    if a in ("qwen3", "qwen3moe", "gemma3"):
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if a == "phi3":
        w.add_rope_scaling_orig_ctx_len(256)
        w.add_rope_dimension_count(cfg["head_dim"])
        w.add_sliding_window(cfg["sliding_window"])
    if a == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
    if a == "gpt-oss":  # as conversion/gpt_oss.py and TextModel write them
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
        w.add_sliding_window(cfg["sliding_window"])
        y = cfg["yarn"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(y["factor"])
        w.add_rope_scaling_orig_ctx_len(y["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(y["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(y["beta_slow"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    w.add_tokenizer_model(voc["model"])
    w.add_tokenizer_pre(cfg["pre"])
    w.add_token_list(voc["tokens"])
    if voc["scores"] is not None:
        w.add_token_scores(voc["scores"])
    w.add_token_types(voc["types"])
    if voc["merges"] is not None:
        w.add_token_merges(voc["merges"])
    w.add_bos_token_id(voc["bos"])
    w.add_eos_token_id(voc["eos"])
    if "unk" in voc:
        w.add_unk_token_id(voc["unk"])
    if "pad" in voc:
        w.add_pad_token_id(voc["pad"])
    w.add_add_bos_token(voc["add_bos"])
    if "add_space_prefix" in voc:
        w.add_add_space_prefix(voc["add_space_prefix"])

    from gguf import quants

    for name, arr in tensors.items():
        if cfg.get("mxfp4") and name.endswith("_exps.weight"):
            w.add_tensor(name, quants.quantize(arr, gguf.GGMLQuantizationType.MXFP4),
                         raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        elif arr.ndim >= 2 and name.endswith(".bias"):
            w.add_tensor(name, arr.astype(np.float32))
        elif arr.ndim >= 2 and name != "rope_freqs.weight" and "gate_inp" not in name:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------ HF comparison

def hf_expected_state(cfg, tensors):
    """The HF state dict transformers must produce from the GGUF tensors (llama.cpp's
    converter inverted: Q/K rows un-permuted for llama, norm - 1 for Gemma)."""
    out = {}
    H, KV = cfg["n_head"], cfg["n_kv"]
    gemma = cfg["arch"] == "gemma3"
    names = {
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
        "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
        "attn_norm": "input_layernorm",
        "ffn_norm": "pre_feedforward_layernorm" if gemma else "post_attention_layernorm",
        "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.gate_up_proj" if cfg.get("fused") else "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    moe_names = {"ffn_gate_inp": "mlp.gate", "ffn_down_exps": "mlp.experts.down_proj",
                 "ffn_gate_inp_shexp": "mlp.shared_expert_gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
                 "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj"}
    oss = cfg["arch"] == "gpt-oss"
    for name, arr in tensors.items():
        if name == "rope_freqs.weight":
            continue
        if oss and name.startswith("blk.") and ("_exps." in name or "gate_inp" in name or "sinks" in name):
            # HF gpt-oss: gate and up interleaved in columns (gate 0::2, up 1::2), matrices
            # stored (in, out) per expert; the router is mlp.router.
            _, layer, base, kind = name.split(".")
            pre = f"model.layers.{layer}."
            if base == "attn_sinks":
                out[pre + "self_attn.sinks"] = arr
            elif base == "ffn_gate_inp":
                out[pre + "mlp.router." + kind] = arr
            elif base == "ffn_gate_exps":
                up = tensors[name.replace("gate_exps", "up_exps")]
                if kind == "weight":  # (NE, FE, E) each -> (NE, E, 2 FE)
                    g = np.zeros((arr.shape[0], arr.shape[2], 2 * arr.shape[1]), np.float32)
                    g[:, :, 0::2] = arr.transpose(0, 2, 1)
                    g[:, :, 1::2] = up.transpose(0, 2, 1)
                    out[pre + "mlp.experts.gate_up_proj"] = g
                else:
                    g = np.zeros((arr.shape[0], 2 * arr.shape[1]), np.float32)
                    g[:, 0::2], g[:, 1::2] = arr, up
                    out[pre + "mlp.experts.gate_up_proj_bias"] = g
            elif base == "ffn_down_exps":
                out[pre + ("mlp.experts.down_proj" if kind == "weight" else "mlp.experts.down_proj_bias")] = (
                    arr.transpose(0, 2, 1) if kind == "weight" else arr)
            continue
        if cfg.get("moe") and name.startswith("blk."):
            _, layer, base, kind = name.split(".")
            pre = f"model.layers.{layer}."
            if base == "ffn_gate_exps":  # HF fuses gate and up: rows [gate; up] per expert
                up = tensors[name.replace("gate_exps", "up_exps")]
                out[pre + "mlp.experts.gate_up_proj"] = np.concatenate([arr, up], axis=1)
                continue
            if base == "ffn_up_exps":
                continue
            if base in moe_names:
                key = pre + moe_names[base] + ("" if base == "ffn_down_exps" else "." + kind)
                out[key] = arr.reshape(1, -1) if base == "ffn_gate_inp_shexp" else arr
                continue
        if name == "token_embd.weight":
            key = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            key = "model.norm.weight"
        elif name == "output.weight":
            key = "lm_head.weight"
        else:
            _, layer, base, kind = name.split(".")
            key = f"model.layers.{layer}.{names[base]}.{kind}"
        val = arr
        if cfg.get("permute_qk") and name.endswith(("attn_q.weight", "attn_k.weight")):
            val = mg.unpermute_rows(arr, H if ".attn_q." in name else KV)
        if gemma and name.endswith("norm.weight"):
            val = arr - np.float32(1.0)
        out[key] = val
    return out


class Fp16KvAttention:
    """Context manager: the model's eager attention on K/V rounded to fp16 (after RoPE and
    norms, as the runtime stores them). Sizes the runtime's f16-KV deviation."""

    def __init__(self, model):
        self.mod = sys.modules[type(model).__module__]
        self.orig = None

    def __enter__(self):
        import torch

        orig = self.orig = self.mod.eager_attention_forward

        def fp16_kv(module, query, key, value, attention_mask, *a, **kw):
            return orig(module, query, key.to(torch.float16).to(query.dtype),
                        value.to(torch.float16).to(query.dtype), attention_mask, *a, **kw)

        self.mod.eager_attention_forward = fp16_kv
        return self

    def __exit__(self, *exc):
        self.mod.eager_attention_forward = self.orig


class Q8ExpertInputs:
    """Context manager (gpt-oss): the experts' matmul inputs rounded as the runtimes' quantized
    kernels round activations for MXFP4 weights (blocks of 32, scale max|x| / 127, integer
    codes: llama.cpp's q8_0, llmkv's q8 quantizer), so that the reference computes what the
    runtimes compute from the file."""

    def __init__(self, model):
        self.model = model
        self.cls = None
        self.hooks = []

    @staticmethod
    def q8(x):
        import torch

        b = x.reshape(-1, 32)
        d = b.abs().amax(dim=1, keepdim=True) / 127.0
        q = torch.where(d > 0, torch.round(b / torch.where(d > 0, d, torch.ones_like(d))), torch.zeros_like(b))
        return (q * d).reshape(x.shape)

    def __enter__(self):
        experts = [m.mlp.experts for m in self.model.model.layers]
        self.cls = type(experts[0])
        self.orig_gate = self.cls._apply_gate
        orig, q8 = self.orig_gate, self.q8
        self.cls._apply_gate = lambda s, gate_up: q8(orig(s, gate_up))
        for e in experts:
            self.hooks.append(e.register_forward_pre_hook(lambda m, args, kw: ((q8(args[0]),) + args[1:], kw),
                                                          with_kwargs=True))
        return self

    def __exit__(self, *exc):
        self.cls._apply_gate = self.orig_gate
        for h in self.hooks:
            h.remove()


def run_arch(key, cfg, outdir, rng, seed):
    import gguf
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    voc = vocab_gpt2(cfg) if cfg["tok"] == "gpt2" else vocab_spm(cfg)
    n_vocab = len(voc["tokens"])
    tensors = make_tensors(cfg, n_vocab, rng)
    path = os.path.join(outdir, f"{key}.gguf")
    write_gguf(path, cfg, voc, tensors)
    size = os.path.getsize(path)

    notes = []
    d, f = os.path.split(path)
    if cfg.get("moe"):
        model, overrides = build_hf_moe(key, cfg, tensors, n_vocab, voc)
        notes.append("transformers' GGUF loader reads no expert tensors: the model is built from its config "
                     "(hf_config_overrides) and the GGUF's tensors, checked bit for bit below")
    else:
        model, overrides = load_hf_gguf(key, cfg, tensors, d, f, notes)
    model.eval()
    return finish_arch(key, cfg, voc, tensors, path, size, model, overrides, notes, seed)


def build_hf_moe(key, cfg, tensors, n_vocab, voc):
    """The HF model of a mixture-of-experts fixture, from its config and the GGUF's tensors."""
    import torch
    import transformers as tf

    moe = cfg["moe"]
    common = dict(vocab_size=n_vocab, hidden_size=cfg["n_embd"], num_hidden_layers=cfg["n_layer"],
                  num_attention_heads=cfg["n_head"], num_key_value_heads=cfg["n_kv"], rms_norm_eps=cfg["eps"],
                  max_position_embeddings=256, tie_word_embeddings=cfg["tied"], num_experts_per_tok=moe["n_used"],
                  rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_base"]},
                  bos_token_id=voc["bos"], eos_token_id=voc["eos"])
    if key == "qwen3moe":
        conf = dict(head_dim=cfg["head_dim"], intermediate_size=cfg["n_ff"], num_experts=moe["n_expert"],
                    moe_intermediate_size=moe["n_ff_exp"], norm_topk_prob=True, decoder_sparse_step=1,
                    mlp_only_layers=[])
        hf_cfg, cls = tf.Qwen3MoeConfig(**common, **conf), tf.Qwen3MoeForCausalLM
    elif key == "qwen2moe":
        conf = dict(intermediate_size=cfg["n_ff"], num_experts=moe["n_expert"], moe_intermediate_size=moe["n_ff_exp"],
                    shared_expert_intermediate_size=moe["n_ff_shexp"], norm_topk_prob=False, decoder_sparse_step=1,
                    mlp_only_layers=[], qkv_bias=True)
        hf_cfg, cls = tf.Qwen2MoeConfig(**common, **conf), tf.Qwen2MoeForCausalLM
    elif key == "gptoss":
        y = cfg["yarn"]
        common["rope_parameters"] = {"rope_type": "yarn", "rope_theta": cfg["rope_base"], "factor": y["factor"],
                                     "original_max_position_embeddings": y["original_max_position_embeddings"],
                                     "beta_fast": y["beta_fast"], "beta_slow": y["beta_slow"], "truncate": True}
        conf = dict(head_dim=cfg["head_dim"], intermediate_size=moe["n_ff_exp"], num_local_experts=moe["n_expert"],
                    sliding_window=cfg["sliding_window"], attention_bias=True, swiglu_limit=7.0,
                    layer_types=["sliding_attention" if (i + 1) % 2 else "full_attention"
                                 for i in range(cfg["n_layer"])])
        hf_cfg, cls = tf.GptOssConfig(**common, **conf), tf.GptOssForCausalLM
    else:
        conf = dict(intermediate_size=cfg["n_ff"], num_local_experts=moe["n_expert"], head_dim=cfg["head_dim"],
                    sliding_window=None, router_jitter_noise=0.0)
        hf_cfg, cls = tf.MixtralConfig(**common, **conf), tf.MixtralForCausalLM
    hf_cfg._attn_implementation = "eager"
    model = cls(hf_cfg).to(torch.float32)
    want = hf_expected_state(cfg, tensors)
    sd = model.state_dict()
    missing = [k for k in sd if k not in want and not (cfg["tied"] and k == "lm_head.weight")]
    if missing:
        raise SystemExit(f"{key}: no GGUF tensor for {missing}")
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)).reshape(sd[k].shape)
                           for k, v in want.items()}, strict=False)
    if cfg["tied"]:
        model.tie_weights()
    return model, {k: v for k, v in {**common, **conf}.items() if k != "rope_parameters"} | {
        "rope_theta": cfg["rope_base"], "class": cls.__name__} | (
        {"rope_parameters": common["rope_parameters"]} if key == "gptoss" else {})


def load_hf_gguf(key, cfg, tensors, d, f, notes):
    """transformers' own GGUF loader on the file, with the settings it does not read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_cfg = AutoConfig.from_pretrained(d, gguf_file=f)
    # Settings llama.cpp has that transformers' GGUF loader does not read (each checked below).
    overrides = {}
    if key == "qwen3" and getattr(hf_cfg, "head_dim", None) != cfg["head_dim"]:
        overrides["head_dim"] = cfg["head_dim"]
        notes.append(f"transformers' GGUF config map has no qwen3 attention.key_length: head_dim came out "
                     f"{hf_cfg.head_dim}; set to {cfg['head_dim']}")
    if key == "gemma3" and hf_cfg.query_pre_attn_scalar != cfg["head_dim"]:
        overrides["query_pre_attn_scalar"] = cfg["head_dim"]
        notes.append(f"gemma3: query_pre_attn_scalar defaults to {hf_cfg.query_pre_attn_scalar} (Gemma3TextConfig); "
                     f"llama.cpp scales by 1/sqrt(key_length): set to {cfg['head_dim']}")
    if cfg.get("rope_freqs"):
        rp = dict(hf_cfg.rope_parameters)
        if rp.get("rope_type") != "llama3":
            rp.update(rope_type="llama3", **cfg["rope_freqs"])
            overrides["rope_parameters"] = rp
            notes.append("transformers ignores rope_freqs.weight: rope_parameters set to the llama3 scaling "
                         "the tensor was computed from (inv_freq checked against base^(-2i/d)/rope_freqs[i])")
    for k, v in overrides.items():
        setattr(hf_cfg, k, v)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, config=hf_cfg, dtype=torch.float32,
                                                 attn_implementation="eager")
    return model, overrides


class RoutingTooClose(Exception):
    """A mixture-of-experts fixture whose expert choice could flip with rounding."""


class GreedyTooClose(RoutingTooClose):
    """A mixture-of-experts fixture whose greedy generation starts with near-ties (the greedy
    test would compare too few tokens); the next seed is taken."""


def router_gaps(model, run):
    """Runs run() with a hook on every MoE router: for each (layer, token), its router logits."""
    captured = []
    hooks = []
    for name, mod in model.named_modules():
        if name.endswith(("mlp.gate", "mlp.router")) and hasattr(mod, "top_k"):
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out: captured.append(out[0].detach().double().numpy().copy())))
    try:
        result = run()
    finally:
        for h in hooks:
            h.remove()
    return result, captured


def o200k_tokenizer(voc):
    """The HF tokenizer of an o200k ("gpt-4o") vocabulary: its BPE and merges behind the o200k
    split and the byte-level map (as gpt-oss's tokenizer.json defines it; transformers' GGUF
    loader would build a GPT-2 split)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from make_pretokenizer_fixture import O200K_PATTERN

    normal = {t: i for i, t in enumerate(voc["tokens"]) if voc["types"][i] == 1}
    merges = [tuple(m.split(" ")) for m in voc["merges"]]
    tk = Tokenizer(models.BPE(vocab=normal, merges=merges, ignore_merges=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for i, t in enumerate(voc["tokens"])
                if voc["types"][i] == 3]
    tk.add_special_tokens(specials)
    for i, t in enumerate(voc["tokens"]):
        assert tk.token_to_id(t) == i, (t, i, tk.token_to_id(t))
    return PreTrainedTokenizerFast(tokenizer_object=tk)


def finish_arch(key, cfg, voc, tensors, path, size, model, overrides, notes, seed):
    import torch
    from transformers import AutoTokenizer

    d, f = os.path.split(path)
    n_vocab = len(voc["tokens"])

    # Weights: every tensor equals what the file holds (after the converter's inverse).
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    want = hf_expected_state(cfg, tensors)
    for k, v in want.items():
        if k not in sd:
            raise SystemExit(f"{key}: transformers has no {k}")
        if not np.array_equal(sd[k], v.reshape(sd[k].shape)):
            raise SystemExit(f"{key}: {k} differs from the GGUF tensor")
    if cfg["tied"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # RoPE frequencies: transformers' inv_freq vs what llama.cpp derives from the file.
    rot = model.model.rotary_emb
    D, base = cfg["head_dim"], cfg["rope_base"]
    expect = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))
    if cfg.get("yarn"):
        expect = yarn_inv_freq(cfg)
        want_scale = 1 + 0.1 * math.log(cfg["yarn"]["factor"])
        assert abs(rot.attention_scaling - want_scale) < 1e-6, (rot.attention_scaling, want_scale)
    if cfg.get("rope_freqs"):
        expect = expect / tensors["rope_freqs.weight"].astype(np.float64)
    inv = (rot.full_attention_inv_freq if key == "gemma3" else rot.inv_freq).double().numpy()
    rope_rel = float(np.abs(inv / expect - 1).max())
    assert rope_rel < 1e-6, (key, inv, expect)
    if key == "gemma3":
        local = rot.sliding_attention_inv_freq.double().numpy()
        expect_local = 1.0 / (10000.0 ** (np.arange(0, D, 2, dtype=np.float64) / D))
        assert np.abs(local / expect_local - 1).max() < 1e-6
        assert float(model.model.embed_tokens.embed_scale) == float(np.float32(math.sqrt(cfg["n_embd"])))
        assert model.config.sliding_window == cfg["sliding_window"]
        assert model.config.layer_types == ["sliding_attention"] * 5 + ["full_attention"], model.config.layer_types

    # Tokenizer: transformers builds one from the file; the prompt is the corpus through it.
    tok = o200k_tokenizer(voc) if cfg["pre"] == "gpt-4o" else AutoTokenizer.from_pretrained(d, gguf_file=f)
    text = mg.LONG_PROSE
    ids = tok(text, add_special_tokens=True)["input_ids"][:N_PROMPT]
    assert (ids[0] == voc["bos"]) == voc["add_bos"], (key, ids[:3])
    assert len(ids) == N_PROMPT
    tok_cases = []
    # (No text starting with a space: transformers' SentencePiece and llama.cpp's disagree
    # on the dummy-prefix space there, and the runtime follows llama.cpp.)
    cases = ["The lighthouse at the end", "two  spaces\nand a newline", "x = 42; y = x * 2",
             "caf\u00e9 \u6771\u4eac \U0001f642"]
    if cfg["pre"] == "gpt-4o":  # where o200k's split differs from GPT-2's
        cases += ["DON'T stop, we'VE got CamelCaseWords", "1234567 apples/\n\n  pears", "x\t\t y  \n z"]
    for s in cases:
        t_ids = tok(s, add_special_tokens=True)["input_ids"]
        body = t_ids[1:] if voc["add_bos"] else t_ids
        tok_cases.append({"text": s, "ids": [int(i) for i in t_ids],
                          "round_trip": tok.decode(body, skip_special_tokens=False) == s})

    torch.manual_seed(0)
    x = torch.tensor([ids], dtype=torch.long)
    # MXFP4 experts: the reference is the computation the runtimes make of the file, the
    # experts' inputs rounded to q8 blocks (Q8ExpertInputs) - that rounding alone moves the
    # router logits by more than this tiny model's routing gaps, so it cannot be a tolerance.
    with torch.no_grad(), (Q8ExpertInputs(model) if cfg.get("mxfp4") else contextlib.nullcontext()):
        logits = model(input_ids=x, use_cache=False).logits[0].double().numpy()
        model.generation_config.eos_token_id = None
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=N_GEN,
                             eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        gen = [int(t) for t in out.sequences[0, len(ids):]]
        gen_logits = np.stack([lg[0].double().numpy() for lg in out.logits])
        full = torch.tensor([ids + gen[:-1]], dtype=torch.long)
        tf = model(input_ids=full, use_cache=False).logits[0, len(ids) - 1:].double().numpy()
        with Fp16KvAttention(model):
            sim = model(input_ids=x, use_cache=False).logits[0].double().numpy()
            if cfg.get("moe"):
                _, routers_sim = router_gaps(model, lambda: model(input_ids=full, use_cache=False))
        if cfg.get("moe"):
            _, routers = router_gaps(model, lambda: model(input_ids=full, use_cache=False))
        window_effect = sinks_effect = experts_effect = None
        if cfg.get("mxfp4"):
            # ... and on the experts: without their outputs the logits move.
            saved = [(m.mlp.experts.down_proj.data.clone(), m.mlp.experts.down_proj_bias.data.clone())
                     for m in model.model.layers]
            for m in model.model.layers:
                m.mlp.experts.down_proj.data.zero_()
                m.mlp.experts.down_proj_bias.data.zero_()
            noexp = model(input_ids=x, use_cache=False).logits[0].double().numpy()
            for m, (w, b) in zip(model.model.layers, saved):
                m.mlp.experts.down_proj.data.copy_(w)
                m.mlp.experts.down_proj_bias.data.copy_(b)
            experts_effect = float(np.abs(noexp - logits).max())
            assert experts_effect > 0.5, experts_effect
        if cfg.get("sinks"):
            # The fixture must depend on the sinks: without them (logit -1e4) the logits move.
            saved = [m.self_attn.sinks.data.clone() for m in model.model.layers]
            for m in model.model.layers:
                m.self_attn.sinks.data.fill_(-1e4)
            nosink = model(input_ids=x, use_cache=False).logits[0].double().numpy()
            for m, s in zip(model.model.layers, saved):
                m.self_attn.sinks.data.copy_(s)
            sinks_effect = float(np.abs(nosink - logits).max())
            assert sinks_effect > 0.1, sinks_effect
        if key in ("gemma3", "gptoss"):
            # The fixture must depend on the window: without it the logits move by this much.
            model.config.sliding_window = 1 << 20
            nowin = model(input_ids=x, use_cache=False).logits[0].double().numpy()
            model.config.sliding_window = cfg["sliding_window"]
            window_effect = float(np.abs(nowin - logits).max())
            assert np.abs(nowin[: cfg["sliding_window"]] - logits[: cfg["sliding_window"]]).max() < 1e-5
            assert window_effect > 0.1, window_effect
    routing = None
    if cfg.get("moe"):
        # The experts each token picks (prompt and generated tokens) must not hinge on
        # rounding: the smallest gap between a token's n_used-th and next router logit, against
        # how far f16 K/V moves the router logits.
        k = cfg["moe"]["n_used"]
        z = np.concatenate(routers)
        srt = -np.sort(-z, axis=1)
        # (every expert used: no choice to flip)
        gap = float((srt[:, k - 1] - srt[:, k]).min()) if k < z.shape[1] else None
        moved = float(np.abs(np.concatenate(routers_sim) - z).max())
        routing = {"router_calls": len(routers), "min_topk_gap": gap, "fp16_kv_router_max_abs_diff": moved}
        assert len(routers) == cfg["n_layer"], (key, len(routers))
        if gap is not None and (gap < 4 * moved or gap < 1e-3):
            raise RoutingTooClose(f"{key}: routing gap {gap:.2e} vs f16-KV router change {moved:.2e}")
    cache_diff = float(np.abs(tf - gen_logits).max())
    assert cache_diff < 1e-4, (key, cache_diff)
    margins = []
    for k in range(N_GEN):
        o = np.argsort(-gen_logits[k], kind="stable")
        assert o[0] == gen[k]
        margins.append(float(gen_logits[k][o[0]] - gen_logits[k][o[1]]))
    scale = float(np.abs(logits).max())
    sim_diff = float(np.abs(sim - logits).max())
    # Tolerance on |ours - ref| for every stored logit: f16 K/V moves them by sim_diff;
    # allow 4x that, and at least 1e-3 of the logits' scale (fp32 summation order).
    tol_abs = max(4.0 * sim_diff, 1e-3 * scale)
    if cfg.get("moe"):
        robust = max(4 * tol_abs, 0.02)
        clear = next((i for i, m in enumerate(margins) if m < robust), len(margins))
        if clear < MIN_GREEDY_CLEAR:
            raise GreedyTooClose(f"{key}: greedy margins clear for {clear} steps only")

    positions = []
    for p in range(len(ids)):
        row = logits[p]
        o = np.argsort(-row, kind="stable")[:TOP_K]
        positions.append({
            "top_ids": [int(i) for i in o],
            "top_logits": [round(float(row[i]), 6) for i in o],
            "max": round(float(row.max()), 6),
            "mean": round(float(row.mean()), 6),
            "std": round(float(row.std()), 6),
        })
    doc = {
        "schema_version": 1,
        "architecture": key,
        "gguf_architecture": cfg["arch"],
        "gguf_file": f"{key}.gguf",
        "gguf_bytes": size,
        "seed": seed,
        "description": f"{cfg['name']}: random F16 weights; logits of transformers "
                       f"(float32, eager) after loading the GGUF with from_pretrained(gguf_file=...).",
        "config": {k: v for k, v in cfg.items() if k not in ("name",)},
        "n_vocab": n_vocab,
        "bos_token_id": voc["bos"],
        "eos_token_id": voc["eos"],
        "add_bos_token": voc["add_bos"],
        "hf_model_class": type(model).__name__,
        "hf_config_overrides": {k: v for k, v in overrides.items()},
        "hf_load_notes": notes,
        "checks": {
            "weights_bitwise_equal": True,
            "rope_inv_freq_max_rel_diff": rope_rel,
            "cached_vs_uncached_max_abs_diff": cache_diff,
            "fp16_kv_sim_max_abs_diff": sim_diff,
            "reference_q8_expert_inputs": bool(cfg.get("mxfp4")),
            "logits_abs_max": scale,
            "sliding_window_effect_max_abs_diff": window_effect,
            "attention_sinks_effect_max_abs_diff": sinks_effect,
            "experts_effect_max_abs_diff": experts_effect,
            "routing": routing,
        },
        "tolerance": {"logit_abs": tol_abs, "robust_margin": max(4 * tol_abs, 0.02)},
        "prompt_ids": [int(i) for i in ids],
        "positions": positions,
        "generated_ids": gen,
        "generated_margins": margins,
        "tokenizer_cases": tok_cases,
    }
    with open(os.path.join(d, f"{key}.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    print(f"[arch] {key}: {type(model).__name__}, {size} bytes, vocab {n_vocab}, |logits| <= {scale:.2f}, "
          f"fp16-KV sim {sim_diff:.2e}, tol {tol_abs:.2e}, min margin {min(margins):.3f}; "
          f"{'; '.join(notes) or 'no overrides'}", file=sys.stderr)
    return doc


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "arch"))
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    keys = [k for k in ARCHS if not args.only or k in args.only.split(",")]
    summary = {}
    for i, key in enumerate(ARCHS):
        if key not in keys:
            continue
        # Seeds SEED + i; a mixture of experts whose routing is too close to call takes the
        # next of SEED + i + 1000 k (the seed is recorded in the fixture).
        for attempt in range(64):
            seed = SEED + i + 1000 * attempt
            try:
                doc = run_arch(key, ARCHS[key], args.out, np.random.default_rng(seed), seed)
                break
            except RoutingTooClose as e:
                print(f"[arch] seed {seed}: {e}", file=sys.stderr)
        else:
            raise SystemExit(f"{key}: no seed with clear routing")
        summary[key] = {"hf_model_class": doc["hf_model_class"], "hf_load_notes": doc["hf_load_notes"]}
    versions = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "gguf": mg._dist_version("gguf"), "numpy": np.__version__, "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    print(json.dumps({"versions": versions, "archs": summary}, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
