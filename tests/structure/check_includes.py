#!/usr/bin/env python3
"""The include-graph rules of docs/ARCHITECTURE.md, checked on every project include.

Each room (a folder under src/, or kernels/) may include only the rooms listed for it, the
C header llmkv.h, system headers and generated headers. The rules keep the layering the
architecture describes: kv/ knows nothing of models or backends, model data knows no
backend, the forward passes (model/arch/) see only the Backend interface, the scheduler
sees only the KV manager's view, and the engine names no concrete backend.

Usage: check_includes.py REPO_ROOT    (exit 1 and one line per violation when any rule breaks)
"""
import os
import re
import sys

# Room -> rooms it may include. A room is the longest matching prefix of a file's path.
RULES = {
    "src/platform": {"platform"},  # the OS layer: nothing of the project below it
    "src/common": {"platform", "common"},
    "src/kv": {"platform", "common", "kv"},
    "src/model": {"platform", "common", "model"},
    "src/model/arch": {"platform", "common", "kv", "model", "model/arch", "backend/backend.h"},
    # The rank collectives' interface is common/communicator.h: backends know nothing of parallel/.
    "src/backend": {"platform", "common", "kv", "model", "backend/backend.h", "backend/factory.h",
                    "backend/cpu", "backend/cuda"},  # factory.cpp: the one place naming every backend
    "src/backend/cpu": {"platform", "common", "kv", "model", "backend/backend.h", "backend/cpu"},
    "src/backend/cuda": {"platform", "common", "kv", "model", "backend/backend.h", "backend/cuda"},
    "src/sched": {"platform", "common", "kv", "sched"},
    "src/grammar": {"platform", "common", "grammar"},
    "src/engine": {"platform", "common", "kv", "model", "model/arch", "sched", "engine", "grammar",
                   "backend/backend.h", "backend/factory.h", "parallel"},
    "src/api": {"platform", "common", "engine"},
    "src/parallel": {"platform", "common", "kv", "model", "model/arch", "backend/backend.h",
                     "backend/factory.h", "parallel"},
    "kernels": {"kernels", "kv/kv_layout.h", "backend/cuda/cuda_module.h",
                "model/tensor_type.h"},  # the packed block layouts the device decoders read
}
ALWAYS_OK = {"llmkv.h", "snapshot_generated.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(rel):
    best = None
    for room in RULES:
        if rel == room or rel.startswith(room + "/"):
            if best is None or len(room) > len(best):
                best = room
    return best


def allowed(target, allow, here_dir):
    if target in ALWAYS_OK:
        return True
    if "/" not in target:
        # Same-folder include (kernels use bare names): the file must sit next to it.
        return os.path.exists(os.path.join(here_dir, target)) and "kernels" in allow
    for a in allow:
        if a.endswith(".h"):
            if target == a:
                return True
        elif target.startswith(a + "/") and target.count("/") == a.count("/") + 1:
            return True
        elif a == "model" and target.startswith("model/") and not target.startswith("model/arch/"):
            return True
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    checked = 0
    for top in ("src", "kernels"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".cpp", ".cu", ".cuh", ".c")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                room = room_of(os.path.dirname(rel))
                if room is None:
                    bad.append(f"{rel}: in no room of the include rules (add it to {sys.argv[0]})")
                    continue
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                for target in INCLUDE.findall(text):
                    checked += 1
                    if not allowed(target, RULES[room], dirpath):
                        bad.append(f"{rel}: includes \"{target}\", which {room}/ may not "
                                   f"(allowed: {', '.join(sorted(RULES[room]))})")
    for line in bad:
        print(line)
    print(f"{checked} includes checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
