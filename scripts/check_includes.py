#!/usr/bin/env python3
"""Checks that includes between the folders of include/typeflow go down.

    python3 scripts/check_includes.py [--root DIR]

The folders ("rooms") are ordered below, lowest first: a header may include
headers of its own room and of rooms listed before it, never after. A
subfolder belongs to its room (backend/cuda/kernels is backend/cuda's).
Every include that goes up is listed with the file that makes it. The
arrows in KNOWN are the ones issue 42 is moving down: they are reported
but do not fail the check, and one that is gone must be taken out of
KNOWN (so the list only shrinks). Exits 1 on a new upward include, on a
folder missing from ROOMS, or on a stale KNOWN entry; run by ctest as
structure.include_directions.
"""

import argparse
import os
import re
import sys

# Lowest first. A new folder gets its place here, by what it includes.
ROOMS = [
    "core",
    "initializers",
    "regularizers",
    "precision",
    "backend",  # backend/device.hpp: the device tags
    "contract",  # what a layer provides and what an executor is
    "layers",
    "model",
    "io",
    "report",
    "backend/cpu",
    "losses",
    "schedules",
    "optimizers",
    "backend/cuda",
    "data",
    "distribute",
    "metrics",
    "callbacks",  # the callback interface, History, the progress bar and the library's callbacks
    "train",
    "text",
    ".",  # typeflow.hpp, cuda.hpp: everything
]

# Upward arrows still to move (issue 42), as (from room, to room).
KNOWN = {
}

INCLUDE = re.compile(r'^\s*#\s*include\s+["<]typeflow/([^">]+)[">]')


def room_of(folder):
    """The room a folder of include/typeflow belongs to, or None."""
    while True:
        if folder in ROOMS:
            return folder
        if folder in ("", "."):
            return None
        folder = os.path.dirname(folder) or "."


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.join(here, "..", "include", "typeflow"))
    root = os.path.normpath(parser.parse_args().root)
    level = {room: i for i, room in enumerate(ROOMS)}
    failures, upward = [], {}
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(directory, name)
            source = os.path.relpath(path, root)
            source_room = room_of(os.path.dirname(source) or ".")
            if source_room is None:
                failures.append(f"{source}: its folder has no place in ROOMS (scripts/check_includes.py)")
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target_room = room_of(os.path.dirname(m.group(1)) or ".")
                    if target_room is None:
                        failures.append(f"{source}:{number}: includes typeflow/{m.group(1)}, whose folder has no place in ROOMS")
                    elif level[target_room] > level[source_room]:
                        upward.setdefault((source_room, target_room), []).append(f"{source}:{number} -> {m.group(1)}")
    for arrow, places in sorted(upward.items()):
        what = "known (issue 42): " + KNOWN[arrow] if arrow in KNOWN else "NEW"
        print(f"{arrow[0]} -> {arrow[1]} goes up, {what}")
        for p in places:
            print(f"    {p}")
        if arrow not in KNOWN:
            failures.append(f"{arrow[0]} -> {arrow[1]}: an include that goes up ({places[0]})")
    for arrow in sorted(set(KNOWN) - set(upward)):
        failures.append(f"{arrow[0]} -> {arrow[1]} no longer goes up: take it out of KNOWN")
    for f in failures:
        print("check_includes: " + f, file=sys.stderr)
    known_left = len(set(KNOWN) & set(upward))
    print(f"check_includes: {len(ROOMS)} rooms; {known_left} known upward arrows left, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
