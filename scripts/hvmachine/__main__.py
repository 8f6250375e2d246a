"""python3 -m hvmachine boot [OPTIONS] [-- QEMU ARGS]: ./hvstor boot; python3 -m hvmachine
kernel-build TREE --out DIR: ./hvstor kernel-build."""

import sys

from .cli import main

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "kernel-build":
        from .kernel import main as kernel_main
        sys.exit(kernel_main(sys.argv[2:]))
    if len(sys.argv) < 2 or sys.argv[1] != "boot":
        print("usage: python3 -m hvmachine boot [OPTIONS] [-- QEMU ARGS] | kernel-build TREE --out DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
