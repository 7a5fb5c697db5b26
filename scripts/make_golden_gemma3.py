#!/usr/bin/env python3
# make_golden_gemma3.py: writes tests/golden/gemma3_golden.json, the reference outputs of
# Gemma 3 270M (pretrained) computed by HuggingFace transformers (float32, CPU, eager
# attention) on the very same dequantized weights as models/gemma-3-270m-q4_k_m.gguf, so
# the C++ test (tests/golden/gemma3_golden_test.cpp) can check greedy continuations,
# final-position logits and the tokenizer without torch.
#
# Run (from the repository root; see tests/golden/README.md, section Gemma 3):
#   python3 -m venv .venv-golden
#   .venv-golden/bin/pip install -r scripts/requirements-golden.txt
#   .venv-golden/bin/python scripts/make_golden_gemma3.py       # ~10 min on 2 cores
# Options: --model PATH, --out PATH, --threads N, --no-q8-sim.
"""Generate golden reference outputs of Gemma 3 270M for the llmkv runtime."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (shared helpers: sha256, logits summary, top-2)

N_NEW_TOKENS = 32
TOP_K = mg.TOP_K
SLIDING_WINDOW = 512

# GGUF types the runtime multiplies with activations quantized per 256 (q8_K-style, fp32
# scale); all other quantized types (Q5_0, Q8_0) with activations per 32 (fp16 scale).
K_QUANT_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}

# Original prose written for this file (public domain). The first part is the SmolLM2
# golden prose; the rest continues it so the prompt is ~900 Gemma tokens, longer than the
# 512-token sliding window of the local attention layers.
PROSE_EXTRA = (
    " a jar of honey on the doorstep, with no note at all. The weeks that followed were "
    "slow and stubborn. The replacement gear had to be cast in the city, three days away "
    "by the coast road, and when it finally arrived in a crate packed with straw it was a "
    "quarter of an inch too wide. Maren filed it down by hand over two evenings, testing "
    "it against the old one after every hundred strokes, until the teeth slid together "
    "with a sound like a drawer closing. The glazier from the village came up with the "
    "new panes balanced on his back in a wooden frame, and he stayed for supper, telling "
    "her stories about the storm of the year she was born, when the sea had come over the "
    "breakwater and carried off half of the harbor wall. He said her grandfather had "
    "stood in the lantern room all night with the door tied shut, trimming the wicks by "
    "hand because the clockwork had frozen, and that every boat had come home. Maren had "
    "never heard that story before. She wrote it in the notebook, under the list of "
    "things still to be done, and underlined it once. By the end of the month the brass "
    "shone again and the rust had been scraped from every railing and painted over in a "
    "dark green that the harbor master said would hide the salt. The lens was the last "
    "thing. It was made of hundreds of curved prisms held in a frame taller than she was, "
    "and each prism had to be taken out, washed in warm water with a little vinegar, dried "
    "with a soft cloth, and put back in exactly the same place. She numbered them with a "
    "grease pencil and worked from the top down, one row each day. Children from the "
    "school came on Saturdays to watch, sitting on the stairs and passing the cloths up "
    "to her, and one of them, a girl of about nine with a serious face, asked whether the "
    "light would be able to see the ships or only the ships would be able to see the "
    "light. Maren said that was a very good question and that she would think about it. "
    "On the first clear night of autumn she wound the clockwork, lit the new wicks, and "
    "closed the little door of the lamp. For a moment nothing happened. Then the great "
    "lens began to turn, slowly at first and then at its proper pace, and a beam of white "
    "light swept out across the water, past the point and the rocks and the dark shapes of "
    "the moored boats, and out to the open sea. Down in the town somebody rang the bell of "
    "the harbor office, and then the church bell answered, and people came out of their "
    "houses to stand in the street and look up at the hill. Maren stood at the gallery rail "
    "with her hands in her coat pockets and counted the turns of the beam, the way her "
    "grandfather had taught her, until she lost count and simply watched. In the morning "
    "there were two baskets on the doorstep, and"
)
LONG_PROSE = mg.LONG_PROSE + PROSE_EXTRA
COUNTING_TAIL = "\n\nHere are the numbers from one to forty: 1, 2, 3, 4, 5, 6, 7, 8,"

CHAT_PROMPT = (
    "<start_of_turn>user\nWhat is the tallest mountain in the world?<end_of_turn>\n"
    "<start_of_turn>model\n"
)

PROMPTS = [
    ("plain_capital", "The capital of France is"),
    # Gemma's chat turn format (the pretrained model still knows the control tokens).
    ("chat_mountain", CHAT_PROMPT),
    ("code_fibonacci", "def fibonacci(n):"),
    ("robust_counting", "1, 2, 3, 4, 5, 6, 7, 8,"),
    ("robust_counting_100", "100, 101, 102, 103, 104,"),
    # ~900 tokens: the local layers see only the last 512 of them.
    ("long_prose", LONG_PROSE),
    ("robust_long_counting", LONG_PROSE.removesuffix(", and") + "." + COUNTING_TAIL),
    # A prompt of just under 512 tokens whose continuation crosses the window edge while
    # decoding (built in main(): the prose cut at a sentence end, then the counting tail).
    ("window_edge_counting", None),
]
WINDOW_EDGE_TARGET = (488, 505)  # prompt length range for window_edge_counting

# Strings whose ids (HF's tokenizer built from the GGUF, BOS added, specials parsed) are
# stored so the runtime's SentencePiece tokenizer can be checked end to end.
TOKENIZER_CASES = [
    "The capital of France is",
    "Hello, world! How are you today?",
    "  two leading spaces and  double  spaces",
    "line one\nline two\n\n\nline five\ttabbed",
    "naïve café, Zürich, 東京, Москва, emoji 🙂👍",
    "1234567890 3.14159 -42 1e-9",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    CHAT_PROMPT,
    "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n",
    "https://example.com/path?query=1&x=y",
    "   ",
    "a",
    "",
]

SUGGESTED_TOLERANCES = None  # filled in main() from the measured simulation (see README)


def gguf_to_hf_name(name: str) -> tuple[str, bool]:
    """GGUF tensor name -> (HF state-dict key, is an RMSNorm weight stored with +1)."""
    if name == "token_embd.weight":
        return "model.embed_tokens.weight", False
    if name == "output_norm.weight":
        return "model.norm.weight", True
    _, layer, rest = name.split(".", 2)
    p = f"model.layers.{layer}."
    table = {
        "attn_q.weight": ("self_attn.q_proj.weight", False),
        "attn_k.weight": ("self_attn.k_proj.weight", False),
        "attn_v.weight": ("self_attn.v_proj.weight", False),
        "attn_output.weight": ("self_attn.o_proj.weight", False),
        "attn_q_norm.weight": ("self_attn.q_norm.weight", True),
        "attn_k_norm.weight": ("self_attn.k_norm.weight", True),
        "attn_norm.weight": ("input_layernorm.weight", True),
        "post_attention_norm.weight": ("post_attention_layernorm.weight", True),
        "ffn_norm.weight": ("pre_feedforward_layernorm.weight", True),
        "post_ffw_norm.weight": ("post_feedforward_layernorm.weight", True),
        "ffn_gate.weight": ("mlp.gate_proj.weight", False),
        "ffn_up.weight": ("mlp.up_proj.weight", False),
        "ffn_down.weight": ("mlp.down_proj.weight", False),
    }
    key, is_norm = table[rest]
    return p + key, is_norm


def verify_weights(model, reader) -> dict:
    """All tensors against gguf.quants.dequantize. Linear weights: bitwise equal, no Q/K
    row permutation (Gemma is converted without one: NeoX rotary on the HF row order).
    RMSNorm weights: llama.cpp's converter stored w + 1 (Gemma computes x * (1 + w));
    transformers must load w = gguf - 1, which the check asserts bit for bit."""
    import gguf
    import torch

    sd = model.state_dict()
    checked, norms = 0, 0
    max_eff_diff = 0.0
    norm_means = []
    types = {}
    for t in reader.tensors:
        ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        key, is_norm = gguf_to_hf_name(t.name)
        got = sd[key].numpy()
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        if is_norm:
            want = ref - np.float32(1.0)
            if not np.array_equal(want, got):
                raise SystemExit(f"norm weight {t.name}: transformers did not load gguf - 1")
            # What Gemma3RMSNorm multiplies by, (1 + w) in float32, against the stored value.
            eff = (np.float32(1.0) + got).astype(np.float32)
            max_eff_diff = max(max_eff_diff, float(np.abs(eff - ref).max()))
            norm_means.append(float(ref.mean()))
            norms += 1
        else:
            if not np.array_equal(ref.reshape(got.shape), got):
                raise SystemExit(f"weight mismatch: {t.name} -> {key}")
        checked += 1
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"

    # Functional check of the convention: HF's input_layernorm of layer 0 equals
    # x / rms(x) * gguf_weight computed by hand from the stored (+1) weight.
    ln = model.model.layers[0].input_layernorm
    g = np.asarray(gguf.quants.dequantize(
        next(t for t in reader.tensors if t.name == "blk.0.attn_norm.weight").data, gguf.GGMLQuantizationType.F32),
        dtype=np.float64)
    x = torch.randn(4, g.shape[0], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf = ln(x).double().numpy()
    xd = x.double().numpy()
    manual = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + float(ln.eps)) * g
    return {
        "tensors_checked": checked,
        "bitwise_equal": True,
        "tensor_types": types,
        "norm_weights_stored_plus_one": True,
        "norm_tensors": norms,
        "norm_mean_of_stored_weights": float(np.mean(norm_means)),
        "norm_effective_weight_max_abs_diff": max_eff_diff,
        "norm_functional_check_max_abs_diff": float(np.abs(hf - manual).max()),
        "qk_rows_permuted": False,
    }


class Q8ActivationSim:
    """Every nn.Linear sees its input rounded to 8 bits, like the runtime's activation
    blocks: per 256 values with an fp32 scale (q8_K) for a layer whose GGUF weight is a
    k-quant, per 32 values with an fp16 scale (q8_0) otherwise (Q5_0, Q8_0, the tied Q8_0
    lm_head). Scale amax/127. Used only to size the tolerances."""

    def __init__(self, model, block_of):
        import torch

        self.torch = torch
        self.items = [(m, block_of[n]) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        self.saved = []

    def quant(self, x, block, fp16_scale):
        torch = self.torch
        shape = x.shape
        xb = x.reshape(*shape[:-1], shape[-1] // block, block)
        amax = xb.abs().amax(dim=-1, keepdim=True)
        d = amax / 127.0
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = torch.round(xb * inv).clamp(-127, 127)
        if fp16_scale:
            d = d.to(torch.float16).to(torch.float32)
        return (q * d).reshape(shape)

    def __enter__(self):
        for lin, block in self.items:
            orig = lin.forward
            self.saved.append((lin, orig))
            lin.forward = (lambda o, b: (lambda x: o(self.quant(x, b, b == 32))))(orig, block)
        return self

    def __exit__(self, *exc):
        for lin, orig in self.saved:
            lin.forward = orig
        self.saved = []


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=os.path.join(root, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "gemma3_golden.json"))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; 0 = torch default)")
    ap.add_argument("--no-q8-sim", action="store_true", help="skip the 8-bit activation simulation")
    ap.add_argument("--only", default="", help="comma-separated prompt names (for a quick look; not for the JSON)")
    args = ap.parse_args()

    t_start = time.time()
    import gguf
    import tokenizers
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, GgufConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model_dir, model_name = os.path.split(os.path.abspath(args.model))
    reader = gguf.GGUFReader(args.model)
    meta = {k: reader.fields[k].contents() for k in reader.fields if not k.startswith("tokenizer.ggml.")}
    assert meta["general.architecture"] == "gemma3", meta["general.architecture"]
    add_bos = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents())
    bos_id = int(reader.fields["tokenizer.ggml.bos_token_id"].contents())

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_name, dtype=torch.float32, attn_implementation="eager",
        quantization_config=GgufConfig(dequantize=True),
    )
    model.eval()
    cfg = model.config
    for mod_name, mod in model.named_modules():
        if mod_name.endswith(("_proj", "lm_head")):
            assert type(mod) is torch.nn.Linear and mod.weight.dtype == torch.float32, (mod_name, type(mod))
    # The conventions the runtime must reproduce, as transformers set them from the GGUF.
    assert cfg.model_type == "gemma3_text" and cfg.num_hidden_layers == 18 and cfg.hidden_size == 640
    assert cfg.head_dim == 256 and cfg.query_pre_attn_scalar == 256, "attention scale 1/sqrt(256)"
    assert cfg.sliding_window == SLIDING_WINDOW
    assert cfg.final_logit_softcapping is None and cfg.attn_logit_softcapping is None
    layer_types = list(cfg.layer_types)
    rope = cfg.rope_parameters
    assert rope["full_attention"]["rope_theta"] == 1e6 and rope["sliding_attention"]["rope_theta"] == 1e4, rope
    assert rope["full_attention"]["rope_type"] == "default" and rope["sliding_attention"]["rope_type"] == "default"
    embed_scale = float(model.model.embed_tokens.embed_scale.to(torch.float32))
    assert embed_scale == float(np.float32(np.sqrt(640.0))), embed_scale

    weight_check = verify_weights(model, reader)
    block_of = {}
    for t in reader.tensors:
        key, is_norm = gguf_to_hf_name(t.name)
        if not is_norm and key.endswith(".weight") and "embed_tokens" not in key:
            block_of[key[: -len(".weight")]] = 256 if t.tensor_type.name in K_QUANT_TYPES else 32
    block_of["lm_head"] = 32  # tied to token_embd (Q8_0)
    print(f"[golden] model loaded + {weight_check['tensors_checked']} tensors verified "
          f"in {time.time() - t_start:.1f}s", file=sys.stderr)

    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_name)

    def encode(text):
        ids = tok(text, add_special_tokens=True)["input_ids"]
        assert (ids[:1] == [bos_id]) == add_bos, ids[:3]
        assert tok.decode(ids[1:] if add_bos else ids, skip_special_tokens=False) == text, f"round trip: {text!r}"
        return [int(i) for i in ids]

    # window_edge_counting: the prose cut at the last sentence end that keeps the prompt
    # inside WINDOW_EDGE_TARGET tokens.
    sentences = LONG_PROSE.split(". ")
    edge_text = None
    for k in range(len(sentences), 0, -1):
        cand = ". ".join(sentences[:k]).rstrip(".") + "." + COUNTING_TAIL
        n = len(encode(cand))
        if WINDOW_EDGE_TARGET[0] <= n <= WINDOW_EDGE_TARGET[1]:
            edge_text = cand
            break
        if n < WINDOW_EDGE_TARGET[0]:
            break
    assert edge_text is not None, "no sentence cut lands in the window-edge target range"
    prompts = [(n, edge_text if t is None else t) for n, t in PROMPTS]
    if args.only:
        keep = set(args.only.split(","))
        prompts = [p for p in prompts if p[0] in keep]

    model.generation_config.eos_token_id = None
    gen_cfg = GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=N_NEW_TOKENS, repetition_penalty=1.0,
        eos_token_id=None, pad_token_id=int(cfg.pad_token_id if cfg.pad_token_id is not None else 0),
        output_logits=True, return_dict_in_generate=True,
    )

    results = []
    for name, text in prompts:
        t0 = time.time()
        ids = encode(text)
        input_ids = torch.tensor([ids], dtype=torch.long)
        with torch.no_grad():
            prompt_logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[0, -1].numpy().copy()
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_cfg)
            gen = [int(t) for t in out.sequences[0, len(ids):]]
            assert len(gen) == N_NEW_TOKENS, f"{name}: generate gave {len(gen)} tokens"
            step_logits = np.stack([lg[0].float().numpy() for lg in out.logits])
            full = torch.tensor([ids + gen[:-1]], dtype=torch.long)
            tf_logits = model(input_ids=full, use_cache=False, logits_to_keep=N_NEW_TOKENS).logits[0].numpy().copy()

        top1_ids, top2_ids, margins = [], [], []
        for k in range(N_NEW_TOKENS):
            a, b, m = mg.top2(step_logits[k])
            assert a == gen[k], f"{name}: step {k} argmax {a} != generated {gen[k]}"
            top1_ids.append(a)
            top2_ids.append(b)
            margins.append(m)
        tf_agree = [int(np.argmax(tf_logits[k])) == gen[k] for k in range(N_NEW_TOKENS)]
        cache_vs_nocache = float(np.abs(tf_logits - step_logits).max())
        prompt_vs_step0 = float(np.abs(prompt_logits - step_logits[0]).max())

        entry = {
            "name": name,
            "prompt": text,
            "prompt_ids": ids,
            "n_prompt_tokens": len(ids),
            "generated_ids": gen,
            "generated_text": tok.decode(gen, skip_special_tokens=False),
            "final_logits": mg.logits_summary(prompt_logits),
            "steps": {
                "top1_ids": top1_ids,
                "top2_ids": top2_ids,
                "top1_top2_margin": margins,
                "min_margin": float(min(margins)),
                "argmin_margin_step": int(np.argmin(margins)),
                "robust_prefix_len": None,  # set once the robust margin is known
            },
            "checks": {
                "cached_vs_uncached_step_logits_max_abs_diff": cache_vs_nocache,
                "uncached_greedy_agrees_all_steps": bool(all(tf_agree)),
                "prompt_forward_vs_generate_step0_max_abs_diff": prompt_vs_step0,
                "crosses_sliding_window": len(ids) + N_NEW_TOKENS > SLIDING_WINDOW,
            },
        }

        if not args.no_q8_sim:
            with torch.no_grad(), Q8ActivationSim(model, block_of):
                q_logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[0, -1].numpy().copy()
                q_out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_cfg)
                q_tf = model(input_ids=full, use_cache=False, logits_to_keep=N_NEW_TOKENS).logits[0].numpy().copy()
            q_gen = [int(t) for t in q_out.sequences[0, len(ids):]]
            diff = np.abs(q_logits - prompt_logits)
            ar = np.arange(N_NEW_TOKENS)
            q_margin = q_tf[ar, top1_ids] - q_tf[ar, top2_ids]
            tf_margin = tf_logits[ar, top1_ids] - tf_logits[ar, top2_ids]
            top_ids = entry["final_logits"]["top_ids"]
            entry["q8_activation_sim"] = {
                "final_logits_max_abs_diff": float(diff.max()),
                "final_logits_mean_abs_diff": float(diff.mean()),
                "final_top40_max_abs_diff": float(diff[top_ids].max()),
                "final_top40_mean_abs_diff": float(diff[top_ids].mean()),
                "final_top40_centered_max_abs_diff": float(np.abs(
                    (q_logits[top_ids] - q_logits.mean(dtype=np.float64))
                    - (prompt_logits[top_ids] - prompt_logits.mean(dtype=np.float64))).max()),
                "final_max_abs_diff": float(abs(float(q_logits.max()) - entry["final_logits"]["max"])),
                "final_mean_abs_diff": float(abs(q_logits.mean(dtype=np.float64) - entry["final_logits"]["mean"])),
                "final_std_abs_diff": float(abs(q_logits.astype(np.float64).std() - entry["final_logits"]["std"])),
                "top1_equal": bool(int(np.argmax(q_logits)) == top_ids[0]),
                "teacher_forced_max_abs_diff": float(np.abs(q_tf - tf_logits).max()),
                "teacher_forced_top40_max_abs_diff": float(max(
                    np.abs(q_tf[k][np.argsort(-tf_logits[k])[:TOP_K]] - tf_logits[k][np.argsort(-tf_logits[k])[:TOP_K]]).max()
                    for k in range(N_NEW_TOKENS))),
                "teacher_forced_max_abs_margin_change": float(np.abs(q_margin - tf_margin).max()),
                "teacher_forced_flip_steps": [k for k in range(N_NEW_TOKENS) if int(np.argmax(q_tf[k])) != top1_ids[k]],
                "generated_equal": bool(q_gen == gen),
                "first_divergent_step": next((k for k in range(N_NEW_TOKENS) if q_gen[k] != gen[k]), None),
            }
        results.append(entry)
        print(f"[golden] {name}: {len(ids)} prompt tokens, min margin {min(margins):.3f} "
              f"(step {int(np.argmin(margins))}), cache/no-cache {cache_vs_nocache:.2e}, "
              f"q8 top40 {entry.get('q8_activation_sim', {}).get('final_top40_max_abs_diff', float('nan')):.3f}, "
              f"{time.time() - t0:.1f}s", file=sys.stderr)
        print(f"--- {name} continuation ---\n{entry['generated_text']!r}", file=sys.stderr)

    # Tolerances: ~1.5-2x the worst simulated deviation, rounded up (see README).
    if not args.no_q8_sim:
        def worst(key):
            return max(r["q8_activation_sim"][key] for r in results)

        def up(x, step=0.25):
            return round(float(np.ceil(x / step) * step), 4)

        tol = {
            "robust_margin": up(max(1.0, 1.6 * worst("teacher_forced_max_abs_margin_change")), 0.5),
            "final_top40_max_abs_diff": up(1.6 * worst("final_top40_max_abs_diff")),
            "final_top40_mean_abs_diff": up(1.6 * worst("final_top40_mean_abs_diff")),
            "final_top40_centered_max_abs_diff": up(1.6 * worst("final_top40_centered_max_abs_diff")),
            "final_max_abs_diff": up(1.6 * worst("final_max_abs_diff")),
            "final_mean_abs_diff": up(1.6 * worst("final_mean_abs_diff")),
            "final_std_abs_diff": up(1.6 * worst("final_std_abs_diff"), 0.05),
        }
    else:
        tol = {"robust_margin": 1.0}
    for r in results:
        m = r["steps"]["top1_top2_margin"]
        r["steps"]["robust_prefix_len"] = next((k for k, x in enumerate(m) if x < tol["robust_margin"]), N_NEW_TOKENS)

    tok_cases = []
    for text in TOKENIZER_CASES:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        tok_cases.append({
            "text": text,
            "ids": [int(i) for i in ids],
            "round_trip": tok.decode(ids[1:] if add_bos else ids, skip_special_tokens=False) == text,
        })

    doc = {
        "schema_version": 1,
        "description": (
            "Reference outputs of Gemma 3 270M (pretrained) from HuggingFace transformers on the "
            "dequantized weights of the GGUF below (float32, CPU, eager attention). Greedy "
            "decoding, no repetition penalty, no EOS stop. Generated by "
            "scripts/make_golden_gemma3.py; see tests/golden/README.md (Gemma 3)."
        ),
        "model": {
            "file": model_name,
            "sha256": mg.sha256_file(args.model),
            "architecture": "gemma3",
            "n_layer": int(cfg.num_hidden_layers),
            "n_embd": int(cfg.hidden_size),
            "n_head": int(cfg.num_attention_heads),
            "n_head_kv": int(cfg.num_key_value_heads),
            "head_dim": int(cfg.head_dim),
            "n_ff": int(cfg.intermediate_size),
            "vocab_size": int(cfg.vocab_size),
            "rope_freq_base": float(rope["full_attention"]["rope_theta"]),
            "rope_freq_base_local": float(rope["sliding_attention"]["rope_theta"]),
            "sliding_window": int(cfg.sliding_window),
            "layer_types": layer_types,
            "rms_norm_eps": float(cfg.rms_norm_eps),
            "embedding_scale": embed_scale,
            "attention_scale": float(cfg.query_pre_attn_scalar) ** -0.5,
            "hidden_activation": str(cfg.hidden_activation),
            "add_bos_token": add_bos,
            "bos_token_id": bos_id,
            "eos_token_id": int(reader.fields["tokenizer.ggml.eos_token_id"].contents()),
        },
        "reference": {
            "framework": "transformers",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "gguf_version": mg._dist_version("gguf"),
            "tokenizers_version": tokenizers.__version__,
            "numpy_version": np.__version__,
            "python_version": platform.python_version(),
            "dtype": "float32",
            "device": "cpu",
            "attn_implementation": "eager",
            "torch_threads": torch.get_num_threads(),
            "weights_verified": weight_check,
            "tokenizer": "transformers' GemmaTokenizer built from the GGUF (AutoTokenizer gguf_file=...)",
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "generation": {
            "strategy": "greedy",
            "n_new_tokens": N_NEW_TOKENS,
            "repetition_penalty": 1.0,
            "eos_stop": False,
            "top_k_stored": TOP_K,
        },
        "suggested_tolerances": tol,
        "tokenizer_cases": tok_cases,
        "prompts": results,
    }
    if not args.no_q8_sim:
        doc["reference"]["q8_activation_sim"] = (
            "q8_activation_sim entries: the same model with every Linear input rounded to int8 "
            "per 256-element block (fp32 scale) where the GGUF weight is a k-quant, per 32-element "
            "block (fp16 scale) otherwise, scale amax/127; compared with the float32 reference."
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"[golden] wrote {args.out} ({os.path.getsize(args.out)} bytes) in {time.time() - t_start:.1f}s total",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
