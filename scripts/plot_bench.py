#!/usr/bin/env python3
"""Charts from the JSON documents of `llmkv bench* --json FILE` (schema "llmkv-bench/1").

Usage: scripts/plot_bench.py [--out DIR] [--pool-mib N] [--no-png] [--note TEXT] INPUT...
  INPUT: JSON files, or directories (every *.json in them).
  --out: where the charts go (default docs/charts).

Writes, for each chart whose records are present (the others are skipped with a note):
  decode_vs_batch      aggregate and per-session decode tok/s vs sessions decoding together
                       (`llmkv bench batch`, records "decode_batch"), one line per KV codec
  kv_footprint         KV bytes per token, and sessions that fit in a pool of --pool-mib,
                       vs context, per KV codec (`llmkv bench`, records "kv_footprint": the
                       KV one session holds, measured after its prompt)
  ttft_vs_prefix       time to first token vs system-prompt (prefix) length: computed, from a
                       prefix handle, from the automatic cache, from a loaded snapshot
                       (`llmkv bench prefix`, records "ttft")
  decode_vs_context    decode tok/s of one session vs context, per KV codec (`llmkv bench`,
                       records "decode")
as DIR/NAME.svg (and DIR/NAME.png unless --no-png). Each chart names the model, the machine,
the threads and the date of the runs it shows. Needs python3 and matplotlib (Debian:
python3-matplotlib). Exit status: 0 when at least one chart was written, 1 otherwise.
"""
import argparse
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

# Reproducible SVG files: fixed element ids, no creation date.
matplotlib.rcParams["svg.hashsalt"] = "llmkv-charts"
matplotlib.rcParams["axes.grid"] = True
matplotlib.rcParams["grid.alpha"] = 0.3

CODEC_ORDER = ["f16", "bf16", "fp8", "int8", "int4"]
# A marker and dash per codec, so that codecs with the same bytes (f16 and bf16; fp8 and
# int8) stay visible where their lines coincide.
CODEC_STYLE = {"f16": ("o", "-"), "bf16": ("s", "--"), "fp8": ("^", "-."), "int8": ("D", "-"), "int4": ("v", "--")}
NOTE = ""  # --note: a line added under every chart's caption


def load(inputs):
    docs = []
    for item in inputs:
        paths = sorted(glob.glob(os.path.join(item, "*.json"))) if os.path.isdir(item) else [item]
        for path in paths:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if doc.get("schema") != "llmkv-bench/1":
                print(f"plot_bench: {path}: not an llmkv bench report; skipped", file=sys.stderr)
                continue
            doc["_path"] = path
            docs.append(doc)
    return docs


def records(docs, kind, **match):
    """(doc, record) pairs of that kind whose fields equal `match`."""
    out = []
    for doc in docs:
        for r in doc.get("records", []):
            if r.get("bench") == kind and all(r.get(k) == v for k, v in match.items()):
                out.append((doc, r))
    return out


def caption(pairs):
    """Model, machine, threads and date of the runs behind a chart."""
    docs = []
    for doc, _ in pairs:
        if all(doc is not d for d in docs):
            docs.append(doc)
    models = sorted({d.get("model", {}).get("file", "?") for d in docs})
    cpus = sorted({d["machine"].get("cpu_model", "?") for d in docs})
    kernels = sorted({d["machine"].get("kernel_family", "?") for d in docs})
    cores = sorted({str(d["machine"].get("logical_cpus", "?")) for d in docs})
    threads = sorted({r["threads"] for _, r in pairs if "threads" in r})
    if not threads:
        threads = sorted({t for d in docs for t in d["machine"].get("threads_used", [])})
    dates = sorted({d.get("date", "?")[:10] for d in docs})
    versions = sorted({d["machine"].get("llmkv_version", "?") for d in docs})
    text = (f"{', '.join(models)} | {'; '.join(cpus)} ({'/'.join(cores)} logical CPUs, {'/'.join(kernels)} kernels) | "
            f"{'/'.join(str(t) for t in threads)} thread{'s' if threads != [1] else ''} | "
            f"llmkv {', '.join(versions)} | {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}")
    loads = [d["machine"]["load_average_start"][0] for d in docs if d["machine"].get("load_average_start")]
    if loads:
        text += f" | load average at start {min(loads):.1f}" + (f"-{max(loads):.1f}" if max(loads) > min(loads) else "")
    return text + (f"\n{NOTE}" if NOTE else "")


def style(kv):
    marker, dash = CODEC_STYLE.get(kv.split("/")[0], ("o", "-"))
    return {"marker": marker, "linestyle": dash, "markersize": 6}


def codec_key(name):
    base = name.split("/")[0]
    return (CODEC_ORDER.index(base) if base in CODEC_ORDER else len(CODEC_ORDER), name)


def finish(fig, name, title, pairs, args, written):
    fig.suptitle(title, fontsize=12)
    fig.text(0.5, 0.01, caption(pairs), ha="center", va="bottom", fontsize=7.5, color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.07 if NOTE else 0.05, 1, 0.95))
    svg = os.path.join(args.out, name + ".svg")
    fig.savefig(svg, metadata={"Date": None})
    written.append(svg)
    if not args.no_png:
        png = os.path.join(args.out, name + ".png")
        fig.savefig(png, dpi=100, metadata={"Software": None})
        written.append(png)
    plt.close(fig)


def series(pairs, group, x, y):
    """{group value: sorted [(x, y)]}; a repeated x keeps the best (highest) y."""
    out = {}
    for _, r in pairs:
        g = group(r)
        best = out.setdefault(g, {})
        if r.get(y) is None:
            continue
        best[r[x]] = max(best.get(r[x], float("-inf")), float(r[y]))
    return {g: sorted(v.items()) for g, v in out.items() if v}


def thread_label(pairs):
    return len({r.get("threads") for _, r in pairs}) > 1


def chart_decode_vs_batch(docs, args, written):
    pairs = records(docs, "decode_batch")
    if not pairs:
        return "no decode_batch records (llmkv bench batch --json)"
    per_threads = thread_label(pairs)

    def group(r):
        return (r["kv"], r["threads"]) if per_threads else (r["kv"], None)

    agg = series(pairs, group, "batch", "tok_s")
    per = series(pairs, group, "batch", "per_session_tok_s")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.8))
    for g in sorted(agg, key=lambda g: (codec_key(g[0]), g[1] or 0)):
        label = f"KV {g[0]}" + (f", {g[1]} threads" if per_threads else "")
        xs, ys = zip(*agg[g])
        a1.plot(xs, ys, label=label, **style(g[0]))
        xs, ys = zip(*per[g])
        a2.plot(xs, ys, label=label, **style(g[0]))
    for ax, what in ((a1, "aggregate decode tok/s"), (a2, "decode tok/s per session")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sessions decoding together (batch)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        xs = sorted({r["batch"] for _, r in pairs})
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.legend(fontsize=8)
    finish(fig, "decode_vs_batch", "Decode throughput vs batch size (continuous batching, CPU)", pairs, args, written)
    return None


def chart_kv_footprint(docs, args, written):
    pairs = records(docs, "kv_footprint")
    if not pairs:
        return "no kv_footprint records (llmkv bench --json)"
    pool = args.pool_mib * 1048576.0
    bpt = series(pairs, lambda r: r["kv"], "context", "bytes_per_token")
    sizes = series(pairs, lambda r: r["kv"], "context", "session_kv_bytes")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.8))
    sealed = {r["kv"]: r.get("sealed_bytes_per_token") for _, r in pairs}
    codecs = sorted(bpt, key=codec_key)
    for kv in codecs:
        same = [k for k in codecs if k != kv and codecs.index(k) < codecs.index(kv) and sizes[k] == sizes[kv]]
        label = f"KV {kv}" + (f" (= {same[0]})" if same else "")
        xs, ys = zip(*bpt[kv])
        line, = a1.plot(xs, ys, label=label, **style(kv))
        if sealed.get(kv):  # the codec's sealed bytes per token: the long-context limit
            a1.axhline(sealed[kv], color=line.get_color(), linestyle=":", linewidth=1)
        xs, session = zip(*sizes[kv])
        a2.plot(xs, [int(pool // s) if s > 0 else 0 for s in session], label=label, **style(kv))
    a1.set_ylabel("KV bytes per token (one session)\ndotted: the codec's sealed-block bytes per token")
    a1.set_ylim(bottom=0)
    a2.set_ylabel(f"sessions that fit in a {args.pool_mib:g} MiB KV pool")
    a2.set_yscale("log")
    a2.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a2.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        xs = sorted({r["context"] for _, r in pairs})
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs], rotation=0, fontsize=8)
        ax.legend(fontsize=8)
    finish(fig, "kv_footprint",
           "KV memory per KV codec: bytes per token and sessions per pool (measured: sealed blocks + tail slot, "
           "no sharing)", pairs, args, written)
    return None


def chart_ttft(docs, args, written):
    pairs = records(docs, "ttft")
    if not pairs:
        return "no ttft records (llmkv bench prefix --json)"
    labels = {"computed": "computed (no cache)", "prefix_handle": "from a prefix handle",
              "prefix_cache": "automatic prefix cache", "snapshot_loaded": "snapshot loaded by a fresh engine"}
    data = series(pairs, lambda r: r["how"], "prefix_tokens", "ms")
    # ms: lower is better, so keep the lowest of repeated points instead of the highest.
    for how in data:
        lows = {}
        for _, r in pairs:
            if r["how"] == how:
                lows[r["prefix_tokens"]] = min(lows.get(r["prefix_tokens"], float("inf")), float(r["ms"]))
        data[how] = sorted(lows.items())
    q = sorted({r.get("question_tokens") for _, r in pairs if r.get("question_tokens") is not None})
    fig, ax = plt.subplots(figsize=(8, 5))
    for how in [h for h in labels if h in data] + [h for h in data if h not in labels]:
        xs, ys = zip(*data[how])
        ax.plot(xs, ys, marker="o", label=labels.get(how, how))
    ax.set_xlabel("cached prefix (system prompt) length, tokens")
    ax.set_ylabel("time to first token, ms (best of 3, log scale)")
    ax.set_yscale("log")  # computed grows with the prefix; the cached ways stay near the question's cost
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.legend(fontsize=8)
    finish(fig, "ttft_vs_prefix",
           f"Time to first token vs cached prefix length (+{'/'.join(map(str, q))}-token question)", pairs, args,
           written)
    return None


def chart_decode_vs_context(docs, args, written):
    pairs = records(docs, "decode", run="long")
    if not pairs:
        return "no decode records (llmkv bench --json)"
    per_threads = thread_label(pairs)

    def group(r):
        return (r["kv"], r["threads"] if per_threads else None)

    data = series(pairs, group, "context", "tok_s")
    fig, ax = plt.subplots(figsize=(8, 5))
    for g in sorted(data, key=lambda g: (codec_key(g[0]), g[1] or 0)):
        xs, ys = zip(*data[g])
        ax.plot(xs, ys, label=f"KV {g[0]}" + (f", {g[1]} threads" if per_threads else ""), **style(g[0]))
    ax.set_xscale("log", base=2)
    xs = sorted({r["context"] for _, r in pairs})
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("context (tokens in the session when decoding starts)")
    ax.set_ylabel("decode tok/s, one session")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    gen = sorted({r.get("gen_tokens") for _, r in pairs if r.get("gen_tokens") is not None})
    finish(fig, "decode_vs_context", f"Decode speed vs context per KV codec ({'/'.join(map(str, gen))} tokens decoded)",
           pairs, args, written)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="JSON files or directories of them")
    ap.add_argument("--out", default="docs/charts", help="output directory (default docs/charts)")
    ap.add_argument("--pool-mib", type=float, default=256, help="KV pool of the sessions-that-fit panel (MiB)")
    ap.add_argument("--no-png", action="store_true", help="SVG only")
    ap.add_argument("--note", default="", help="a line added to every chart's caption (e.g. about the machine)")
    args = ap.parse_args()
    global NOTE
    NOTE = args.note
    docs = load(args.inputs)
    if not docs:
        print("plot_bench: no llmkv bench reports found", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    written = []
    for chart in (chart_decode_vs_batch, chart_kv_footprint, chart_ttft, chart_decode_vs_context):
        why_not = chart(docs, args, written)
        if why_not:
            print(f"plot_bench: {chart.__name__[6:]}: skipped, {why_not}", file=sys.stderr)
    for path in written:
        print(path)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
