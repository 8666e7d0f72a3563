#!/usr/bin/python3
#===- scripts/function_lengths.py - C++ functions longer than N lines -----===#
#
# Usage: scripts/function_lengths.py [N] [DIR...]
#   Lists the C++ function bodies longer than N lines (default 150) under the
#   given folders (default lib runtime python/src tools), longest first, as
#   "LINES PATH:LINE NAME". Exit status 1 when any is listed.
#
# Braces are matched after comments, strings and raw strings are blanked;
# bodies of namespaces, classes, structs and enums are not functions, and a
# lambda counts toward the function around it.
#
#===----------------------------------------------------------------------===#

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blank(src):
    """`src` with comments and string/char literals emptied, lines kept."""
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group().count('\n'), src, flags=re.S)
    src = re.sub(r'R"\((.*?)\)"', lambda m: '""' + '\n' * m.group().count('\n'), src,
                 flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", src)


def functions(path):
    """(lines, first line, name) of every function body in `path`."""
    src = _blank(open(path, errors='replace').read())
    stack, out, line, last = [], [], 1, 0
    for i, ch in enumerate(src):
        if ch == '\n':
            line += 1
        elif ch == '{':
            head = src[last:i]
            tail = ' '.join(x.strip() for x in head.strip().split('\n')[-3:])
            if any(kind == 'f' for kind, _, _ in stack):
                kind = 'b'
            elif re.search(r'\b(namespace|class|struct|enum|union)\b[^;()]*$', tail) or \
                    tail.endswith('extern ""'):
                kind = 'n'
            elif re.search(r'\)\s*(const|override|final|noexcept|->[^{;]*|:[^;{]*)*\s*$', tail):
                kind = 'f'
            else:
                kind = 'b'
            m = re.search(r'([~\w:]+)\s*\([^;{}]*$', head.replace('\n', ' '))
            stack.append((kind, line, m.group(1) if m else tail[-60:]))
            last = i + 1
        elif ch == '}':
            if stack:
                kind, first, name = stack.pop()
                if kind == 'f':
                    out.append((line - first + 1, first, name))
            last = i + 1
        elif ch == ';':
            last = i + 1
    return out


def long_functions(limit, roots):
    found = []
    for root in roots:
        for dirpath, _, files in os.walk(os.path.join(ROOT, root)):
            for f in files:
                if f.endswith(('.cpp', '.h')):
                    p = os.path.join(dirpath, f)
                    found += [(n, os.path.relpath(p, ROOT), first, name)
                              for n, first, name in functions(p) if n > limit]
    return sorted(found, reverse=True)


def main(argv):
    limit = int(argv[0]) if argv else 150
    roots = argv[1:] or ["lib", "runtime", "python/src", "tools"]
    found = long_functions(limit, roots)
    for n, path, first, name in found:
        print(f"{n:5d} {path}:{first} {name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
