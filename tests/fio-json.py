#!/usr/bin/env python3
"""Extracts fio JSON blocks printed between 'FIO-JSON-BEGIN name' / 'FIO-JSON-END' marker
lines from a guest's output and prints one requested figure.

  fio-json.py OUTPUT_FILE BLOCK JOB FIELD
  FIELD: read.iops | write.iops | read.clat_mean_us | write.clat_mean_us | read.clat_p50_us
"""
import json
import re
import sys

# A kernel message logged while fio ran comes as a whole line of its own (guest-scripts/init
# forwards them so), maybe inside a block: it is not part of the JSON.
KERNEL_LINE = re.compile(r"^\[ *[0-9]+\.[0-9]{6}\] ")


def blocks(path):
    cur, name = None, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.startswith("FIO-JSON-BEGIN "):
                cur, name = [], line.split(" ", 1)[1]
            elif line == "FIO-JSON-END" and cur is not None:
                yield name, json.loads("\n".join(cur))
                cur = None
            elif cur is not None and not KERNEL_LINE.match(line):
                cur.append(line)


def main():
    path, block, job, field = sys.argv[1:5]
    for name, doc in blocks(path):
        if name != block:
            continue
        for j in doc["jobs"]:
            if j["jobname"] != job:
                continue
            direction, what = field.split(".", 1)
            d = j[direction]
            if what == "iops":
                print(f'{d["iops"]:.1f}')
            elif what == "clat_mean_us":
                print(f'{d["clat_ns"]["mean"] / 1000:.1f}')
            elif what == "clat_p50_us":
                print(f'{d["clat_ns"]["percentile"]["50.000000"] / 1000:.1f}')
            else:
                sys.exit(f"unknown field {field}")
            return
    sys.exit(f"no job {job} in block {block}")


main()
