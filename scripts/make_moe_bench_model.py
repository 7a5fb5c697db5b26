#!/usr/bin/env python3
# make_moe_bench_model.py: writes a GGUF of a real mixture-of-experts model's shape with random
# weights, for speed and memory measurements at real sizes (docs/PERFORMANCE.md). Only the
# shapes, tensor names, keys and quantization types are real; every quantized block holds
# random bytes with small finite scales, so the model's tokens are noise but each kernel reads
# exactly the bytes a real file of that shape and type would make it read. Both llmkv and
# llama.cpp load the file.
#
#   python3 -m venv .venv-bench && .venv-bench/bin/pip install gguf==0.19.0 numpy
#   .venv-bench/bin/python scripts/make_moe_bench_model.py qwen3-30b-a3b q3_k_m /path/out.gguf
#
# Shapes: qwen3-30b-a3b (qwen3moe: 48 layers, 128 experts of 768, 8 per token, 30.5 B
# parameters), qwen1.5-moe-a2.7b (qwen2moe: 24 layers, 60 experts of 1408, 4 per token and a
# shared expert of 5632, 14.3 B). Mixes (llama.cpp's names; its own recipes vary the type per
# layer, these use one type per tensor kind):
#   q4_k_m  Q4_K, with Q6_K for output, attn_v and ffn_down(_exps, _shexp)
#   q3_k_m  Q3_K, with Q4_K for ffn_down(_exps, _shexp), Q5_K for attn_v, Q6_K for output
# gpt-oss-20b (gpt-oss: 24 layers, 32 experts of 2880, 4 per token, 20.9 B parameters) takes the
#   mxfp4    MXFP4 experts, Q8_0 for the rest (as ggml-org's gpt-oss-20b-mxfp4.gguf)
# with its attention sinks, q/k/v/o, router and expert biases, YaRN keys and 128-token windows.
# Norms, biases and the routers (ffn_gate_inp) are F32, as llama.cpp's converter keeps them.
# Rows that are not whole 256-element super-blocks take llama.cpp's fallback type (Q6_K ->
# Q8_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q3_K -> IQ4_NL).
"""Random-weight GGUF files of real mixture-of-experts shapes."""

from __future__ import annotations

import argparse
import sys

import numpy as np

SHAPES = {
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_kv=4, head_dim=128,
                          n_ff=6144, n_expert=128, n_used=8, n_ff_exp=768, n_ff_shexp=0, vocab=151936,
                          rope_base=1_000_000.0, eps=1e-6, ctx=40960, qk_norm=True, qkv_bias=False),
    "qwen1.5-moe-a2.7b": dict(arch="qwen2moe", n_layer=24, n_embd=2048, n_head=16, n_kv=16, head_dim=128,
                              n_ff=5632, n_expert=60, n_used=4, n_ff_exp=1408, n_ff_shexp=5632,
                              vocab=151936, rope_base=1_000_000.0, eps=1e-6, ctx=8192, qk_norm=False,
                              qkv_bias=True),
    "gpt-oss-20b": dict(arch="gpt-oss", n_layer=24, n_embd=2880, n_head=64, n_kv=8, head_dim=64,
                        n_ff=2880, n_expert=32, n_used=4, n_ff_exp=2880, n_ff_shexp=0, vocab=201088,
                        rope_base=150_000.0, eps=1e-5, ctx=131072, qk_norm=False, qkv_bias=True,
                        window=128, yarn=(32.0, 4096)),
}

# (bytes per 256-element super-block or 32-element block, elements per block, byte offsets of
# the f16 scales) per quantization type.
BLOCKS = {
    "Q3_K": (110, 256, [108]),
    "Q4_K": (144, 256, [0, 2]),
    "Q5_K": (176, 256, [0, 2]),
    "Q6_K": (210, 256, [208]),
    "Q8_0": (34, 32, [0]),
    "Q5_0": (22, 32, [0]),
    "Q5_1": (24, 32, [0, 2]),
    "IQ4_NL": (18, 32, [0]),
    "MXFP4": (17, 32, []),  # one E8M0 scale byte (drawn apart), 16 bytes of E2M1 pairs
}
# llama.cpp's fallbacks for rows that are not whole 256-element super-blocks (Qwen1.5-MoE's
# 1408-wide experts: its ffn_down_exps).
FALLBACK = {"Q3_K": "IQ4_NL", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}

MIXES = {
    "q4_k_m": dict(default="Q4_K", output="Q6_K", attn_v="Q6_K", down="Q6_K"),
    "q3_k_m": dict(default="Q3_K", output="Q6_K", attn_v="Q5_K", down="Q4_K"),
    # gpt-oss as OpenAI released it: the experts MXFP4, everything else 8-bit (ggml-org's
    # gpt-oss-20b-mxfp4.gguf keeps the rest Q8_0 / F32)
    "mxfp4": dict(default="Q8_0", output="Q8_0", attn_v="Q8_0", down="MXFP4", experts="MXFP4"),
}


def byte_tokens():
    """GPT-2's byte-to-unicode symbols for bytes 0..255."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, k = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + k))
            k += 1
    return out


def tensors_of(s, mix):
    """(name, numpy shape (outer first), type) of every tensor, in file order."""
    E, H, KV, D = s["n_embd"], s["n_head"], s["n_kv"], s["head_dim"]
    NE, FE, FS = s["n_expert"], s["n_ff_exp"], s["n_ff_shexp"]
    m = MIXES[mix]
    q = m["default"]
    qe = m.get("experts", q)  # gate and up experts
    oss = s["arch"] == "gpt-oss"
    t = [("token_embd.weight", (s["vocab"], E), q)]
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (E,), "F32"),
              (p + "attn_q.weight", (H * D, E), q),
              (p + "attn_k.weight", (KV * D, E), q),
              (p + "attn_v.weight", (KV * D, E), m["attn_v"])]
        if s["qkv_bias"]:
            t += [(p + "attn_q.bias", (H * D,), "F32"), (p + "attn_k.bias", (KV * D,), "F32"),
                  (p + "attn_v.bias", (KV * D,), "F32")]
        if s["qk_norm"]:
            t += [(p + "attn_q_norm.weight", (D,), "F32"), (p + "attn_k_norm.weight", (D,), "F32")]
        if oss:
            t += [(p + "attn_sinks.weight", (H,), "F32")]
        t += [(p + "attn_output.weight", (E, H * D), q)]
        if oss:
            t += [(p + "attn_output.bias", (E,), "F32")]
        t += [(p + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), (E,), "F32"),
              (p + "ffn_gate_inp.weight", (NE, E), "F32"),
              (p + "ffn_gate_exps.weight", (NE, FE, E), qe),
              (p + "ffn_up_exps.weight", (NE, FE, E), qe),
              (p + "ffn_down_exps.weight", (NE, E, FE), m["down"])]
        if oss:
            t += [(p + "ffn_gate_inp.bias", (NE,), "F32"), (p + "ffn_gate_exps.bias", (NE, FE), "F32"),
                  (p + "ffn_up_exps.bias", (NE, FE), "F32"), (p + "ffn_down_exps.bias", (NE, E), "F32")]
        if FS:
            t += [(p + "ffn_gate_inp_shexp.weight", (E,), "F32"),
                  (p + "ffn_gate_shexp.weight", (FS, E), q),
                  (p + "ffn_up_shexp.weight", (FS, E), q),
                  (p + "ffn_down_shexp.weight", (E, FS), m["down"])]
    t += [("output_norm.weight", (E,), "F32"), ("output.weight", (s["vocab"], E), m["output"])]
    return [(n, sh, FALLBACK[ty] if ty in FALLBACK and sh[-1] % 256 else ty) for n, sh, ty in t]


def nbytes(shape, qtype):
    n = int(np.prod(shape))
    if qtype == "F32":
        return 4 * n
    size, elems, _ = BLOCKS[qtype]
    assert shape[-1] % elems == 0, (shape, qtype)
    return n // elems * size


def random_data(shape, qtype, rng, chunk_rows=1 << 14):
    """The tensor's bytes, in pieces: random codes, f16 scales of about 2^-9..2^-6."""
    if qtype == "F32":
        if len(shape) == 1:  # norms near 1, biases small
            return [(1.0 + 0.02 * rng.standard_normal(shape)).astype(np.float32).view(np.uint8)]
        return [(rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32).view(np.uint8)]
    size, elems, scales = BLOCKS[qtype]
    rows = int(np.prod(shape[:-1]))
    per_row = shape[-1] // elems
    out = []
    for r0 in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - r0) * per_row
        b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        if qtype == "MXFP4":  # scales 2^-9 .. 2^-6 (E8M0 118 .. 121)
            b[:, 0] = rng.integers(118, 122, size=n, dtype=np.uint8)
        for off in scales:
            d = (rng.random(n, dtype=np.float32) * 0.014 + 0.002).astype(np.float16)
            b[:, off:off + 2] = d.view(np.uint8).reshape(n, 2)
        out.append(b.reshape(-1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("mix", choices=sorted(MIXES))
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    import gguf

    s = SHAPES[args.shape]
    a = s["arch"]
    w = gguf.GGUFWriter(args.out, a)
    w.add_name(f"{args.shape} random weights ({args.mix})")
    w.add_type("model")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_expert_count(s["n_expert"])
    w.add_expert_used_count(s["n_used"])
    w.add_expert_feed_forward_length(s["n_ff_exp"])
    if s["n_ff_shexp"]:
        w.add_expert_shared_feed_forward_length(s["n_ff_shexp"])
    if "window" in s:
        w.add_sliding_window(s["window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(s["yarn"][0])
        w.add_rope_scaling_orig_ctx_len(s["yarn"][1])
    ftype = {"q4_k_m": "MOSTLY_Q4_K_M", "q3_k_m": "MOSTLY_Q3_K_M", "mxfp4": "MOSTLY_MXFP4_MOE"}[args.mix]
    if hasattr(gguf.LlamaFileType, ftype):
        w.add_file_type(getattr(gguf.LlamaFileType, ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # A byte-level BPE vocabulary of the real size: the 256 byte symbols, a few merges, fillers,
    # and Qwen's control tokens at the end.
    toks = byte_tokens()
    merges = [f"{toks[ord('t')]} {toks[ord('h')]}", f"{toks[ord('a')]} {toks[ord('n')]}"]
    toks += ["th", "an"]
    oss = a == "gpt-oss"
    specials = (["<|endoftext|>", "<|start|>", "<|return|>"] if oss else
                ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    toks += [f"\u0120w{i}" for i in range(s["vocab"] - len(toks) - len(specials))] + specials
    types = [1] * (len(toks) - len(specials)) + [3] * len(specials)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o" if oss else "qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(toks) - 3)
    w.add_eos_token_id(len(toks) - 1)
    w.add_add_bos_token(False)

    plan = tensors_of(s, args.mix)
    total = 0
    for name, shape, qtype in plan:
        nb = nbytes(shape, qtype)
        total += nb
        raw = getattr(gguf.GGMLQuantizationType, qtype)
        w.add_tensor_info(name, shape, np.dtype(np.float32), nb, raw_dtype=None if qtype == "F32" else raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(args.seed)
    for i, (name, shape, qtype) in enumerate(plan):
        pieces = random_data(shape, qtype, rng)
        data = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        w.write_tensor_data(data)
        if i % 50 == 0:
            print(f"[{i}/{len(plan)}] {name}", file=sys.stderr)
    w.close()
    params = sum(int(np.prod(sh)) for _, sh, _ in plan)
    print(f"{args.out}: {args.shape} {args.mix}, {params / 1e9:.2f} B parameters, {total / 2**30:.2f} GiB of tensors",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
