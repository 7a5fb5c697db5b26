#!/usr/bin/env python3
# Builds tests/fixtures/tokenizer/o200k_pretokenize.json: the words of the o200k split pattern
# (tiktoken's o200k_base, the pre-tokenizer of GPT-4o and gpt-oss; GGUF tokenizer.ggml.pre
# "gpt-4o") over a few hundred chosen strings and a seeded set of random ones, as HuggingFace
# tokenizers splits them. gpt-oss's tokenizer.json pre-tokenizes with
#   Sequence[Split(Regex(O200K), behavior="isolated", invert=False), ByteLevel(use_regex=False)]
# and the byte-level step maps bytes to symbols without moving a boundary, so the Split alone
# gives the words (as text, not byte-level symbols). No model file is needed.
#
# Usage (re-runnable; needs `pip install tokenizers`, nothing else):
#   python3 scripts/make_pretokenizer_fixture.py [--out PATH] [--seed N] [--random N]
import argparse
import json
import os
import random
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def chosen_strings():
    s = []
    # English, contractions in every case and position.
    s += [
        "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX", "a", " a", "  a", "a ", "I", "I'm", "i'M", "I'M", "DON'T",
        "don't", "Don't", "DoN'T", "we'VE", "We've", "WE'VE", "they're", "THEY'RE", "They'Re",
        "you'll", "YOU'LL", "You'Ll", "he'd", "HE'D", "it's", "IT'S", "It'S", "she'S",
        "'s", "'S", " 's", "'s'", "''s", "x's's", "rock'n'roll", "O'Neil", "o'neil",
        "O'NEIL", "l'amour", "L'AMOUR", "can't't", "'ll'll", "'tis", "'Tis", "ma'am",
        "y'all", "Y'ALL", "isn't it", "ISN'T IT", "'re", "'ve've", "a'b'c'd", "A'B'C'D",
        "don'tstop", "DON'TSTOP", "Don'tStop", "x'", "X'", "x''", "it\u2019s", "IT\u2019S",
        "it'\u017f", "IT'\u017f", "x'\u017f\u017f", "it'\ufb05", "it'K", "it'\u212a",
        "\u0301'S", "\u0301's", "\u00e9's", "\u00c9'S", "\u03b1's", "\u0391'S",
    ]
    # CamelCase, ALLCAPS, mixed.
    s += [
        "HelloWorld", "helloWorld", "HTTPServer", "XMLHttpRequest", "getHTTPResponseCode",
        "iPhone", "eBay", "McDonald", "MacBookPro", "ABC", "ABCdef", "abcDEF", "aBcDeF",
        "AbCdEf", "CamelCaseString", "snake_case_string", "SCREAMING_SNAKE_CASE",
        "kebab-case-string", "PascalCase123Thing", "x86_64", "UTF8String", "IOError",
        "NaN", "JSONParser", "parseJSON", "A", "AB", "Ab", "aB", "ABc", "AbC",
        "The NASA mission", "NASAmission", "NASA's", "PhD's", "CEOs", "URLs", "IDs",
    ]
    # Mixed scripts.
    s += [
        "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
        "\u0391\u0398\u0397\u039d\u0391 \u0391\u03b8\u03ae\u03bd\u03b1",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
        "\u041c\u041e\u0421\u041a\u0412\u0410 \u041c\u043e\u0441\u043a\u0432\u0430",
        "\u4f60\u597d\u4e16\u754c", "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u30ab\u30bf\u30ab\u30ca ABC",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
        "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 123",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
        "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
        "\u0531\u0532\u0533 \u0561\u0562\u0563", "Hello\u4e16\u754c", "abc\u0410\u0411\u0412def",
        "\u0410\u0411\u0412abc", "\u03b1\u0392\u03b3\u0394", "Stra\u00dfe STRASSE",
        "\u00c9cole \u00e9COLE", "na\u00efve caf\u00e9", "\u0130stanbul \u0131\u0130",
        "\u1e9e\u00df", "\u01c4\u01c5\u01c6", "\u01c5a", "\u01c5A", "a\u01c5", "A\u01c5b",
        "\u1f88\u1f80", "\u1f88a", "x\u1fbcy",
    ]
    # Combining marks after letters, after others, alone, at the start.
    s += [
        "e\u0301", "e\u0301\u0301", "cafe\u0301", "CAFE\u0301", "E\u0301cole", "\u0301",
        "\u0301\u0301", "\u0301a", "\u0301A", "\u0301AB", "\u0301ABc", " \u0301", " \u0301a",
        "!\u0301", "!!\u0301", "1\u0301", "\u0301 x", "x \u0301", "x\u0301y", "X\u0301Y",
        "x\u0301Y", "X\u0301y", "a\u20dd", "\u20ddA", "\u0915\u093f", "\u0915\u094d\u0937",
        "\u093f\u0915", "A\u093fB", "\n\u0301", "\t\u0301", "\u0301\n", "a\u0301'S",
        "A\u0301'S", "\u0e01\u0e34\u0e19", "\u0e34", "Z\u0351\u036b\u0343\u036a\u0302\u036b",
    ]
    # Modifier letters and other letters between cases.
    s += [
        "a\u02b0", "A\u02b0", "a\u02b0A", "A\u02b0a", "\u02b0A", "\u02b0a", "\u02b0\u02b0",
        "AB\u02b0CD", "AB\u02b0cd", "ab\u02b0CD", "x\u02b9y", "\u3005\u3005", "A\u3005B",
        "\u00aaA", "A\u00ba", "\u02c6", "\u02c6A", "ABC\u4e00DEF", "ABC\u4e00def",
        "\u4e00ABC", "\u4e00abc", "A\u4e00", "\u1d2c\u1d2d", "x\u1d43y", "\u2071A",
    ]
    # Numbers: runs of 1..7, with separators, other scripts.
    s += ["1", "12", "123", "1234", "12345", "123456", "1234567", "a1", "a12345b",
          "1,234,567", "1.234.567,89", "3.14159", "-42", "+1 (555) 123-4567", "2024-06-01",
          "12:30:45", "v1.2.3", "0x1F", "1e10", "1_000_000", "100%", "$1,000.00",
          "\u0661\u0662\u0663\u0664", "\u0967\u0968\u0969\u096a\u096b", "\u2160\u2161\u2162",
          "\u00bd\u00bc", "x\u00b2", "1\u00b2", "\u2460\u2461\u2462\u2463",
          "\uff11\uff12\uff13\uff14",
          "A1B2C3", "abc123def456", "123abc", "1 2 3", "12 345 6789", " 123", "  123"]
    # Punctuation runs followed by newlines and slashes.
    s += ["!", "!!", "...", "?!", " !", "  !", "!\n", "!\n\n", "!\r\n", "!/", "!//", "!\n/",
          "!\n/x", "!/\n", "a.\n", "a.\n\nb", "a//b", "a/\nb", "// comment\n", "/* x */\n",
          "http://example.com/path/to/file.html", "https://a.b/c?d=e&f=g#h",
          "C:\\Users\\x", "/usr/local/bin/", "~/.bashrc", "a -> b", "a => b", "x += 1;\n",
          "(a)", "((x))", "[1, 2]", "{\"k\": \"v\"}", "<tag attr=\"v\">", "</tag>\n",
          "#include <stdio.h>\n", "@user", "#hashtag", "&amp;", "a\u2014b", "\u00ab\u00bb",
          "\u201cquoted\u201d", "\u3002\u3001", "\uff01\uff1f", "--\n--", " --\n\n/", ";\r\n/\r\n"]
    # Whitespace of every kind.
    s += [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
          "  \n", " \n ", "\n ", "\n  x", "x\n", "x \n", "x  \n", "x  \n\n  ", "x\t\ty",
          "x \t y", "x  y", "x   y", "x    y", "trailing   ", "trailing\t", " leading",
          "\tleading", "a\n\n \n  b", "a \n b", "a\r\n b", "a\u00a0b", "a\u00a0 b", "a \u00a0b",
          "a\u3000b", "a\u2003b", "a\u2028b", "a\u2029b", "a\u0085b", "a\x0bb", "a\x0cb",
          "a\x1cb", "a\u180eb", "a\u200bb", "a\ufeffb", "a\u202fb", "  \t\n  \t\n",
          "\n\n\n", " \r\n \r\n ", "x\n\ty", "def f():\n    return 1\n",
          "if x:\n\tpass\n\n\n", "line1\nline2\r\nline3\rline4"]
    # Emoji and symbols.
    s += ["\U0001F600", "\U0001F600\U0001F601", "hi \U0001F600", "\U0001F600hi",
          "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
          "\U0001F1FA\U0001F1F8", "\u2764\ufe0f", "a\ufe0fb", "\u00a9 2024", "\u2122",
          "\u2190\u2192", "\u221e", "\u00b0C", "\u20ac100", "\U0001D400\U0001D41A",
          "\U00020000\U00020001"]
    # Longer texts.
    s += [
        "Once upon a time, there was a little girl named Lily. She loved to play outside.",
        "Machine learning is a field of study in artificial intelligence concerned with "
        "the development of statistical algorithms.",
        "I'VE GOT IT! We'll see... They'd've done it, wouldn't they?",
        "The function `getUserByID(42)` returns a User object; it's cached for 3600s.",
        "<|start|>user<|message|>What's 2+2?<|end|>",
        "Dr. Smith's PhD thesis (2019) covered \u00abnon-linear\u00bb dynamics\u2014see p. 42.",
        "\u041c\u044b \u043b\u044e\u0431\u0438\u043c Python 3.12 \u0438 C++20!",
        "\u6211\u7231Python\u548cRust\uff0c\u7248\u672c1.75\u3002",
        "def __init__(self, x: int = 0) -> None:\n        self.x = x  # TODO\n",
        "SELECT * FROM users WHERE id = 1;\n",
        "   leading and trailing   \n\n",
    ]
    return s


def random_strings(rng, count):
    # A pool with every class the pattern tells apart: ASCII of each kind, Lu/Ll/Lt/Lm/Lo,
    # marks (Mn, Mc, Me), numbers (Nd, Nl, No), every kind of white space, CR/LF, slashes,
    # apostrophes and contraction letters in both cases, punctuation and symbols, emoji.
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            + list("'''''sStTdDmMlLrReEvV")
            + list("!?.,;:-_/\\\"#$%&()*+<=>@[]^`{|}~//")
            + [" ", " ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85",
               "\u00a0", "\u2003", "\u3000", "\u2028", "\u200b", "\ufeff"]
            + ["\u00e9", "\u00c9", "\u00df", "\u0130", "\u0131", "\u017f", "\u01c5", "\u01c8",
               "\u1f88", "\u03b1", "\u0391", "\u0436", "\u0416", "\u0561", "\u0531",
               "\u02b0", "\u02b9", "\u3005", "\u00aa", "\u1d43",
               "\u4e00", "\u597d", "\u3042", "\u30ab", "\ud55c", "\u05d0", "\u0645", "\u0e01",
               "\u0915", "\u0928",
               "\u0301", "\u0308", "\u0327", "\u093f", "\u094d", "\u0e34", "\u064e", "\u20dd",
               "\u0903", "\u0488",
               "\u0661", "\u0967", "\u2160", "\u00bd", "\u00b2", "\u2460", "\uff11",
               "\u2014", "\u201c", "\u00ab", "\u3002", "\u00a9", "\u20ac", "\u2192",
               "\U0001F600", "\U0001F44D", "\U0001F3FD", "\u200d", "\ufe0f", "\U0001D400",
               "\U00020000"])
    out = []
    for _ in range(count):
        n = rng.randint(1, 24)
        out.append("".join(rng.choice(pool) for _ in range(n)))
    return out


def main():
    ap = argparse.ArgumentParser(description="o200k pre-tokenizer reference fixture")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "tokenizer",
                                                  "o200k_pretokenize.json"))
    ap.add_argument("--seed", type=int, default=200019)
    ap.add_argument("--random", type=int, default=400)
    args = ap.parse_args()

    import tokenizers
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False)])
    texts = []
    seen = set()
    for t in chosen_strings() + random_strings(random.Random(args.seed), args.random):
        if t and t not in seen:
            seen.add(t)
            texts.append(t)
    cases = []
    for t in texts:
        words = [w for w, _ in split.pre_tokenize_str(t)]
        if "".join(words) != t:
            sys.exit(f"the words of {t!r} do not cover it: {words!r}")
        cases.append({"text": t, "words": words})

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write('  "description": ' + json.dumps(
            "Words of the o200k split pattern (tokenizer.ggml.pre \"gpt-4o\": GPT-4o, gpt-oss) "
            "from HuggingFace tokenizers' Split(Regex(pattern), isolated); made by "
            "scripts/make_pretokenizer_fixture.py. Chosen strings, then random ones "
            f"(seed {args.seed}).") + ",\n")
        f.write('  "generator": ' + json.dumps(f"tokenizers {tokenizers.__version__}") + ",\n")
        f.write('  "pattern": ' + json.dumps(O200K_PATTERN) + ",\n")
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            f.write("    " + json.dumps(c, ensure_ascii=False))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("  ]\n}\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
