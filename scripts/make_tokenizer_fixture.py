#!/usr/bin/env python3
# Builds tests/fixtures/tokenizer_smollm2.json: reference token ids for SmolLM2's tokenizer,
# computed with HuggingFace `tokenizers` configured exactly as SmolLM2's tokenizer.json.
#
# Usage (re-runnable; needs `pip install tokenizers gguf numpy`, no network beyond PyPI):
#   python3 scripts/make_tokenizer_fixture.py [--model PATH] [--out PATH]
# The model defaults to $LLMKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf.
#
# The vocabulary and merges are read from the GGUF file. The tokenizer is built as:
#   model: BPE(vocab, merges, no unk, no byte fallback, no dropout)
#   pre_tokenizer: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
#                  use_regex=True)]
#   decoder: ByteLevel; added tokens: every token_type 3 (control) token, special=True.
# Every text is also encoded with SmolLM2's vocabulary under two other pre-tokenizations,
# recorded with "pre": "gpt2" (ByteLevel(use_regex=True) alone) and "pre": "llama-bpe"
# (Split(Llama 3 pattern, isolated) + ByteLevel(use_regex=False), BPE ignore_merges=True).
# Each text is encoded with add_special_tokens=False twice: with special-token parsing (HF's
# default) and without it (Tokenizer.encode_special_tokens = True, which makes HF treat the
# text of special tokens as ordinary text). Cases whose two results are equal are stored once
# with "parse_special": null, meaning "both".

import argparse
import hashlib
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def field_scalar(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    return v[0].item() if hasattr(v[0], "item") else v[0]


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_vocab(model_path):
    import gguf

    r = gguf.GGUFReader(model_path)
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    merges = field_strings(r, "tokenizer.ggml.merges")
    types = field_ints(r, "tokenizer.ggml.token_type")
    model = bytes(r.fields["tokenizer.ggml.model"].parts[-1]).decode()
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    if model != "gpt2" or pre != "smollm":
        sys.exit(f"expected a SmolLM2 file (gpt2/smollm), got model={model} pre={pre}")
    return tokens, merges, types


def build_tokenizer(model_path, pre="smollm", vocab_data=None):
    """SmolLM2's tokenizer ("smollm"), or its vocabulary with the pre-tokenization of
    "gpt2" (plain GPT-2 pattern) or "llama-bpe" (Llama 3 pattern, ignore_merges)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens, merges, types = vocab_data or read_vocab(model_path)
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    # No unk token, no continuing-subword prefix, no end-of-word suffix, no dropout.
    bpe = models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False,
                     ignore_merges=(pre == "llama-bpe"))
    tok = Tokenizer(bpe)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre == "llama-bpe":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        raise ValueError(pre)
    tok.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens(
        [AddedToken(s, special=True, normalized=False, lstrip=False, rstrip=False)
         for s in specials])
    for s in specials:
        assert tok.token_to_id(s) == vocab[s], s
    return tok, len(tokens), missing_byte_symbols(vocab)


def byte_to_unicode():
    # GPT-2's byte-level alphabet: printable bytes map to themselves, the others to U+0100+.
    keep = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def missing_byte_symbols(vocab):
    return {b for b, c in byte_to_unicode().items() if c not in vocab}


def test_strings():
    s = []
    # ---- ASCII prose -------------------------------------------------------------------
    s += [
        "Hello world",
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "a",
        " a",
        "  a",
        "a ",
        "I",
        "Once upon a time, there was a little girl named Lily. She loved to play outside.",
        "Machine learning is a field of study in artificial intelligence concerned with the "
        "development of statistical algorithms that can learn from data.",
        "What is the capital of France? The capital of France is Paris.",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "e-mail, co-operate, state-of-the-art, well-known",
        "U.S.A. vs. U.K.; Mr. Smith & Dr. Jones (Ph.D.)",
        "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
        "http://example.com/path?query=1&b=2#frag",
        "user@example.org, <admin@test.io>",
        "Hello\nworld",
        "Hello\n\nworld",
        "Title\n=====\n\nBody text.",
        "- item one\n- item two\n  - nested item\n",
        "1. first\n2. second\n10. tenth",
        "**bold** _italic_ `code` ~~strike~~",
        "# Heading\n## Subheading\n### Third",
        "> quoted text\n>> nested quote",
        "It's a dog's life, isn't it? They're here; we've gone; I'm fine; you'll see; he'd go.",
        "IT'S LOUD, ISN'T IT? THEY'RE HERE, WE'VE GONE, I'M FINE, YOU'LL SEE, HE'D GO.",
        "It'S mIxEd'Ve 'Re 'LL 'D 'M 'T",
        "'s 't 're 've 'm 'll 'd",
        "''s '''t rock'n'roll o'clock",
        "don't", "Don't", "DON'T", "won't've", "y'all'd've",
        "'", "''", "'''", "' s", "'x", "a'b",
        "\"quoted\" 'single' `back`",
        "The year 2024 was followed by 2025.",
        "Call 555-123-4567 or +1 (800) 555-0199.",
        "Pi is 3.14159265358979323846264338327950288419716939937510",
        "1234567890",
        "0", "00", "007", "1,000,000", "1.000.000,50", "12:30:45", "2024-01-15T10:30:00Z",
        "v1.2.3-beta+build.5", "x2 y22 z222 w2222", "abc123def456", "123abc", " 123", "  42  ",
        "1e10 -5 +7 3.0e-8 0x1F 0b1011 0o17",
        "99 bottles of beer on the wall, 99 bottles of beer.",
        "100%", "$1,234.56", "€99,99", "£5", "¥1000", "50°C", "-40°F",
    ]
    # ---- code --------------------------------------------------------------------------
    s += [
        "def foo(x):\n    return x + 1\n",
        "int main(int argc, char **argv) {\n\treturn 0;\n}\n",
        "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
        "if x == 1 and y != 2 or not z:\n        pass\n",
        "class Foo:\n    def __init__(self):\n        self.x = []\n\n    def bar(self):\n"
        "        return {'a': 1, \"b\": [2, 3]}\n",
        "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
        "const f = async (a, b) => { await g(a ?? b); };",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
        "<html><body><div class=\"x\">Hi</div></body></html>",
        "{\"key\": \"value\", \"n\": 42, \"list\": [1, 2.5, null, true]}",
        "x += 1; y -= 2; z *= 3; w /= 4; v %= 5; u **= 6; t //= 7",
        "a && b || !c; d << 2 >> 1; e & f | g ^ ~h",
        "std::vector<std::pair<int, std::string>> v;",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "$ ls -la | grep \"\\.txt$\" > out.log 2>&1",
        "    indented four\n        indented eight\n\t\ttabbed twice",
        "print(\"Hello, World!\")  # comment",
        "/* block\n * comment\n */",
        "lambda x: x**2 if x > 0 else -x",
        "@decorator\ndef f(*args, **kwargs): ...",
        "::::;;;;,,,,....!!!!????",
        "=====================",
        "----------------------------------------",
        "________________________________",
        "#!/usr/bin/env python3\n",
        "    \n    \n",
        "a = [1,2,3]\nb = {i: i*i for i in a}\n",
        "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
        "\\n \\t \\\\ \\\" \\u00e9",
        "0.5f 1e-3 1_000_000 0xdeadBEEF 1u 2ull",
    ]
    # ---- unicode letters ---------------------------------------------------------------
    s += [
        "café", "naïve résumé", "Crème brûlée à la française", "Ångström", "Øresund", "Straße",
        "ŁÓDŹ Łódź żółć", "İstanbul ışık", "ñandú Español", "Ça va? Où est-il?",
        "Ελληνικά: Γειά σου Κόσμε", "αβγδεζηθ ΑΒΓΔ", "Русский язык: Привет, мир!",
        "Україна, Їжак, ґанок", "Български", "Српски језик",
        "العربية: مرحبا بالعالم", "مرحبا 123 عالم", "٣٤٥ ١٢", "עברית: שלום עולם",
        "हिन्दी: नमस्ते दुनिया", "বাংলা ভাষা", "தமிழ் மொழி", "ไทย: สวัสดีชาวโลก",
        "Tiếng Việt có dấu", "ქართული ენა", "Հայերեն", "አማርኛ",
        "e\u0301", "\u0301", "\u0301\u0301\u0301", "a\u0308o\u0308u\u0308",
        " \u0301", "\u0301a", "x\u20dd", "\u200b", "a\u200bb", "\u200d", "\ufeffBOM",
        "\u00a0", "a\u00a0b", "a\u3000b", "\u2003em\u2002en\u2009thin",
        "a\u2028b\u2029c", "a\u0085b", "\x1c\x1d\x1e\x1f", "a\x0bb\x0cc",
        "\x00", "a\x00b", "\x01\x02\x7f",
        "ﬁ ﬂ ligatures", "Ⅻ Ⅳ roman", "½ ¾ ⅓", "x² y³ H₂O", "①②③",
        "１２３ ＡＢＣ", "٠١٢٣٤٥٦٧٨٩", "०१२३", "𝟘𝟙𝟚", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "ǅ ǈ ǋ titlecase", "ʰʲʷ modifier", "ーー カタカナー",
        "\U0001f600\u0301",
        "\U00042126\U00042126",  # lead byte 0xF1 has no symbol: dropped before merging
    ]
    # ---- CJK ---------------------------------------------------------------------------
    s += [
        "你好，世界！", "中文测试：今天天气很好。", "我爱北京天安门", "繁體中文字",
        "日本語のテキストです。", "ひらがなカタカナ漢字", "東京は日本の首都です",
        "한국어 텍스트", "안녕하세요 세계", "中文English混合text", "価格は1000円です",
        "「引用」『二重』【括弧】", "𠀀𠀁𪚥", "〇一二三四五六七八九十",
    ]
    # ---- emoji -------------------------------------------------------------------------
    s += [
        "😀", "😀😃😄", "Hello 👋 world 🌍!", "👍🏽", "👍🏻👍🏼👍🏽👍🏾👍🏿",
        "👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "🏴‍☠️", "❤️", "♥", "✔️✅❌", "🇺🇸🇯🇵🇫🇷",
        "🧑🏾‍🤝‍🧑🏻", "1️⃣2️⃣#️⃣", "🙂 🙃", "  😀  ", "a😀b", "😀123😀", "🎉🎉🎉 party",
        "☕️ and 🍕", "↑↓←→", "∑∏∫√∞≈≠≤≥", "★☆♠♣♦", "©®™", "•·…–—",
        "“smart quotes” ‘single’", "«guillemets» „low“",
    ]
    # ---- whitespace --------------------------------------------------------------------
    s += [
        "", " ", "  ", "   ", "    ", "        ", " " * 33,
        "\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n", "\n" * 10, "\r", "\r\n", "\r\n\r\n",
        " \n", "\n ", " \n ", "\t\n", "\n\t", " \t \n \r\n ", "\r\r\n\n",
        "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb",
        "a \nb", "a\n b", "a \n b", "a\t b", "a \tb", "a\t\n\tb",
        " leading", "  leading two", "\tleading tab", "\nleading newline",
        "trailing ", "trailing  ", "trailing\t", "trailing\n", "trailing\n\n",
        "  both  ", "\n\nboth\n\n", " \t mixed \t ",
        "word1 word2  word3   word4    word5",
        "line1\r\nline2\r\nline3\r\n",
        "para one.\n\n\npara two.\n\n\n\npara three.",
        "  x  y  ", "x \n\n y", ". .", " . ", " .", ". ", " , ,", "a , b",
        "  !!", " !!", "!! ", "!!  x", " 1 2 3 ", "1 2  3   4",
        "  12  345  ", "\n1\n22\n333\n", "\t9\t", " 😀 😀", "  中文  ",
    ]
    # ---- punctuation -------------------------------------------------------------------
    s += [
        "!!!", "???", "...", "?!?!", "!?", "…", "!!!!!!!!!!!!!!!!!!!!!!!!",
        "(((nested)))", "[[[]]]", "{{{}}}", "<<<>>>", "\"\"\"docstring\"\"\"", "'''",
        "a.b.c", "a,b,c", "a;b:c", "a/b\\c", "a|b", "a_b", "a-b", "a--b", "a---b",
        "--flag=value", "-x", "~/.config/app", "C:\\Users\\name\\file.txt",
        "#hashtag @mention", "&amp; &lt; &gt;", "%20%3D%26", "$$$", "^_^", ":-) ;-) :-(",
        "...!!!???", ",.;:", " , ", "( )", "[ ]", "*", "**", "***",
        "!\n", "?\n\n", ".\r\n", "a.\n", "end.\n\nNext",
    ]
    # ---- special tokens ----------------------------------------------------------------
    s += [
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "text<|endoftext|>more text",
        "<|im_start|><|im_end|>",
        "<|im_start|> <|im_end|>",
        " <|im_start|> ",
        "<|im_start|>assistant\n4<|im_end|>\n",
        "<|im_start|<|im_start|>|>",
        "<|im_start",
        "<|im_end|>>",
        "<<|im_end|>",
        "<|im_end||im_end|>",
        "<|IM_START|>",
        "<repo_name>llmkv<file_sep>src/main.cpp<filename>",
        "<reponame>x<gh_stars>100",
        "<issue_start>bug<issue_comment>fixed<issue_closed>",
        "<jupyter_start><jupyter_text>md<jupyter_code>x=1<jupyter_output>1<empty_output>",
        "<jupyter_script>",
        "Use <|endoftext|> to end.",
        "<|endoftext|><|endoftext|>",
        "\n<|im_end|>\n",
        "<|im_start|>user\n😀 ½ ١٢<|im_end|>",
        "<s></s><unk>",
        "<|eot_id|><|end_of_text|>",
    ]
    # ---- longer mixed ------------------------------------------------------------------
    s += [
        "The 3 little pigs built 3 houses: one of straw, one of sticks, and one of bricks. "
        "The wolf huffed and puffed 1,000 times!",
        "In 1969, Apollo 11 landed on the Moon. Neil Armstrong said: \"That's one small step "
        "for [a] man, one giant leap for mankind.\"",
        "Résumé: 5 años de experiencia en programación (Python, C++). Contacto: "
        "juan@ejemplo.es",
        "Das Wetter in München ist heute schön: 23°C und sonnig. Übermorgen regnet's.",
        "Москва — столица России; население ≈ 13 млн человек (2021).",
        "東京タワーの高さは333メートルです。Tokyo Tower is 333m tall.",
        "Emoji test: I ❤️ NY 🗽, pizza 🍕 x2, thumbs 👍🏿!",
        "Tabs\tand\tspaces  mixed\t \tup\n\tand newlines\r\n  too",
        "SmolLM2 is a family of compact language models available in three sizes: 135M, 360M, "
        "and 1.7B parameters.",
        "Q: What's 17 * 23?\nA: 17 * 23 = 391.",
        "```python\nimport numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n```",
        "| col1 | col2 |\n|------|------|\n| a    | b    |",
        "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$",
    ]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    default_model = os.environ.get("LLMKV_MODEL") or os.path.join(
        REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=default_model)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures",
                                                  "tokenizer_smollm2.json"))
    args = ap.parse_args()

    vocab_data = read_vocab(args.model)
    texts = test_strings()
    distinct = list(dict.fromkeys(texts))
    cases = []
    n_split = 0
    n_vocab = len(vocab_data[0])
    for pre in ("smollm", "gpt2", "llama-bpe"):
        tok, n_vocab, missing_bytes = build_tokenizer(args.model, pre, vocab_data)
        for text in distinct:
            tok.encode_special_tokens = False
            with_special = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            # Decoding must give the text back (skip_special_tokens=False keeps special
            # text), except where the text has a byte whose byte-level symbol is not in the
            # vocabulary (SmolLM2 lacks 21 of them, e.g. 0x1d): BPE without an unk token
            # drops those.
            roundtrip = not any(b in missing_bytes for b in text.encode("utf-8"))
            for ids in (with_special, plain):
                back = tok.decode(ids, skip_special_tokens=False)
                if (back == text) != roundtrip:
                    sys.exit(f"unexpected round trip for {text!r}: {back!r}")
            variants = [(None, with_special)]
            if with_special != plain:
                n_split += 1
                variants = [(True, with_special), (False, plain)]
            for parse, ids in variants:
                case = {"text": text}
                if pre != "smollm":
                    case["pre"] = pre
                case["parse_special"] = parse
                case["ids"] = ids
                if not roundtrip:
                    case["roundtrip"] = False
                cases.append(case)

    import tokenizers
    doc = {
        "description": "SmolLM2 tokenizer reference ids from HuggingFace tokenizers; made by "
                       "scripts/make_tokenizer_fixture.py. parse_special null = same ids "
                       "with and without special-token parsing. Cases with \"pre\" use "
                       "SmolLM2's vocabulary with another pre-tokenization: gpt2 (plain "
                       "GPT-2 pattern) or llama-bpe (Llama 3 pattern, ignore_merges).",
        "generator": f"tokenizers {tokenizers.__version__}",
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "n_vocab": n_vocab,
        "decode_roundtrip": "decode(ids) == text unless the case says roundtrip: false",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        keys = [k for k in doc if k != "cases"]
        for k in keys:
            f.write(f"  {json.dumps(k)}: {json.dumps(doc[k], ensure_ascii=False)},\n")
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write("    " + json.dumps(c, ensure_ascii=False, separators=(", ", ": ")) + sep
                    + "\n")
        f.write("  ]\n}\n")
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(distinct)} distinct strings x 3 pre-tokenizers, "
          f"{len(cases)} cases ({n_split} differ with special parsing), {size} bytes")


if __name__ == "__main__":
    main()
