"""python3 -m hvmachine boot [OPTIONS] [-- QEMU ARGS]: ./hvstor boot."""

import sys

from .cli import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "boot":
        print("usage: python3 -m hvmachine boot [OPTIONS] [-- QEMU ARGS]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
