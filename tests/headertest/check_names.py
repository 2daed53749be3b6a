#!/usr/bin/env python3
"""The naming convention of docs/api.md ("Names"), checked on the built library:
- libposttrain.so exports exactly the functions declared PT_API in
  include/posttrain/*.h (every one of them, nothing else);
- inside the library, a function that is not public is named pt__NAME (two
  underscores, as libgit2's git__): no header under libposttrain/ declares,
  and no .c file defines as static, a function pt_NAME that is not public.
usage: check_names.py SRCDIR LIBPOSTTRAIN_SO"""
import os, re, subprocess, sys

src, lib = sys.argv[1], sys.argv[2]

def walk(top, exts):
    for d, _, fs in os.walk(os.path.join(src, top)):
        for f in sorted(fs):
            if f.endswith(exts):
                yield os.path.join(d, f)

def code(path):
    t = open(path).read()
    t = re.sub(r"/\*.*?\*/", " ", t, flags=re.S)
    t = re.sub(r"//[^\n]*", " ", t)
    return re.sub(r'"(\\.|[^"\\])*"', '""', t)

public = set()
for f in walk("include/posttrain", (".h", ".h.in")):
    for decl in re.findall(r"PT_API\b[^;{]*?;", code(f), flags=re.S):
        public |= set(re.findall(r"\b(pt_[a-z0-9_]+)\s*\(", decl)[:1])
out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
exported = {l.split()[-1] for l in out.splitlines() if re.search(r" [TW] pt_", l)}
bad = []
for n in sorted(public - exported):
    bad.append("declared PT_API but not exported: " + n)
for n in sorted(exported - public):
    bad.append("exported but not declared PT_API in include/posttrain: " + n)
decl = re.compile(r"^(?:(?:static|inline|extern|const|struct|unsigned)\s+)*[A-Za-z_][A-Za-z0-9_]*[\s\*]+"
                  r"(pt_[a-z0-9][a-z0-9_]*)\s*\(")
for f in walk("libposttrain", (".h", ".c", ".inc")):
    for line in code(f).split("\n"):
        s = line.strip()
        if not (f.endswith(".h") or s.startswith("static")):
            continue
        m = decl.match(s)
        if m and m.group(1) not in public:
            bad.append("%s: internal function %s should be named pt__%s" % (os.path.relpath(f, src), m.group(1),
                                                                            m.group(1)[3:]))
print("public functions: %d, exported: %d" % (len(public), len(exported)))
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("names: every export is public, every internal function is pt__")
