#!/usr/bin/python3
"""Lists functions longer than a limit in C, C++ and Python sources.

A function may be longer when the comment right above it says why, in a line that starts
with "Long:" (e.g. "// Long: one switch over every VMBus message type", or in Python
"# Long: ..."). Exits 1 when any function is over the limit without one.

Python functions are measured from their `def` line to their last line (ast), nested
functions and methods each on their own (a nested function's lines count in its outer one
too).

The parser is deliberately simple: it tracks braces (skipping comments, strings and
character literals) and treats a brace that opens after a closing parenthesis, at namespace
or class level, as a function body. That is enough for this code base's style.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from typing import List, Tuple

Found = Tuple[str, int, int, str]   # name, first line, line count, the file's text

CONTROL = re.compile(r'\b(if|for|while|switch|catch|do|else)\s*(\(|$)')


def strip(text: str) -> str:
    """Text with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = ')' + m.group(1) + '"' if m else '"'
            j = text.find(end, i + 2)
            j = n if j < 0 else j + len(end)
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(' ' * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path: str) -> List[Found]:
    """(name, first line, line count, text) of each function body in the file."""
    with open(path, encoding='utf-8', errors='replace') as f:
        raw = f.read()
    if path.endswith('.py'):
        return python_functions(path, raw)
    text = strip(raw)
    found: List[Found] = []
    stack: List[Tuple[str, int, str]] = []  # for each open brace: (kind, start offset, header)
    last = 0    # end of the previous statement or brace, where a header starts
    for i, c in enumerate(text):
        if c == '{':
            header = text[last:i].strip()
            inside_function = any(k == 'function' for k, _, _ in stack)
            is_function = (not inside_function and header.endswith(')') or
                           (not inside_function and re.search(r'\)\s*(const|noexcept|override|final|->[^;{]*)?\s*$', header)))
            if is_function and (CONTROL.search(header.split('\n')[-1]) or header.startswith('=')):
                is_function = False
            if is_function and re.search(r'\b(namespace|class|struct|enum|union)\b[^()]*$', header):
                is_function = False
            stack.append(('function' if is_function else 'block', i, header))
            last = i + 1
        elif c == '}':
            if stack:
                kind, start, header = stack.pop()
                if kind == 'function':
                    first = text.count('\n', 0, start) + 1
                    lines = text.count('\n', start, i) + 1
                    name = re.sub(r'\s+', ' ', header)[-90:]
                    found.append((name, first, lines, raw))
            last = i + 1
        elif c == ';':
            last = i + 1
    return found


def python_functions(path: str, raw: str) -> List[Found]:
    try:
        tree = ast.parse(raw, path)
    except SyntaxError as e:
        raise SystemExit(f'{path}: cannot parse: {e}') from None
    found: List[Found] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            last = node.end_lineno or node.lineno
            found.append((f'def {node.name}', first, last - node.lineno + 1, raw))
    return found


def has_reason(raw: str, first_line: int, header: str, python: bool = False) -> bool:
    lines = raw.split('\n')
    if python:
        k = first_line - 2
        while k >= 0 and lines[k].strip().startswith('#'):
            if re.match(r'\s*#\s*Long:', lines[k]):
                return True
            k -= 1
        return False
    # The header may span lines above the brace: look above its first line.
    head_lines = header.count('\n') if header else 0
    k = first_line - 2 - head_lines
    while k >= 0 and lines[k].strip().startswith(('//', '*', '/*', 'template')):
        if re.match(r'\s*(//|\*|/\*)\s*Long:', lines[k]):
            return True
        k -= 1
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--max', type=int, default=80)
    ap.add_argument('--ext', action='append', help='only files ending so (repeatable; default: .c .cc .h .py)')
    ap.add_argument('paths', nargs='+')
    args = ap.parse_args()
    exts = tuple(args.ext or ('.c', '.cc', '.h', '.py'))
    files: List[str] = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = [d for d in dirs if not d.startswith(('.', '__'))]
                files += [os.path.join(root, f) for f in names if f.endswith(exts)]
        else:
            files.append(p)
    bad = 0
    for f in sorted(files):
        for name, first, lines, raw in functions(f):
            if lines > args.max:
                header = name
                if has_reason(raw, first, header, f.endswith('.py')):
                    continue
                print(f'{f}:{first}: {lines} lines: {name}')
                bad += 1
    print(f'{bad} function(s) over {args.max} lines without a "Long:" reason')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
