#!/usr/bin/env python3
"""The loader's function list (LLMKV_LOADER_FUNCTIONS in include/llmkv_loader.h) must be
exactly the LLMKV_API functions of include/llmkv.h, in the header's order.

The header's list comes from bindings/abi/gen_layout.py: its layout program, compiled and
run, prints "func<TAB>NAME" for every LLMKV_API function. The loader's list comes from
list_functions (tests/loader/list_functions.c), which prints the X-macro in the same format.

    check_function_list.py --cc CC --gen-layout gen_layout.py --include-dir include \
                           --list-functions ./loader_list_functions [--add-decl DECL]

--add-decl appends a declaration to a copy of the header first (the test that shows a
function added to llmkv.h without the loader fails the check). Exit 0 when the lists are
equal, 1 with the differences otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile


def funcs_of(output):
    return [line.split("\t")[1] for line in output.splitlines() if line.startswith("func\t")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", required=True)
    ap.add_argument("--gen-layout", required=True)
    ap.add_argument("--include-dir", required=True)
    ap.add_argument("--list-functions", required=True)
    ap.add_argument("--add-decl")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        header = os.path.join(args.include_dir, "llmkv.h")
        inc = args.include_dir
        if args.add_decl:
            text = open(header, encoding="utf-8").read()
            at = text.rfind("#ifdef __cplusplus")
            text = text[:at] + args.add_decl + "\n\n" + text[at:]
            inc = os.path.join(tmp, "include")
            os.mkdir(inc)
            header = os.path.join(inc, "llmkv.h")
            open(header, "w", encoding="utf-8").write(text)
        layout_c = os.path.join(tmp, "layout.c")
        layout = os.path.join(tmp, "layout")
        src = subprocess.run([sys.executable, args.gen_layout, header], check=True,
                             capture_output=True, text=True).stdout
        open(layout_c, "w", encoding="utf-8").write(src)
        subprocess.run([args.cc, "-std=c11", "-I", inc, layout_c, "-o", layout], check=True)
        header_funcs = funcs_of(subprocess.run([layout], check=True, capture_output=True,
                                               text=True).stdout)
    loader_funcs = funcs_of(subprocess.run([args.list_functions], check=True,
                                           capture_output=True, text=True).stdout)

    print(f"llmkv.h: {len(header_funcs)} functions; LLMKV_LOADER_FUNCTIONS: {len(loader_funcs)}")
    if not header_funcs:
        print("FAIL: no functions found in the header (did gen_layout.py's output change?)")
        return 1
    ok = True
    missing = [f for f in header_funcs if f not in loader_funcs]
    extra = [f for f in loader_funcs if f not in header_funcs]
    dups = sorted({f for f in loader_funcs if loader_funcs.count(f) > 1})
    for f in missing:
        print(f"FAIL: {f} is declared in llmkv.h but missing from LLMKV_LOADER_FUNCTIONS "
              f"(include/llmkv_loader.h)")
    for f in extra:
        print(f"FAIL: {f} is in LLMKV_LOADER_FUNCTIONS but not declared in llmkv.h")
    for f in dups:
        print(f"FAIL: {f} is listed more than once in LLMKV_LOADER_FUNCTIONS")
    ok = not (missing or extra or dups)
    if ok and header_funcs != loader_funcs:
        for i, (h, l) in enumerate(zip(header_funcs, loader_funcs)):
            if h != l:
                print(f"FAIL: entry {i} of LLMKV_LOADER_FUNCTIONS is {l}; llmkv.h declares {h} "
                      f"there (keep the header's order)")
                break
        ok = False
    if ok:
        print("ok: the loader resolves every function of llmkv.h")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
