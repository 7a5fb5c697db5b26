#!/usr/bin/env python3
"""ABI check of libllmkv: the header against the committed baseline, the library's exports.

    check_abi.py [--header include/llmkv.h] [--baseline packaging/abi/llmkv.layout]
                 [--symbols packaging/abi/symbols.txt] [--library build/libllmkv.so]
                 [--version 0.4.0] [--cc cc] [--write-baseline]

Header (always): bindings/abi/gen_layout.py prints every struct's size and alignment, every
field's offset and size, every constant and every function of the header as the C compiler
sees them. Against the baseline only additions pass:
  - a struct keeps its alignment, never shrinks, every field keeps its offset and size, and a
    field new to a struct lies at or past the struct's old size (appended);
  - a constant keeps its value (LLMKV_VERSION_* excepted); a function is never removed.
  - every function of the header has a line in symbols.txt with a version no later than the
    project's; a function that takes a struct which grew has the project's MAJOR.MINOR.0
    (a program built against the larger struct needs this library).
Library (with --library): `nm -D --defined-only` lists exactly the llmkv_* functions of the
header (no other symbol, none missing), and the SONAME is libllmkv.so.MAJOR.
Exit status 0 when all hold, 1 with one line per violation on stderr.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def vtuple(v):
    return tuple(int(x) for x in v.split("."))


def header_layout(header, cc):
    gen = os.path.join(ROOT, "bindings", "abi", "gen_layout.py")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "layout.c")
        exe = os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write(subprocess.run([sys.executable, gen, header], check=True,
                                   capture_output=True, text=True).stdout)
        subprocess.run([cc, "-I", os.path.dirname(os.path.abspath(header)), src, "-o", exe], check=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout


def parse_layout(text):
    structs, fields, consts, funcs = {}, {}, {}, set()
    for line in text.splitlines():
        p = line.split("\t")
        if p[0] == "struct":
            structs[p[1]] = (int(p[2]), int(p[3]))
        elif p[0] == "field":
            fields[(p[1], p[2])] = (int(p[3]), int(p[4]))
        elif p[0] == "const":
            consts[p[1]] = p[2]
        elif p[0] == "func":
            funcs.add(p[1])
    return structs, fields, consts, funcs


def parse_symbols(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            name, ver = line.split()[:2]
            out[name] = ver
    return out


def function_struct_params(header):
    """function -> set of struct type names among its parameters."""
    text = re.sub(r"/\*.*?\*/", " ", open(header, encoding="utf-8").read(), flags=re.S)
    out = {}
    for m in re.finditer(r"LLMKV_API[^;]*?\b(llmkv_\w+)\s*\(([^;]*?)\)\s*;", text, re.S):
        out[m.group(1)] = set(re.findall(r"\b(llmkv_\w+)\b", m.group(2)))
    return out


def check_header(header, baseline_text, symbols, version, cc, errors, notes):
    cur_text = header_layout(header, cc)
    bs, bf, bc, bfn = parse_layout(baseline_text)
    cs, cf, cc_, cfn = parse_layout(cur_text)
    grown = set()
    for name, (size, align) in bs.items():
        if name not in cs:
            errors.append(f"struct {name} removed")
            continue
        nsize, nalign = cs[name]
        if nalign != align:
            errors.append(f"struct {name}: alignment {align} -> {nalign}")
        if nsize < size:
            errors.append(f"struct {name}: size {size} -> {nsize} (shrank)")
        elif nsize > size:
            grown.add(name)
            notes.append(f"struct {name} grew {size} -> {nsize}")
    for (s, fld), (off, size) in bf.items():
        if (s, fld) not in cf:
            errors.append(f"field {s}.{fld} removed or renamed")
        elif cf[(s, fld)] != (off, size):
            errors.append(f"field {s}.{fld}: offset/size {off}/{size} -> {cf[(s, fld)][0]}/{cf[(s, fld)][1]}")
    for (s, fld), (off, size) in cf.items():
        if (s, fld) not in bf and s in bs and off < bs[s][0]:
            errors.append(f"field {s}.{fld} added at offset {off}, inside the old struct (size {bs[s][0]}): "
                          "fields are only appended")
        elif (s, fld) not in bf:
            notes.append(f"field {s}.{fld} added at offset {off}")
    for name, value in bc.items():
        if name.startswith("LLMKV_VERSION_"):
            continue
        if name not in cc_:
            errors.append(f"constant {name} removed")
        elif cc_[name] != value:
            errors.append(f"constant {name}: value {value} -> {cc_[name]}")
    for name in sorted(set(cc_) - set(bc)):
        notes.append(f"constant {name} added")
    for name in sorted(bfn - cfn):
        errors.append(f"function {name} removed from the header")
    for name in sorted(cfn - bfn):
        notes.append(f"function {name} added")
    # symbols.txt: every header function has a version; none later than the project's; a
    # function taking a struct that grew needs the current MAJOR.MINOR.0.
    proj = vtuple(version)
    minor_base = f"{proj[0]}.{proj[1]}.0"
    params = function_struct_params(header)
    for name in sorted(cfn):
        if name not in symbols:
            errors.append(f"function {name} has no line in symbols.txt (add: {name} {minor_base})")
            continue
        if vtuple(symbols[name]) > proj:
            errors.append(f"symbols.txt: {name} {symbols[name]} is later than the project version {version}")
        for s in sorted(params.get(name, set()) & grown):
            if vtuple(symbols[name]) < vtuple(minor_base):
                errors.append(f"symbols.txt: {name} takes {s}, which grew: its version must be {minor_base}")
    for name in sorted(set(symbols) - cfn):
        errors.append(f"symbols.txt lists {name}, which the header no longer declares (never remove a function)")
    return cur_text, cfn


def check_library(library, header_funcs, version, errors):
    nm = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    exported = set()
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            exported.add(parts[2].split("@")[0])
    for name in sorted(exported):
        if not re.fullmatch(r"llmkv_\w+", name):
            errors.append(f"{library} exports {name}: only llmkv_* functions may be exported")
        elif name not in header_funcs:
            errors.append(f"{library} exports {name}, which include/llmkv.h does not declare")
    for name in sorted(header_funcs - exported):
        errors.append(f"include/llmkv.h declares {name}, which {library} does not export")
    dyn = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dyn)
    want = f"libllmkv.so.{version.split('.')[0]}"
    if not m or m.group(1) != want:
        errors.append(f"{library}: SONAME {m.group(1) if m else '(none)'}, expected {want}")
    return len(exported)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", default=os.path.join(ROOT, "include", "llmkv.h"))
    ap.add_argument("--baseline", default=os.path.join(ROOT, "packaging", "abi", "llmkv.layout"))
    ap.add_argument("--symbols", default=os.path.join(ROOT, "packaging", "abi", "symbols.txt"))
    ap.add_argument("--library")
    ap.add_argument("--version", required=True, help="the CMake project version")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--write-baseline", action="store_true",
                    help="after a passing check, write the header's layout as the new baseline")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    errors, notes = [], []
    cur_text, funcs = check_header(a.header, open(a.baseline, encoding="utf-8").read(),
                                   parse_symbols(a.symbols), a.version, a.cc, errors, notes)
    n_exported = None
    if a.library:
        n_exported = check_library(a.library, funcs, a.version, errors)
    if a.verbose:
        for n in notes:
            print("  addition: " + n)
    if errors:
        for e in errors:
            print("ABI: " + e, file=sys.stderr)
        print(f"ABI check failed: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    if a.write_baseline:
        with open(a.baseline, "w", encoding="utf-8") as f:
            f.write(cur_text)
    print(f"ABI check passed: {len(funcs)} functions, {len(notes)} addition(s) since the baseline"
          + (f", {n_exported} exported symbols" if n_exported is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
