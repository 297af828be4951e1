"""A small library whose three operations each do a fixed amount of work, set by
work/rounds.json: doubling an operation's rounds makes its benchmark twice as slow, halving
them twice as fast (the end-to-end tests change them in a commit of a temporary copy)."""

import json
import pathlib

ROUNDS = json.loads((pathlib.Path(__file__).parent / "rounds.json").read_text())

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
LINE = ";".join(f"{w}={i * 7}" for i, w in enumerate(WORDS))


def parse():
    """Parses `key=value;...` lines into dicts, ROUNDS["parse"] times."""
    fields = 0
    for r in range(ROUNDS["parse"]):
        record = {}
        for pair in LINE.split(";"):
            key, value = pair.split("=")
            record[key] = int(value) + r
        fields += len(record)
    return fields


def render():
    """Renders rows to text, ROUNDS["render"] times."""
    length = 0
    for r in range(ROUNDS["render"]):
        length += len("\n".join(f"{w:<8}|{i * r:>6}" for i, w in enumerate(WORDS)))
    return length


def checksum():
    """A 32-bit FNV-1a checksum of the words, ROUNDS["checksum"] times."""
    h = 0x811C9DC5
    for _ in range(ROUNDS["checksum"]):
        for word in WORDS:
            for byte in word.encode():
                h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h
