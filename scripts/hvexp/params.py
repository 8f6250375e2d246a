"""Module parameters as the kernel parses them: does the value a guest reads back from
/sys/module/MODULE/parameters/NAME say that the parameter holds what the variant set?

The kernel turns `module.name=value` into the parameter's type (kernel/params.c):
- bool and invbool: kstrtobool() (lib/kstrtox.c) looks at the first character only:
  y, Y or 1 is true, n, N or 0 false, and "on"/"off" by their second character (o, O
  then n/N or f/F); anything else is refused. Read back: Y or N.
- bint: kstrtobool() as well, stored as an int: reads back 1 or 0.
- byte, short, ushort, int, uint, long, ulong, ullong, hexint: kstrtoint() and its
  siblings with base 0: an optional sign ("-" only for the signed types, "+" for all),
  then "0x"/"0X" and a hex digit for hexadecimal, a leading 0 for octal, else decimal;
  one newline may end it. Read back in decimal ("%i", "%u", ...), hexint as "%#08x".
- charp and string: the text as given.
The command line's own quoting (next_arg() in lib/cmdline.c) drops a pair of double
quotes around the value first.

Which type a parameter has is not known here, so it is told from the two texts: a bool
reads back Y or N; two integers compare by value; anything else compares as text.
"""

import re

_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def kstrtobool(s: str) -> bool | None:
    """lib/kstrtox.c's kstrtobool(): True, False, or None where the kernel refuses it."""
    if s[:1] in ("y", "Y", "1"):
        return True
    if s[:1] in ("n", "N", "0"):
        return False
    if s[:1] in ("o", "O"):
        if s[1:2] in ("n", "N"):
            return True
        if s[1:2] in ("f", "F"):
            return False
    return None


def _kstrtoull(s: str) -> int | None:
    """_kstrtoull() with base 0: no sign; None where the kernel refuses it (or overflows)."""
    base = 10
    if s[:1] == "0":
        if s[1:2] in ("x", "X") and s[2:3] in _DIGITS[16]:
            base, s = 16, s[2:]
        else:
            base = 8
    n = 0
    while n < len(s) and s[n] in _DIGITS[base]:
        n += 1
    if n == 0 or s[n:] not in ("", "\n"):
        return None
    value = int(s[:n], base)
    return value if value < 2 ** 64 else None


def kstrtoint(s: str) -> int | None:
    """The value of an integer parameter as the kernel parses it (kstrtoll() for the
    signed types, kstrtoull() for the unsigned ones: one "-" or one "+" before the
    number), without a type's range; None where the kernel refuses it."""
    if s[:1] == "-":
        v = _kstrtoull(s[1:])
        return None if v is None or v > 2 ** 63 else -v
    if s[:1] == "+":
        s = s[1:]
    return _kstrtoull(s)


def _unquote(s: str) -> str:
    """next_arg(): a value given in double quotes loses them."""
    if s.startswith('"'):
        s = s[1:]
        if s.endswith('"'):
            s = s[:-1]
    return s


def param_matches(want: str, got: str) -> bool:
    """Whether a parameter set to `want` on the kernel command line can read back as `got`
    from /sys/module/MODULE/parameters/NAME (the runner's check after a boot)."""
    want, got = _unquote(want), got.rstrip("\n")
    if re.fullmatch(r"[YN]", got):                      # bool or invbool
        return kstrtobool(want) == (got == "Y")
    g = kstrtoint(got)
    if g is not None:
        w = kstrtoint(want)
        if w is not None:
            return w == g
        if g in (0, 1) and kstrtobool(want) is not None:    # bint: y/n/on/off read back as 1/0
            return kstrtobool(want) == (g == 1)
    return want == got
