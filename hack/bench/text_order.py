#!/usr/bin/env python3
"""Which input sections hold the node proxy's executed code (for
link/proxy-text-order.txt; driven by hack/gen-proxy-text-order.sh).

  text_order.py callgrind MAP BINARY CALLGRIND_OUT...
      every function callgrind saw run, hottest (self instructions) first
  text_order.py faults MAP BINARY PERF_DATA...
      every function whose first touch faulted in code outside .text.hot in
      a native run (what callgrind cannot see: valgrind hides CPU features,
      so assembly picks other variants natively, and start-up code before
      its instrumentation)

  text_order.py check MAP MIN_FRACTION
      how many of the list's patterns matched code in the link MAP comes
      from, and the size of .text.hot; fails below MIN_FRACTION (a stale
      list: regenerate it)

The first two print input-section patterns for a GNU ld script, one per line. MAP is
the linker map of BINARY (same link, symbols kept). Rust's legacy symbol
hash, v0 crate disambiguators, LTO's numbered suffixes and the versioned
prefixes of ring's and aws-lc's C symbols are wildcarded, so a list
outlives the build it came from.
"""
import bisect
import collections
import re
import subprocess
import sys


def text_sections(map_path):
    """(start, size, section, file) of every input section in the map's
    executable output sections (.text.hot and .text)."""
    out = []
    inside = False
    pending = None
    with open(map_path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if re.match(r"^\.text(\.hot)?(\s|$)", line):
                inside = True
                continue
            if inside and re.match(r"^\.\S", line):
                inside = False
            if not inside:
                continue
            m = re.match(r"^ (\.text\S*)$", line)  # long name: numbers on the next line
            if m:
                pending = m.group(1)
                continue
            m = re.match(r"^ (\.text\S*)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$", line)
            if m:
                name = m.group(1) or pending
                pending = None
                size = int(m.group(3), 16)
                if name and size:
                    out.append((int(m.group(2), 16), size, name, m.group(4)))
    out.sort()
    return out


def symbols(binary):
    """name -> address of BINARY's symbols."""
    by_name = {}
    nm = subprocess.run(["nm", binary], capture_output=True, text=True, check=True)
    for line in nm.stdout.splitlines():
        p = line.split()
        if len(p) == 3:
            by_name.setdefault(p[2], int(p[0], 16))
    return by_name


def containing(sections, starts, addr):
    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and sections[i][0] <= addr < sections[i][0] + sections[i][1]:
        return sections[i]
    return None


def pattern(section):
    """The ld input-section description that matches this section in
    later builds too."""
    _, _, name, path = section
    if name != ".text":  # a function section: .text.<symbol>
        # LTO renames local duplicates with a numbered suffix (".2889"),
        # differently in every build: match the name with and without one.
        name = re.sub(r"\.\d+$", "", name)
        name = re.sub(r"17h[0-9a-f]{16}E$", "17h????????????????E", name)
        name = re.sub(r"Cs[0-9A-Za-z]+_(?=\d)", "Cs*_", name)  # v0: crate disambiguators
        name = re.sub(r"^\.text\.(aws_lc|ring_core)_\d+_\d+_\d+_", r".text.\1_*_", name)
        return f"*({name} {name}.*)"
    # Assembly (and musl) keep all of an object's code in its .text: name
    # the object, without the hashes cargo and rustc put in file names.
    m = re.match(r"^.*/([^/(]+?)(-[0-9a-f]{16})?\.(rlib|a)\((?:[0-9a-f]{16}-)?([^)]+)\)$", path)
    if m:
        lib = f"{m.group(1)}{'-*' if m.group(2) else ''}.{m.group(3)}"
        member = f"{'*-' if m.group(2) else ''}{m.group(4)}"
        return f"*{lib}:{member}(.text)"
    m = re.match(r"^.*/([^/]+\.o)$", path)
    if m and not m.group(1).endswith(".rcgu.o"):
        return f"*{m.group(1)}(.text)"
    return None


def callgrind(args):
    map_path, binary, dumps = args[0], args[1], args[2:]
    sections = text_sections(map_path)
    starts = [s[0] for s in sections]
    by_name = symbols(binary)
    cost = collections.Counter()
    for dump in dumps:
        names, fn, after_call = {}, None, False
        with open(dump, errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
                if m:
                    if m.group(3):
                        names[m.group(2)] = m.group(3)
                    if m.group(1) == "fn":
                        fn = names[m.group(2)].split("'")[0]  # 'N: recursion depth
                        cost[fn] += 0
                        after_call = False
                elif line.startswith("calls="):
                    after_call = True  # the next cost line is the callee's
                elif fn and line[:1] and (line[0].isdigit() or line[0] in "+-*"):
                    if after_call:
                        after_call = False
                    else:
                        parts = line.split()
                        cost[fn] += int(parts[1]) if len(parts) > 1 else 0
    hot = collections.Counter()
    for fn, ir in cost.items():
        addr = int(fn, 16) if fn.startswith("0x") else by_name.get(fn)
        sec = containing(sections, starts, addr) if addr is not None else None
        if sec:
            hot[sec] += ir
    emit(sorted(hot, key=lambda s: (-hot[s], s[2], s[3])))


def faults(args):
    map_path, binary, datas = args[0], args[1], args[2:]
    sections = text_sections(map_path)
    starts = [s[0] for s in sections]
    hot_lo, hot_hi = section_bounds(binary, ".text.hot")
    text_lo, text_hi = section_bounds(binary, ".text")
    exec_vaddr_minus_offset = exec_delta(binary)
    found = []
    for data in datas:
        perf = subprocess.run(
            ["perf", "script", "-i", data, "--show-mmap-events", "-F", "event,addr"],
            capture_output=True, text=True, check=True,
        )
        delta = None
        for line in perf.stdout.splitlines():
            m = re.search(r"PERF_RECORD_MMAP2? .*\[0x([0-9a-f]+)\(0x[0-9a-f]+\) @ 0x([0-9a-f]+) .*\]: r-xp (\S+)", line)
            if m:
                delta = int(m.group(1), 16) - int(m.group(2), 16) - exec_vaddr_minus_offset
                continue
            m = re.match(r"^\s*page-faults:\s+([0-9a-f]+)", line)
            if m and delta is not None:
                addr = int(m.group(1), 16) - delta
                if (text_lo <= addr < text_hi) and not (hot_lo <= addr < hot_hi):
                    sec = containing(sections, starts, addr)
                    if sec and sec not in found:
                        found.append(sec)
    emit(found)


def check(args):
    map_path, min_fraction = args[0], float(args[1])
    patterns = matched = 0
    size = None
    current = None
    with open(map_path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if size is None:
                m = re.match(r"^\.text\.hot\s+0x[0-9a-f]+\s+0x([0-9a-f]+)", line)
                if m:
                    size = int(m.group(1), 16)
                continue
            if re.match(r"^\.\S", line):
                break
            if line.startswith(" *") and not line.startswith(" *fill*"):
                patterns += 1
                current = line
            elif current and re.match(r"^ \.text\S*", line):
                matched += 1
                current = None
    if size is None:
        sys.exit(f"{map_path}: no .text.hot section: the list was not linked in")
    fraction = matched / patterns if patterns else 0.0
    print(f".text.hot: {size / 1024:.0f} KiB, {matched} of {patterns} patterns matched ({fraction:.0%})")
    if fraction < min_fraction:
        sys.exit(
            f"link/proxy-text-order.txt is stale: {matched} of {patterns} patterns matched, "
            f"fewer than {min_fraction:.0%}: regenerate it with hack/gen-proxy-text-order.sh"
        )


def section_bounds(binary, name):
    out = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        p = line.replace("[ ", "[").split()
        if len(p) > 5 and p[1] == name:
            return int(p[3], 16), int(p[3], 16) + int(p[5], 16)
    return 0, 0


def exec_delta(binary):
    """p_vaddr - p_offset of the executable segment: maps a file offset in
    the r-xp mapping to a link-time address."""
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        p = line.split()
        if p[:1] == ["LOAD"] and "E" in p[6:-1]:
            return int(p[2], 16) - int(p[1], 16)
    return 0


def emit(sections):
    seen = set()
    for sec in sections:
        p = pattern(sec)
        if p and p not in seen:
            seen.add(p)
            print(p)


if __name__ == "__main__":
    {"callgrind": callgrind, "faults": faults, "check": check}[sys.argv[1]](sys.argv[2:])
