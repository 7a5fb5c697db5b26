#!/usr/bin/env python3
"""The include-graph rules of docs/ARCHITECTURE.md, checked on every project include.

Three rules:
1. Rooms. Each room (a folder under src/, or kernels/) may include only the rooms listed for
   it, the C header llmkv.h, system headers and generated headers. The rules keep the
   layering the architecture describes: kv/ knows nothing of models or backends, tensor/
   (the formats weights are stored in) sits below both model/ and backend/, model data knows
   no backend, the forward passes (model/arch/) see only the Backend interface, the scheduler
   sees only the KV manager's view, and the engine names no concrete backend.
2. No folder loop. The graph of top-level folders (src/X, with src/model/arch counted as
   src/model; kernels/ its own) built from every project include has no cycle: if two rooms
   need each other, the shared piece moves below both.
3. KvSeq's fields are the KV manager's state. sched/, engine/, api/ and setup/ name no data
   member of `struct KvSeq` (read from src/kv/kv_manager.h) after `.` or `->`; they ask its
   questions (member functions) instead.

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
    # Tensor formats: GGUF tensor types and their block layouts, and WeightMatrix (a weight
    # matrix as stored). Below both model/ (which fills it) and backend/ (whose kernels read it).
    "src/tensor": {"platform", "common", "tensor"},
    "src/model": {"platform", "common", "model", "tensor"},
    "src/model/arch": {"platform", "common", "kv", "model", "model/arch", "tensor",
                       "backend/backend.h"},
    # The rank collectives' interface is common/communicator.h: backends know nothing of parallel/.
    # Backends know nothing of model/ either: the weights they read are tensor/ data.
    "src/backend": {"platform", "common", "kv", "tensor", "backend/backend.h", "backend/factory.h",
                    "backend/cpu", "backend/cuda"},  # factory.cpp: the one place naming every backend
    "src/backend/cpu": {"platform", "common", "kv", "tensor", "backend/backend.h", "backend/cpu"},
    "src/backend/cuda": {"platform", "common", "kv", "tensor", "backend/backend.h", "backend/cuda"},
    "src/sched": {"platform", "common", "kv", "sched"},
    "src/grammar": {"platform", "common", "grammar"},
    # The set-up stage: params -> resolved configuration -> capabilities -> KV manager ->
    # backend or ranks -> forward pass.
    "src/setup": {"platform", "common", "kv", "model", "model/arch", "tensor", "sched",
                  "backend/backend.h", "backend/factory.h", "parallel", "setup"},
    "src/engine": {"platform", "common", "kv", "model", "model/arch", "sched", "engine", "grammar",
                   "setup", "backend/backend.h", "backend/factory.h", "parallel"},
    "src/api": {"platform", "common", "engine"},
    "src/parallel": {"platform", "common", "kv", "model", "model/arch", "backend/backend.h",
                     "backend/factory.h", "parallel"},
    "kernels": {"kernels", "kv/kv_layout.h", "backend/cuda/cuda_module.h",
                "tensor/tensor_type.h",  # the packed block layouts the device decoders read
                "tensor/expert_routing.h"},  # the host side of route_experts: the CPU's choice
}
ALWAYS_OK = {"llmkv.h", "snapshot_generated.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh", ".c")

# Rule 3: the rooms that must not name a KvSeq field, and where the struct is declared.
KVSEQ_HEADER = "src/kv/kv_manager.h"
KVSEQ_ROOMS = ("src/sched", "src/engine", "src/api", "src/setup")


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


# ---- rule 2: folder loops -------------------------------------------------------------------

def folder_of_file(rel):
    """The top-level folder a file belongs to: src/X/... -> X (model/arch is model), kernels."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "kernels":
        return "kernels"
    return None


def folder_of_target(target, here):
    """The top-level folder an include names; a bare name is the including file's own."""
    if target in ALWAYS_OK:
        return None
    if "/" not in target:
        return here
    return target.split("/")[0]


def strongly_connected(graph):
    """Tarjan's algorithm over {node: set(successors)}; components in a stable order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle_through(graph, start, within):
    """The shortest cycle start -> ... -> start inside the node set `within` (breadth first)."""
    parent = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in within:
                    continue
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def folder_loops(edges):
    """edges: {(from, to): [(file, target), ...]} -> one line per distinct cycle."""
    graph = {}
    for (a, b) in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    lines, seen = [], set()
    for comp in strongly_connected(graph):
        if len(comp) < 2:
            continue
        members = set(comp)
        for start in comp:  # a cycle through every folder of the loop, each printed once
            cycle = shortest_cycle_through(graph, start, members)
            if cycle is None:
                continue
            ring = cycle[:-1]
            i = ring.index(min(ring))
            key = tuple(ring[i:] + ring[:i])
            if key in seen:
                continue
            seen.add(key)
            cycle = list(key) + [key[0]]
            evidence = []
            for a, b in zip(cycle, cycle[1:]):
                f, t = sorted(edges[(a, b)])[0]
                evidence.append(f"{f} includes {t}")
            lines.append(f"folder loop: {' -> '.join(cycle)} ({'; '.join(evidence)})")
    return lines


# ---- rule 3: KvSeq fields -------------------------------------------------------------------

def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines
    kept, so line numbers stay right)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def strip_angle_groups(s):
    """Removes template argument lists (<...>, nested) so their commas and parentheses
    (std::function<void(int)>) do not read as declarators or a parameter list."""
    out, depth = [], 0
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


SKIP_DECL = re.compile(r"^(using|typedef|friend|static|template|enum|struct|class|union|"
                       r"static_assert|constexpr)\b")
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:")


def data_member_names(statement):
    """The names a member declaration at the struct's top level declares, or [] for a member
    function, a nested type, an alias or a static member."""
    s = ACCESS.sub("", statement).strip()
    if not s or SKIP_DECL.match(s):
        return []
    s = strip_angle_groups(s)
    s = s.split("=", 1)[0]  # declarators before any default member initializer
    s = re.sub(r"\{\}", " ", s)  # braced initializer `int x{0}` (its body was skipped)
    if "(" in s or "operator" in s.split():
        return []  # a member function (declared or defined)
    s = re.sub(r"\w*::", "", s)  # qualified names: std::vector -> vector
    names = []
    for n, declarator in enumerate(s.split(",")):
        declarator = re.sub(r"\[[^\]]*\]", " ", declarator)  # arrays
        declarator = declarator.split(":", 1)[0]  # bit-fields
        ids = re.findall(r"[A-Za-z_]\w*", declarator)
        if len(ids) >= (2 if n == 0 else 1):  # the first declarator follows its type
            names.append(ids[-1])
    return names


def kvseq_fields(header_text):
    """Data members of `struct KvSeq` in the header's text, or None when it has no such struct."""
    text = blank_comments_and_strings(header_text)
    m = re.search(r"\bstruct\s+KvSeq\b[^;{]*\{", text)
    if not m:
        return None
    fields, statement, depth, i = [], "", 1, m.end()
    pending_function = False
    while i < len(text) and depth > 0:
        c = text[i]
        if c == "{":
            if depth == 1:
                # A function body, a nested type's body or a braced initializer: skip its
                # contents; a function body ends the statement with its `}`.
                pending_function = "(" in strip_angle_groups(statement.split("=", 1)[0])
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 1:
                if pending_function:
                    statement = ""
                else:
                    statement += "{}"
                pending_function = False
        elif depth == 1:
            if c == ";":
                fields.extend(data_member_names(statement))
                statement = ""
            elif c == ":" and ACCESS.match(statement + c):
                statement = ""
            else:
                statement += c
        i += 1
    return fields


def kvseq_field_uses(text, fields):
    """(line, field) for each `.field` / `->field` not followed by `(` (a method call)."""
    if not fields:
        return []
    clean = blank_comments_and_strings(text)
    clean = re.sub(r"^[ \t]*#[^\n]*", lambda m: " " * len(m.group(0)), clean, flags=re.M)
    names = "|".join(sorted(map(re.escape, set(fields))))
    use = re.compile(r"(?:\.|->)\s*(" + names + r")\b(?!\s*\()")
    return [(clean.count("\n", 0, m.start()) + 1, m.group(1)) for m in use.finditer(clean)]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    checked = 0
    edges = {}  # (folder, folder) -> [(file, include), ...]
    kvseq_files = []
    for top in ("src", "kernels"):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(files):
                if not f.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                here = folder_of_file(rel)
                room = room_of(os.path.dirname(rel))
                if any(rel.startswith(r + "/") for r in KVSEQ_ROOMS):
                    kvseq_files.append((rel, text))
                for target in INCLUDE.findall(text):
                    there = folder_of_target(target, here)
                    if here is not None and there is not None:
                        edges.setdefault((here, there), []).append((rel, target))
                if room is None:
                    bad.append(f"{rel}: in no room of the include rules (add it to {sys.argv[0]})")
                    continue
                for target in INCLUDE.findall(text):
                    checked += 1
                    if not allowed(target, RULES[room], dirpath):
                        bad.append(f"{rel}: includes \"{target}\", which {room}/ may not "
                                   f"(allowed: {', '.join(sorted(RULES[room]))})")
    bad.extend(folder_loops(edges))

    if kvseq_files:
        header = os.path.join(root, KVSEQ_HEADER)
        fields = None
        if os.path.exists(header):
            with open(header, encoding="utf-8") as fh:
                fields = kvseq_fields(fh.read())
        if not fields:
            bad.append(f"{KVSEQ_HEADER}: no `struct KvSeq` with data members found (the KvSeq "
                       f"field rule of {sys.argv[0]} reads them from there)")
        else:
            for rel, text in kvseq_files:
                for line, name in kvseq_field_uses(text, fields):
                    bad.append(f"{rel}:{line}: names KvSeq field `{name}` (the KV manager's "
                               f"state: ask KvSeq's questions, {KVSEQ_HEADER})")
    for line in bad:
        print(line)
    print(f"{checked} includes checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
