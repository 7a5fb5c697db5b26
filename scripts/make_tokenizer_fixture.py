#!/usr/bin/env python3
# Builds the tokenizer reference fixtures from HuggingFace tokenizers:
#   tests/fixtures/tokenizer_smollm2.json  SmolLM2's tokenizer, configured exactly as SmolLM2's
#                                          tokenizer.json (and two other pre-tokenizations)
#   tests/fixtures/tokenizer_gemma3.json   Gemma 3's tokenizer, made by transformers from the
#                                          GGUF file itself (--gemma3)
#   tests/fixtures/tokenizer_pretokenize.json  the words of the llama-bpe and qwen2 split
#                                          patterns, from HF's Split pre-tokenizer (--pretokenize;
#                                          needs no model file)
#
# Usage (re-runnable; needs `pip install tokenizers gguf numpy`, and `transformers
# sentencepiece protobuf` for --gemma3; no torch, no network beyond PyPI):
#   python3 scripts/make_tokenizer_fixture.py [--model PATH] [--out PATH]
#   python3 scripts/make_tokenizer_fixture.py --gemma3 [--model PATH] [--out PATH] [--hf-cache F]
#   python3 scripts/make_tokenizer_fixture.py --pretokenize [--out PATH]
# The SmolLM2 model defaults to $LLMKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf; the
# Gemma 3 one to models/gemma-3-270m-q4_k_m.gguf.
#
# SmolLM2: the vocabulary and merges are read from the GGUF file. The tokenizer is built as:
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
#
# Gemma 3: transformers' own GGUF tokenizer conversion
# (transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer) applied to
# the tokenizer.* metadata of the file, read with the `gguf` package (transformers' GGUF reader
# imports torch; the conversion itself does not need it). That gives a SentencePiece-style BPE
# with byte fallback whose merges are derived from the vocabulary, spaces as U+2581, control
# tokens added as special and user-defined ones as plain added tokens. The conversion takes a
# couple of minutes; --hf-cache FILE saves the resulting tokenizer.json (and reuses it).
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


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main_pretokenize(args):
    """Words of the Llama 3 ("llama-bpe") and Qwen2 split patterns, from HuggingFace's
    Split(Regex(pattern), behavior="isolated") pre-tokenizer: no model file needed."""
    import tokenizers
    from tokenizers import Regex, pre_tokenizers

    out = args.out or os.path.join(REPO, "tests", "fixtures", "tokenizer_pretokenize.json")
    texts = list(dict.fromkeys(gemma3_test_strings() + [
        "Hello 12345 world!!\n\n  x", "IT'S 'Re", "a\n\n \n  b", "(x) \tend", "x\r\n\r\ny",
        "１２３４５", "٣٤٥٦", "3.14159", "v2.0.1-rc3", "caf\u00e9 cafe\u0301", " \U0001f600\U0001f600 ",
        "don't DON'T Don'T", "  'll", "$100,000.00", "\u00b2\u00b3\u00bd", "a\u3000\u3000b",
    ]))
    cases = []
    for pre, pattern in (("llama-bpe", LLAMA3_PATTERN), ("qwen2", QWEN2_PATTERN)):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
        for text in texts:
            words = [w for w, _ in split.pre_tokenize_str(text)]
            assert "".join(words) == text, text
            cases.append({"pre": pre, "text": text, "words": words})
    doc = {
        "description": "Words of the llama-bpe (Llama 3) and qwen2 split patterns, from "
                       "HuggingFace tokenizers' Split(Regex(pattern), isolated); made by "
                       "scripts/make_tokenizer_fixture.py --pretokenize. No normalization "
                       "(Qwen2's NFC is applied by the tokenizer before splitting).",
        "generator": f"tokenizers {tokenizers.__version__}",
    }
    write_fixture(out, doc, cases)
    print(f"wrote {out}: {len(cases)} cases, {os.path.getsize(out)} bytes")


def read_gguf_tokenizer_metadata(model_path):
    """(architecture, {tokenizer.* key: value}) read with the gguf package."""
    import gguf

    r = gguf.GGUFReader(model_path)
    md = {}
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.") and key != "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                md[key] = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                md[key] = [f.parts[i][0].item() for i in f.data]
        elif t == gguf.GGUFValueType.STRING:
            md[key] = bytes(f.parts[-1]).decode("utf-8")
        else:
            md[key] = f.parts[f.data[0]][0].item()
    return md.pop("general.architecture"), md


def build_gemma3_tokenizer(model_path, cache=None):
    """Gemma 3's tokenizer as transformers builds it from the GGUF file."""
    from tokenizers import Tokenizer

    if cache and os.path.exists(cache):
        return Tokenizer.from_file(cache)
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

    arch, md = read_gguf_tokenizer_metadata(model_path)
    if arch != "gemma3" or md.get("tokenizer.ggml.model") != "llama":
        sys.exit(f"expected a Gemma 3 file (gemma3/llama), got {arch}/{md.get('tokenizer.ggml.model')}")
    tokenizer_dict = {name: md[f"tokenizer.{key}"]
                      for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if f"tokenizer.{key}" in md}
    tok, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    if cache:
        tok.save(cache)
    return tok


def gemma3_test_strings():
    s = test_strings()
    # ---- Gemma's control and user-defined tokens ---------------------------------------
    s += [
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n",
        "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
        "<start_of_turn><end_of_turn>", "x<end_of_turn>y", "<start_of_turn ", "<end_of_turn",
        "<<start_of_turn>>", "<START_OF_TURN>", "<unused0><unused99>", "[multimodal]",
        "<start_of_image><end_of_image>", "<table><tr><td>1</td></tr></table>",
        "<h1>Title</h1><p>text</p>", "<strong>bold</strong> <em>it</em> <code>x</code>",
        "<s>x</s>", "<div><span>a</span></div>", "<b><i><u>biu</u></i></b>",
        "a\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nb",
        "\t" * 40, "\t \t", " \t", "\t\n\t\t\n",
    ]
    # ---- runs of spaces (Gemma has tokens for 2..31 spaces) ----------------------------
    s += [" " * k for k in (5, 16, 17, 30, 31, 32, 33, 40, 62, 64, 100)]
    s += ["a" + " " * k + "b" for k in (2, 3, 7, 31, 32, 33, 45)]
    s += ["x" + " " * k + "the" for k in (1, 2, 3, 4)]
    s += ["    return x;\n        }\n", "  - item\n    - sub\n", "a \u2581 b", "\u2581\u2581x",
          "\u2581", "\u2581\u2581\u2581"]
    # ---- byte fallback: characters the vocabulary lacks ---------------------------------
    s += [
        "\ue000\ue001\uf8ff", "a\U000f0000b", "\U0010fffd", "\U0001d11e \U0001d120",
        "\U0001f9ec\U0001fae8\U0001fabf", "\u0378\u0379", "\U00013000\U00013001 hieroglyphs",
        "\U0001e900 adlam", "\x00\x01\x02\x03\x04\x05\x06\x07\x08", "\x7f\x80\x81",
        "\u2fff\u31e4", "\U0002a6d6\U0002b734", "\uffff\ufffe", "\U000e0041\U000e007f",
    ]
    return s


def write_fixture(out_path, doc, cases):
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k in doc:
            f.write(f"  {json.dumps(k)}: {json.dumps(doc[k], ensure_ascii=False)},\n")
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write("    " + json.dumps(c, ensure_ascii=False, separators=(", ", ": ")) + sep
                    + "\n")
        f.write("  ]\n}\n")


def main_gemma3(args):
    import tokenizers

    model = args.model or os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
    out = args.out or os.path.join(REPO, "tests", "fixtures", "tokenizer_gemma3.json")
    tok = build_gemma3_tokenizer(model, args.hf_cache)
    texts = list(dict.fromkeys(gemma3_test_strings()))
    cases = []
    n_split = 0
    for text in texts:
        tok.encode_special_tokens = False
        with_special = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        # Every byte has a <0xNN> token, so decoding gives the text back.
        roundtrip = True
        for ids in (with_special, plain):
            if tok.decode(ids, skip_special_tokens=False) != text:
                roundtrip = False
        variants = [(None, with_special)]
        if with_special != plain:
            n_split += 1
            variants = [(True, with_special), (False, plain)]
        for parse, ids in variants:
            case = {"text": text, "parse_special": parse, "ids": ids}
            if not roundtrip:
                case["roundtrip"] = False
            cases.append(case)
    doc = {
        "description": "Gemma 3 tokenizer reference ids from HuggingFace tokenizers, the "
                       "tokenizer made by transformers' GGUF conversion from the model file; "
                       "made by scripts/make_tokenizer_fixture.py --gemma3. parse_special null "
                       "= same ids with and without special-token parsing; ids exclude BOS.",
        "generator": f"tokenizers {tokenizers.__version__}, transformers "
                     f"{__import__('transformers').__version__}",
        "model_file": os.path.basename(model),
        "model_sha256": sha256_file(model),
        "n_vocab": tok.get_vocab_size(with_added_tokens=True),
        "decode_roundtrip": "decode(ids) == text unless the case says roundtrip: false",
    }
    write_fixture(out, doc, cases)
    print(f"wrote {out}: {len(texts)} distinct strings, {len(cases)} cases "
          f"({n_split} differ with special parsing), {os.path.getsize(out)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    default_model = os.environ.get("LLMKV_MODEL") or os.path.join(
        REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--gemma3", action="store_true",
                    help="build tokenizer_gemma3.json from the Gemma 3 GGUF file")
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--hf-cache", default=None,
                    help="--gemma3: save/reuse the converted tokenizer.json here")
    ap.add_argument("--pretokenize", action="store_true",
                    help="build tokenizer_pretokenize.json (llama-bpe and qwen2 splits; no model)")
    args = ap.parse_args()
    if args.pretokenize:
        main_pretokenize(args)
        return
    if args.gemma3:
        main_gemma3(args)
        return
    args.model = args.model or default_model
    args.out = args.out or os.path.join(REPO, "tests", "fixtures", "tokenizer_smollm2.json")

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
    write_fixture(args.out, {k: v for k, v in doc.items() if k != "cases"}, cases)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(distinct)} distinct strings x 3 pre-tokenizers, "
          f"{len(cases)} cases ({n_split} differ with special parsing), {size} bytes")


if __name__ == "__main__":
    main()
