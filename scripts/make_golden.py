#!/usr/bin/env python3
# make_golden.py: writes tests/golden/smollm2_golden.json, the reference outputs of
# SmolLM2-135M-Instruct computed by HuggingFace transformers (float32, CPU) on the very
# same dequantized weights as models/SmolLM2-135M-Instruct.Q4_1.gguf, so the C++ golden
# tests can check greedy continuations and final-position logits without torch.
#
# Run (from the repository root; see tests/golden/README.md):
#   python3 -m venv .venv-golden
#   .venv-golden/bin/pip install -r scripts/requirements-golden.txt
#   .venv-golden/bin/python scripts/make_golden.py            # ~1-2 min on 2 cores
# Options: --model PATH, --out PATH, --threads N, --no-q8-sim.
"""Generate golden reference outputs for the llmkv runtime from transformers."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

N_NEW_TOKENS = 32
TOP_K = 40
Q8_BLOCK = 32

SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# Original prose written for this file (public domain), long enough (~300 tokens) that
# the KV cache of the prompt spans many 16-token blocks.
LONG_PROSE = (
    "The lighthouse at the end of the northern breakwater had been dark for eleven years "
    "when Maren Holt climbed its spiral stairs for the first time. She carried a tin of "
    "lamp oil, a notebook with a cracked spine, and a promise she had made to her "
    "grandfather, who had kept the light burning through forty winters and never once "
    "let a ship run aground on the rocks below. The iron railings were red with rust, "
    "and the glass of the lantern room was so crusted with salt that the morning sun "
    "came through it the color of weak tea. Gulls had built nests in the gallery, and "
    "the brass fittings had turned green. Maren spent the whole of that first day "
    "scraping, polishing, and writing lists: new wicks, a replacement gear for the "
    "clockwork that turned the lens, three panes of glass, a gallon of paint, and "
    "patience, which she underlined twice. In the evening she sat on the top step and "
    "watched the fishing boats return to the harbor, their lamps swaying like fireflies "
    "over the dark water. One of the old captains, a man with a white beard and a "
    "voice like gravel, waved his cap at her as he passed the point. She waved back, "
    "and for the first time since the funeral she felt that the town had not entirely "
    "forgotten the family on the hill. That night she did not light the lamp, because "
    "the lens would not yet turn, but she left a small lantern burning in the window, "
    "and in the morning she found that someone had left a basket of bread and"
)

PROMPTS = [
    ("plain_capital", "The capital of France is"),
    (
        "chatml_mountain",
        "<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n"
        "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    ("code_fibonacci", "def fibonacci(n):\n"),
    ("long_prose", LONG_PROSE),
    # Extra prompts chosen for their robustness to activation-quantization noise. The
    # robust_* continuations keep a top1-top2 margin well above the 8-bit noise at all 32
    # steps, so free-running greedy output must match token for token (the one with the
    # prose in front of it does so with ~350 tokens of KV); "def fibonacci(n):" has a large
    # margin at the prompt, where the one with the trailing newline is a near-tie.
    ("robust_counting", "1, 2, 3, 4, 5, 6, 7, 8,"),
    ("robust_counting_100", "100, 101, 102, 103, 104,"),
    (
        "robust_long_counting",
        LONG_PROSE.rsplit(" and", 1)[0] + ".\n\nHere are the numbers from one to forty: 1, 2, 3, 4, 5, 6, 7, 8,",
    ),
    ("code_fibonacci_no_newline", "def fibonacci(n):"),
]

# Tolerances proposed for the C++ golden test (rationale in tests/golden/README.md); set
# from the q8_activation_sim numbers with ~1.5-2x headroom.
SUGGESTED_TOLERANCES = {
    "robust_margin": 1.0,
    "final_top40_max_abs_diff": 1.0,
    "final_top40_mean_abs_diff": 0.6,
    "final_top40_centered_max_abs_diff": 1.0,
    "final_max_abs_diff": 0.6,
    "final_mean_abs_diff": 0.6,
    "final_std_abs_diff": 0.1,
}


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_tokenizer(reader):
    """A byte-level BPE from the GGUF vocab + merges with SmolLM2's pre-tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # token_type 3 = CONTROL (<|endoftext|>, <|im_start|>, <|im_end|>, ...): parsed as
    # single special tokens wherever they appear in the text.
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens(specials)
    for s in specials:
        assert tok.token_to_id(s.content) == vocab[s.content], s.content
    return tok


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's converter permute of Q/K rows.

    The converter stored W_gguf = W_hf.reshape(H, 2, D/2, C).swapaxes(1, 2).reshape(H*D, C),
    i.e. within each head the row order (half, pair) became (pair, half), so that the
    rotary pairs are adjacent rows (2i, 2i+1) instead of (i, i + D/2). The inverse reads
    the GGUF rows as (H, D/2, 2, C) and swaps back.
    """
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def verify_weights(model, reader, n_head: int, n_head_kv: int, n_layer: int) -> dict:
    """Checks transformers' weights equal gguf.quants.dequantize (+ our Q/K un-permute)."""
    import gguf

    by_name = {t.name: t for t in reader.tensors}
    sd = model.state_dict()

    def deq(name):
        t = by_name[name]
        return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)

    checked = 0
    for layer in range(n_layer):
        p = f"model.layers.{layer}."
        pairs = [
            (unpermute_rows(deq(f"blk.{layer}.attn_q.weight"), n_head), p + "self_attn.q_proj.weight"),
            (unpermute_rows(deq(f"blk.{layer}.attn_k.weight"), n_head_kv), p + "self_attn.k_proj.weight"),
            (deq(f"blk.{layer}.attn_v.weight"), p + "self_attn.v_proj.weight"),
            (deq(f"blk.{layer}.attn_output.weight"), p + "self_attn.o_proj.weight"),
            (deq(f"blk.{layer}.ffn_gate.weight"), p + "mlp.gate_proj.weight"),
            (deq(f"blk.{layer}.ffn_up.weight"), p + "mlp.up_proj.weight"),
            (deq(f"blk.{layer}.ffn_down.weight"), p + "mlp.down_proj.weight"),
            (deq(f"blk.{layer}.attn_norm.weight"), p + "input_layernorm.weight"),
            (deq(f"blk.{layer}.ffn_norm.weight"), p + "post_attention_layernorm.weight"),
        ]
        for ref, key in pairs:
            if not np.array_equal(ref, sd[key].numpy()):
                raise SystemExit(f"weight mismatch: {key}")
            checked += 1
    for ref, key in [
        (deq("token_embd.weight"), "model.embed_tokens.weight"),
        (deq("output_norm.weight"), "model.norm.weight"),
    ]:
        if not np.array_equal(ref, sd[key].numpy()):
            raise SystemExit(f"weight mismatch: {key}")
        checked += 1
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    return {"tensors_checked": checked, "bitwise_equal": True}


def logits_summary(logits: np.ndarray) -> dict:
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return {
        "top_ids": [int(i) for i in order],
        "top_logits": [float(logits[i]) for i in order],
        "max": float(logits.max()),
        "mean": float(logits.mean(dtype=np.float64)),
        "std": float(logits.astype(np.float64).std()),
    }


def top2(logits: np.ndarray):
    order = np.argsort(-logits, kind="stable")[:2]
    return int(order[0]), int(order[1]), float(logits[order[0]] - logits[order[1]])


class Q8ActivationSim:
    """Context manager: every nn.Linear (incl. lm_head) sees its input rounded to 8 bits
    per block of 32 along the reduction dim, scale = amax/127 stored as fp16, like the
    runtime's Q8 activation blocks. Used only to estimate the expected runtime deviation."""

    def __init__(self, model):
        import torch

        self.torch = torch
        self.linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        self.saved = []

    def quant(self, x):
        torch = self.torch
        shape = x.shape
        xb = x.reshape(*shape[:-1], shape[-1] // Q8_BLOCK, Q8_BLOCK)
        amax = xb.abs().amax(dim=-1, keepdim=True)
        d = amax / 127.0
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = torch.round(xb * inv).clamp(-127, 127)
        d16 = d.to(torch.float16).to(torch.float32)
        return (q * d16).reshape(shape)

    def __enter__(self):
        for lin in self.linears:
            orig = lin.forward
            self.saved.append((lin, orig))
            lin.forward = (lambda o: (lambda x: o(self.quant(x))))(orig)
        return self

    def __exit__(self, *exc):
        for lin, orig in self.saved:
            lin.forward = orig
        self.saved = []


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "smollm2_golden.json"))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: reproducible, and no thrashing on a shared 2-core box; 0 = torch default)")
    ap.add_argument("--no-q8-sim", action="store_true", help="skip the 8-bit activation simulation")
    args = ap.parse_args()

    t_start = time.time()
    import gguf
    import tokenizers
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model_dir, model_name = os.path.split(os.path.abspath(args.model))
    reader = gguf.GGUFReader(args.model)
    meta = {k: reader.fields[k].contents() for k in reader.fields if not k.startswith("tokenizer.ggml.")}
    n_head = int(meta["llama.attention.head_count"])
    n_head_kv = int(meta["llama.attention.head_count_kv"])
    n_layer = int(meta["llama.block_count"])
    add_bos = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents())

    # ---- model: transformers dequantizes the GGUF and un-permutes Q/K itself ----
    # dequantize=True: plain float32 nn.Linear weights, even where the `kernels` package
    # would let transformers keep the GGUF blocks packed (its kernels may quantize the
    # activations, which is exactly the noise the reference must not have).
    load_kw = {}
    try:
        from transformers import GgufConfig

        load_kw["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantize
        pass
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_name, dtype=torch.float32, attn_implementation="eager", **load_kw
    )
    model.eval()
    for mod_name, mod in model.named_modules():
        if mod_name.endswith(("_proj", "lm_head")):
            assert type(mod) is torch.nn.Linear and mod.weight.dtype == torch.float32, (mod_name, type(mod))
    cfg = model.config
    assert cfg.num_hidden_layers == 30 and cfg.hidden_size == 576 and cfg.vocab_size == 49152
    weight_check = verify_weights(model, reader, n_head, n_head_kv, n_layer)
    t_loaded = time.time()
    print(f"[golden] model loaded + {weight_check['tensors_checked']} tensors verified "
          f"in {t_loaded - t_start:.1f}s", file=sys.stderr)

    # ---- tokenizer: our BPE from the GGUF, cross-checked with transformers' GGUF one ----
    tok = build_tokenizer(reader)
    try:
        hf_tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_name)
    except Exception as e:  # noqa: BLE001 - the cross-check is optional
        hf_tok = None
        print(f"[golden] transformers GGUF tokenizer unavailable: {e!r}", file=sys.stderr)

    # No EOS stop and no min-length processor (it would mask EOS and so change the
    # argmax): the continuation is the plain argmax of the raw logits at every step, which
    # is what the C++ test reproduces. The model's own generation_config carries eos=2,
    # so clear it there too or generate() would fill it back in.
    model.generation_config.eos_token_id = None
    gen_cfg = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=N_NEW_TOKENS,
        repetition_penalty=1.0,
        eos_token_id=None,
        pad_token_id=int(cfg.pad_token_id if cfg.pad_token_id is not None else 2),
        output_logits=True,
        return_dict_in_generate=True,
    )

    results = []
    for name, text in PROMPTS:
        t0 = time.time()
        ids = tok.encode(text, add_special_tokens=False).ids
        if add_bos:
            ids = [int(cfg.bos_token_id)] + ids
        assert tok.decode(ids, skip_special_tokens=False) == text, f"{name}: tokenizer round trip failed"
        hf_ids = None
        if hf_tok is not None:
            hf_ids = hf_tok(text, add_special_tokens=add_bos)["input_ids"]
        input_ids = torch.tensor([ids], dtype=torch.long)

        with torch.no_grad():
            # Final-position logits of one float32 forward pass over the prompt.
            prompt_logits = model(input_ids=input_ids, use_cache=False).logits[0, -1].numpy().copy()
            # Greedy continuation through generate() with the KV cache.
            out = model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_cfg
            )
            gen = [int(t) for t in out.sequences[0, len(ids):]]
            assert len(gen) == N_NEW_TOKENS, f"{name}: generate gave {len(gen)} tokens"
            step_logits = np.stack([lg[0].float().numpy() for lg in out.logits])
            # Cross-check: one uncached teacher-forced pass over prompt + continuation.
            full = torch.tensor([ids + gen[:-1]], dtype=torch.long)
            tf_logits = model(input_ids=full, use_cache=False).logits[0, len(ids) - 1:].numpy()

        top1_ids, top2_ids, margins = [], [], []
        for k in range(N_NEW_TOKENS):
            a, b, mg = top2(step_logits[k])
            assert a == gen[k], f"{name}: step {k} argmax {a} != generated {gen[k]}"
            top1_ids.append(a)
            top2_ids.append(b)
            margins.append(mg)
        tf_agree = [int(np.argmax(tf_logits[k])) == gen[k] for k in range(N_NEW_TOKENS)]
        cache_vs_nocache = float(np.abs(tf_logits - step_logits).max())
        prompt_vs_step0 = float(np.abs(prompt_logits - step_logits[0]).max())

        entry = {
            "name": name,
            "prompt": text,
            "prompt_ids": [int(i) for i in ids],
            "n_prompt_tokens": len(ids),
            "generated_ids": gen,
            "generated_text": tok.decode(gen, skip_special_tokens=False),
            "final_logits": logits_summary(prompt_logits),
            "steps": {
                "top1_ids": top1_ids,
                "top2_ids": top2_ids,
                "top1_top2_margin": margins,
                "min_margin": float(min(margins)),
                "argmin_margin_step": int(np.argmin(margins)),
                # Steps before the first one whose margin < suggested_tolerances.robust_margin.
                "robust_prefix_len": next(
                    (k for k, x in enumerate(margins) if x < SUGGESTED_TOLERANCES["robust_margin"]), N_NEW_TOKENS
                ),
            },
            "checks": {
                "transformers_tokenizer_ids_equal": None if hf_ids is None else bool(list(hf_ids) == ids),
                "cached_vs_uncached_step_logits_max_abs_diff": cache_vs_nocache,
                "uncached_greedy_agrees_all_steps": bool(all(tf_agree)),
                "prompt_forward_vs_generate_step0_max_abs_diff": prompt_vs_step0,
            },
        }

        if not args.no_q8_sim:
            with torch.no_grad(), Q8ActivationSim(model):
                q_logits = model(input_ids=input_ids, use_cache=False).logits[0, -1].numpy().copy()
                q_out = model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_cfg
                )
                q_tf = model(input_ids=full, use_cache=False).logits[0, len(ids) - 1:].numpy()
            q_gen = [int(t) for t in q_out.sequences[0, len(ids):]]
            diff = np.abs(q_logits - prompt_logits)
            ar = np.arange(N_NEW_TOKENS)
            q_margin = q_tf[ar, top1_ids] - q_tf[ar, top2_ids]
            tf_margin = tf_logits[ar, top1_ids] - tf_logits[ar, top2_ids]
            q_flips = [k for k in range(N_NEW_TOKENS) if int(np.argmax(q_tf[k])) != top1_ids[k]]
            first_div = next((k for k in range(N_NEW_TOKENS) if q_gen[k] != gen[k]), None)
            top_ids = entry["final_logits"]["top_ids"]
            entry["q8_activation_sim"] = {
                "final_logits_max_abs_diff": float(diff.max()),
                "final_logits_mean_abs_diff": float(diff.mean()),
                "final_top40_max_abs_diff": float(diff[top_ids].max()),
                "final_top40_mean_abs_diff": float(diff[top_ids].mean()),
                # Same after subtracting each vector's mean: the 8-bit noise is largely a
                # uniform shift of all logits, which changes no probability.
                "final_top40_centered_max_abs_diff": float(
                    np.abs(
                        (q_logits[top_ids] - q_logits.mean(dtype=np.float64))
                        - (prompt_logits[top_ids] - prompt_logits.mean(dtype=np.float64))
                    ).max()
                ),
                "final_max_abs_diff": float(abs(float(q_logits.max()) - entry["final_logits"]["max"])),
                "final_mean_abs_diff": float(abs(q_logits.mean(dtype=np.float64) - entry["final_logits"]["mean"])),
                "final_std_abs_diff": float(abs(q_logits.astype(np.float64).std() - entry["final_logits"]["std"])),
                "top1_equal": bool(int(np.argmax(q_logits)) == top_ids[0]),
                "teacher_forced_max_abs_diff": float(np.abs(q_tf - tf_logits).max()),
                "teacher_forced_max_abs_margin_change": float(np.abs(q_margin - tf_margin).max()),
                "teacher_forced_flip_steps": q_flips,
                "generated_equal": bool(q_gen == gen),
                "first_divergent_step": first_div,
            }

        results.append(entry)
        print(f"[golden] {name}: {len(ids)} prompt tokens, min margin {min(margins):.3f} "
              f"(step {int(np.argmin(margins))}), cache/no-cache diff {cache_vs_nocache:.2e}, "
              f"{time.time() - t0:.1f}s", file=sys.stderr)
        if entry["checks"]["transformers_tokenizer_ids_equal"] is False:
            print(f"[golden] WARNING {name}: transformers' GGUF tokenizer gives {hf_ids}", file=sys.stderr)
        print(f"--- {name} continuation ---\n{entry['generated_text']!r}", file=sys.stderr)

    doc = {
        "schema_version": 1,
        "description": (
            "Reference outputs of SmolLM2-135M-Instruct from HuggingFace transformers on the "
            "dequantized weights of the GGUF below (float32, CPU, eager attention). Greedy "
            "decoding, no repetition penalty, no EOS stop. Generated by scripts/make_golden.py; "
            "see tests/golden/README.md."
        ),
        "model": {
            "file": model_name,
            "sha256": sha256_file(args.model),
            "architecture": str(meta["general.architecture"]),
            "n_layer": n_layer,
            "n_embd": int(meta["llama.embedding_length"]),
            "n_head": n_head,
            "n_head_kv": n_head_kv,
            "head_dim": int(cfg.head_dim),
            "n_ff": int(meta["llama.feed_forward_length"]),
            "vocab_size": int(cfg.vocab_size),
            "rope_freq_base": float(meta["llama.rope.freq_base"]),
            "rms_norm_eps": float(meta["llama.attention.layer_norm_rms_epsilon"]),
            "add_bos_token": add_bos,
        },
        "reference": {
            "framework": "transformers",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "gguf_version": getattr(gguf, "__version__", None) or _dist_version("gguf"),
            "tokenizers_version": tokenizers.__version__,
            "numpy_version": np.__version__,
            "python_version": platform.python_version(),
            "dtype": "float32",
            "device": "cpu",
            "attn_implementation": "eager",
            "torch_threads": torch.get_num_threads(),
            "weights_verified": weight_check,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "generation": {
            "strategy": "greedy",
            "n_new_tokens": N_NEW_TOKENS,
            "repetition_penalty": 1.0,
            "eos_stop": False,
            "top_k_stored": TOP_K,
        },
        "suggested_tolerances": SUGGESTED_TOLERANCES,
        "prompts": results,
    }
    if not args.no_q8_sim:
        doc["reference"]["q8_activation_sim"] = (
            "q8_activation_sim entries: the same model with every Linear input rounded to int8 "
            f"per {Q8_BLOCK}-element block (fp16 scale amax/127), compared with the float32 reference."
        )

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = os.path.getsize(args.out)
    print(f"[golden] wrote {args.out} ({size} bytes) in {time.time() - t_start:.1f}s total", file=sys.stderr)
    return 0


def _dist_version(name: str):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(main())
