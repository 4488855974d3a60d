"""Puts each perf sample of a server in a part of the call, for scripts/fleet_profile.sh.

Usage: fleet_profile.py PERF_SCRIPT_OUTPUT MICROSECONDS_PER_CALL

The input is `perf script -F comm,tid,ip,sym` of a recording with call stacks. A sample goes
to the part of the first frame, from the innermost outwards, that names one of the parts
below; a sample whose stack names none goes to "other". The parts are in the order a call
meets them, and their shares, times the CPU per call the bench measured, give microseconds.
"""

import sys

# (part, substrings of frame names); the first part whose substring a frame contains wins.
PARTS = [
    ("store: read the state (sled get, decode)", ["HpaTrees::read_state"]),
    (
        "store: commit (encode, sled insert)",
        ["HpaTrees::commit_loaded", "SledStore::commit_seen", "HpaStore>::commit_after"],
    ),
    ("request: protobuf decode", ["codec::Decoder<U> as tonic::codec::Decoder>::decode"]),
    (
        "request: conversion to the engine's types, and their drop",
        [
            "convert::hpa_request::recommend_request",
            "hpa::observation::Observation>",
        ],
    ),
    ("engine: evaluate", ["autoscaled_engine::hpa::evaluate"]),
    ("response: conversion, encode", ["convert::hpa_response", "codec::Encoder"]),
    (
        "group commit: the flush (our flusher, sled's flush)",
        ["durability::strict_flusher", "sled::tree::Tree::flush", "PageCache::flush"],
    ),
    ("sled's I/O threads (log writes, wake-ups)", ["sled::threadpool::perform_work"]),
    (
        "handler: the rest (locks, durable wait, metrics, history, explanation)",
        ["HorizontalService as "],
    ),
    (
        "layers: authentication, overload, request metrics, Connect, doors",
        [
            "autoscaled::auth::",
            "autoscaled::overload::",
            "autoscaled::server::RequestMetrics",
            "autoscaled::connect::",
            "autoscaled::doors::",
            "autoscaled::metrics::",
        ],
    ),
    ("HTTP/2, tonic, TCP (the no-op's work too)", ["h2::", "hyper", "tonic::", "tokio::net", "mio::"]),
]
OTHER = "other (scheduler, allocator, runtime)"


def stacks(path):
    """Each sample's frame names, innermost first."""
    frames = None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if frames is not None:
                    yield frames
                frames = None
            elif not line[0].isspace():
                frames = []
            elif frames is not None:
                parts = line.split(None, 1)
                if len(parts) == 2:
                    frames.append(parts[1])
    if frames is not None:
        yield frames


def part_of(frames):
    for frame in frames:
        for name, needles in PARTS:
            if any(n in frame for n in needles):
                return name
    return OTHER


def main():
    path, per_call = sys.argv[1], float(sys.argv[2])
    counts = {}
    for frames in stacks(path):
        part = part_of(frames)
        counts[part] = counts.get(part, 0) + 1
    total = sum(counts.values())
    if total == 0:
        sys.exit(f"no samples in {path}")
    print(f"| part of the call ({total} samples) | share | µs per call |")
    print("|---|---|---|")
    for name in [n for n, _ in PARTS] + [OTHER]:
        share = counts.get(name, 0) / total
        print(f"| {name} | {100 * share:.1f} % | {per_call * share:.0f} |")


if __name__ == "__main__":
    main()
