"""The starter model's corpus: permissively licensed Python source installed on this machine.

Lists the Python standard library (PSF) and every installed distribution whose license
metadata is permissive (MIT, BSD, Apache-2.0, PSF, ISC, ...), reads their .py files in
parallel, and derives chat pairs (docstring sentence -> function) from module-level functions.
Pure standard library, so it can be tried anywhere: `python3 corpus.py` prints a summary.
"""
import ast
import hashlib
import importlib.metadata as md
import multiprocessing as mp
import os
import platform
import random
import re
import sysconfig

SPECIAL_STRINGS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MAX_FILE_BYTES = 400_000
MIN_FILE_BYTES = 200
MAX_LINE_CHARS = 1000
MAX_PAIRS_PER_FILE = 30

# SPDX ids accepted in License-Expression (every id of the expression must be one of these).
PERMISSIVE_SPDX = {
    "mit", "mit-0", "mit-cmu", "bsd-2-clause", "bsd-3-clause", "bsd-3-clause-clear", "0bsd",
    "apache-2.0", "psf-2.0", "python-2.0", "python-2.0.1", "isc", "zlib", "cc0-1.0",
    "unlicense", "bsl-1.0", "hpnd",
}
PERMISSIVE_CLASSIFIER = re.compile(
    r"(MIT License|MIT No Attribution|BSD License|Apache Software License|"
    r"Python Software Foundation License|ISC License|The Unlicense|zlib/libpng License|"
    r"Boost Software License)")
# Case-sensitive on purpose: BSD's own text says "other materials".
REJECT = re.compile(r"(GPL|\bGNU\b|\bMPL\b|Mozilla|\bEPL\b|Eclipse Public|\bCDDL\b|"
                    r"Proprietary|proprietary|Commercial|NVIDIA|EUPL|Artistic|CC-BY-NC|"
                    r"CC-BY-SA|Other/)")
PERMISSIVE_TEXT = re.compile(
    r"(\bMIT\b|\bBSD\b|Apache|\bPSF\b|Python Software Foundation|\bISC\b|Unlicense|"
    r"Permission is hereby granted, free of charge|"
    r"Redistribution and use in source and binary forms)")

# Path parts never read: tests, and vendored code that carries other projects' licenses.
SKIP_PARTS = {
    "test", "tests", "_vendor", "vendor", "vendored", "_vendored", "third_party",
    "thirdparty", "externals", "_externals", "extern", "_extern", "__pycache__", "..",
}
STDLIB_SKIP_DIRS = {
    "test", "tests", "idlelib", "turtledemo", "site-packages", "dist-packages", "__pycache__",
    "ensurepip", "lib2to3", "pydoc_data",
}


def stable_hash(s):
    return int.from_bytes(hashlib.sha1(s.encode("utf-8", "replace")).digest()[:8], "little")


def classify_license(meta):
    """(is_permissive, the metadata it was judged on) for a distribution's metadata."""
    expr = (meta.get("License-Expression") or "").strip()
    if expr:
        ids = [t for t in re.split(r"[\s()]+", expr) if t and t.upper() not in ("AND", "OR")]
        if any(t.upper() == "WITH" for t in ids):
            return False, "License-Expression: " + expr
        return all(t.lower() in PERMISSIVE_SPDX for t in ids), "License-Expression: " + expr
    classifiers = [c.strip() for c in (meta.get_all("Classifier") or [])
                   if c.startswith("License ::")]
    specific = [c for c in classifiers if c != "License :: OSI Approved"]
    if specific:
        ok = all(PERMISSIVE_CLASSIFIER.search(c) and not REJECT.search(c) for c in specific)
        return ok, "Classifier: " + "; ".join(specific)
    head = (meta.get("License") or "").strip()[:300]
    if head:
        ok = bool(PERMISSIVE_TEXT.search(head)) and not REJECT.search(head)
        return ok, "License: " + head.splitlines()[0][:120]
    return False, "no license metadata"


def list_sources():
    """[(package, path)] of candidate .py files, and {package: info} for every distribution."""
    sources, packages, seen_paths = [], {}, set()

    def add(pkg, path):
        real = os.path.realpath(path)
        if real not in seen_paths and os.path.isfile(real):
            seen_paths.add(real)
            sources.append((pkg, real))

    stdlib = sysconfig.get_paths()["stdlib"]
    n0 = len(sources)
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs
                         if d not in STDLIB_SKIP_DIRS and not d.startswith(("config-", "test")))
        for f in sorted(files):
            if f.endswith(".py") and not f.startswith("test_"):
                add("python-stdlib", os.path.join(root, f))
    packages["python-stdlib"] = {"version": platform.python_version(),
                                 "license": "PSF-2.0 (Python standard library)",
                                 "permissive": True, "files": len(sources) - n0}
    seen_names = set()
    dists = sorted(md.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower())
    for dist in dists:
        name = dist.metadata.get("Name")
        if not name or name.lower() in seen_names:
            continue
        seen_names.add(name.lower())
        try:
            ok, why = classify_license(dist.metadata)
            files = [f for f in (dist.files or []) if str(f).endswith(".py")]
        except Exception as e:  # broken metadata: leave the package out
            ok, why, files = False, f"unreadable metadata ({e})", []
        n0 = len(sources)
        if ok:
            for f in files:
                parts = str(f).replace("\\", "/").split("/")
                if SKIP_PARTS.intersection(parts) or parts[-1].startswith("test_"):
                    continue
                try:
                    add(name, str(dist.locate_file(f)))
                except Exception:
                    pass
        packages[name] = {"version": dist.version, "license": why, "permissive": ok,
                          "files": len(sources) - n0}
    return sources, packages


def cap_sources(sources, per_package_bytes, total_bytes):
    """A deterministic subset: at most per_package_bytes of each package, total_bytes in all."""
    by_pkg = {}
    for pkg, path in sources:
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        if MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
            by_pkg.setdefault(pkg, []).append((stable_hash(path), path, size))
    chosen = []
    for pkg, items in sorted(by_pkg.items()):
        used = 0
        for h, path, size in sorted(items):
            if used + size > per_package_bytes:
                continue
            used += size
            chosen.append((h, pkg, path, size))
    chosen.sort()
    out, used = [], 0
    for h, pkg, path, size in chosen:
        if used + size > total_bytes:
            continue
        used += size
        out.append((pkg, path))
    return out


# ---- chat pairs from docstrings -------------------------------------------------------------

NON_VERBS = {
    "a", "an", "the", "this", "these", "that", "those", "it", "its", "if", "when", "for", "in",
    "on", "as", "is", "are", "was", "be", "helper", "wrapper", "utility", "decorator",
    "function", "method", "class", "internal", "private", "main", "base", "default", "simple",
    "generic", "deprecated", "alias", "convenience", "shortcut", "test", "note", "see",
    "example", "examples", "parameters", "args", "todo", "abstract", "context", "mixin",
    "factory", "callback", "hook", "dummy", "fake", "mock", "backport", "compatibility",
    "legacy", "new", "old", "like", "same", "called", "used", "given", "all", "each", "one",
    "two", "we", "you", "our", "my", "here", "there", "no", "not", "only", "also", "any",
    "some", "what", "how", "why", "whether", "should", "can", "will", "may", "must", "with",
    "from", "by", "to", "of", "at", "or", "and", "but", "returns:", "python", "numpy", "torch",
    "tensor", "array", "list", "dict", "string", "str", "int", "float", "bool", "none", "true",
    "false", "api", "utility", "utilities", "version", "experimental", "public", "similar",
    "equivalent", "internal", "low", "high", "fast", "slow", "thin", "light", "lightweight",
}


def first_sentence(doc):
    para = doc.strip().split("\n\n")[0]
    para = " ".join(line.strip() for line in para.splitlines())
    m = re.match(r"(.+?[.!?])(\s|$)", para)
    s = (m.group(1) if m else para).strip()
    if not 12 <= len(s) <= 160 or not s[0].isupper():
        return None
    if any(bad in s for bad in (">>>", "http", "TODO", '"""', "\\", "..", "::")):
        return None
    if s.endswith("?"):
        return None
    if not s.endswith((".", "!")):
        s += "."
    return s


def third_person(sentence):
    """'Return the sum of x.' -> 'returns the sum of x'; None when it is no imperative."""
    words = sentence.rstrip(".!").split(" ", 1)
    if len(words) < 2:
        return None
    w, rest = words
    if not w.isalpha() or not w[0].isupper() or (len(w) > 1 and w.isupper()):
        return None
    lw = w.lower()
    if lw in NON_VERBS or lw.endswith(("ed", "ing", "ly", "ion", "er", "or", "al", "ic")):
        return None
    if lw.endswith("s") and not lw.endswith("ss"):
        verb = lw
    elif lw.endswith(("ss", "sh", "ch", "x", "z", "o")):
        verb = lw + "es"
    elif lw.endswith("y") and len(lw) > 1 and lw[-2] not in "aeiou":
        verb = lw[:-1] + "ies"
    else:
        verb = lw + "s"
    return verb + " " + rest


def extract_pairs(text):
    """[(name, first docstring sentence, source with a one-line docstring)] of top-level defs."""
    tree = ast.parse(text)
    lines = text.split("\n")
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        name = node.name
        if name.startswith(("_", "test")) or len(node.body) < 2:
            continue
        doc_node = node.body[0]
        if not (isinstance(doc_node, ast.Expr) and isinstance(doc_node.value, ast.Constant)
                and isinstance(doc_node.value.value, str)):
            continue
        if doc_node.lineno == node.lineno:
            continue
        sentence = first_sentence(ast.get_docstring(node, clean=True) or "")
        if not sentence:
            continue
        doc_line = lines[doc_node.lineno - 1]
        indent = doc_line[: len(doc_line) - len(doc_line.lstrip())]
        head = lines[node.lineno - 1: doc_node.lineno - 1]
        body = lines[doc_node.end_lineno: node.end_lineno]
        if not 1 <= len(body) <= 40:
            continue
        src = "\n".join(head + [f'{indent}"""{sentence}"""'] + body).rstrip()
        if len(src) > 2000 or "\t" in src:
            continue
        out.append((name, sentence, src))
        if len(out) >= MAX_PAIRS_PER_FILE:
            break
    return out


def read_file(item):
    """(package, path, text or None, pairs) for one source file; never raises."""
    pkg, path = item
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if not MIN_FILE_BYTES <= len(data) <= MAX_FILE_BYTES:
            return pkg, path, None, []
        text = data.decode("utf-8").replace("\r\n", "\n")
        if any(s in text for s in SPECIAL_STRINGS):
            return pkg, path, None, []
        if max(len(line) for line in text.split("\n")) > MAX_LINE_CHARS:
            return pkg, path, None, []
    except Exception:
        return pkg, path, None, []
    try:
        pairs = extract_pairs(text)
    except Exception:
        pairs = []
    return pkg, path, text, pairs


def read_all(items, processes):
    ctx = mp.get_context("fork")
    with ctx.Pool(processes) as pool:
        return pool.map(read_file, items, chunksize=32)


# ---- chat formatting --------------------------------------------------------------------------

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful coding assistant.",
    "You are a helpful assistant that writes Python code.",
    "You are the hearth starter model, a small assistant that writes Python code.",
]
DESC_REQUESTS = [
    "Write a Python function that {d}.",
    "Write a function that {d}.",
    "Write a Python function `{n}` that {d}.",
    "Can you write a Python function that {d}?",
    "Implement a Python function that {d}.",
    "Write Python code that {d}.",
    "Create a Python function named {n} that {d}.",
    "How do I write a Python function that {d}?",
]
SENTENCE_REQUESTS = [
    "{s}",
    "Write a Python function named `{n}`. {s}",
    "Python function `{n}`: {s}",
]


def render_chat(messages, add_generation_prompt=False):
    """Exactly what the ChatML chat template renders."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
    return out


def chat_pair(rng, name, desc, sentence, code):
    """One rendered conversation asking for `code`."""
    if desc and rng.random() < 0.75:
        request = rng.choice(DESC_REQUESTS).format(d=desc, n=name)
    else:
        request = rng.choice(SENTENCE_REQUESTS).format(s=sentence, n=name)
    block = f"```python\n{code}\n```"
    r = rng.random()
    if desc and r < 0.35:
        answer = f"Here is a Python function that {desc}:\n\n{block}"
    elif r < 0.45:
        answer = f"Here is one way to write it:\n\n{block}"
    else:
        answer = block
    messages = []
    if rng.random() < 0.25:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    messages += [{"role": "user", "content": request}, {"role": "assistant", "content": answer}]
    return render_chat(messages)


def seed_chats(rng, repeats):
    """Rendered conversations from the hand-written seed tasks and greetings."""
    from seed_tasks import GREETINGS, TASKS
    out = []
    for _ in range(repeats):
        for desc, code in TASKS:
            name = code.split("def ", 1)[1].split("(", 1)[0]
            sentence = desc[0].upper() + desc[1:] + "."
            out.append(chat_pair(rng, name, desc, sentence, code))
        for q, a in GREETINGS:
            messages = []
            if rng.random() < 0.25:
                messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            out.append(render_chat(messages))
    return out


if __name__ == "__main__":
    import time
    t = time.time()
    src, pkgs = list_sources()
    chosen = cap_sources(src, 24 << 20, 320 << 20)
    print(f"{len(src)} candidate files, {len(chosen)} chosen, {time.time() - t:.1f}s")
    for name, info in sorted(pkgs.items()):
        print(f"  {'+' if info['permissive'] else '-'} {name} {info['version']}: "
              f"{info['license'][:80]} ({info['files']} files)")
    results = read_all(chosen, os.cpu_count() or 1)
    texts = [r for r in results if r[2]]
    pairs = [p for r in results for p in r[3]]
    print(f"read {len(texts)} files, {sum(len(r[2]) for r in texts) / 1e6:.1f} MB, "
          f"{len(pairs)} pairs, {time.time() - t:.1f}s")
    rng = random.Random(0)
    for name, sentence, code in rng.sample(pairs, min(3, len(pairs))):
        print(chat_pair(rng, name, third_person(sentence), sentence, code))
    print(seed_chats(rng, 1)[0])
