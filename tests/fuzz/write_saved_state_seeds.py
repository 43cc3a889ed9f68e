#!/usr/bin/python3
"""Writes saved_state_fuzz's seed corpus (tests/fuzz/saved_state_seeds/).

    write_saved_state_seeds.py [OUT_DIR]

Each seed is a state index spelled as daemon/core/saved_state.cc encodes it
(little-endian, length-prefixed), behind saved_state_fuzz.cc's mode byte.
The valid ones use mode 1: the target writes the trailing checksum (XXH3,
which this script does not compute) over the 8 placeholder bytes, so they
decode; the fuzzer then mutates the fields behind the checksum. A few are
refused on purpose (a bad version, a count no bytes back up, a malformed
record), so every refusal is reached from the start. When the encoding
changes, change Index below and run this again.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"SCSTATE\n"


class Index:
    def __init__(self, version=1):
        self.out = bytearray(MAGIC)
        self.u32(version)

    def u8(self, v):
        self.out += struct.pack("<B", v)
        return self

    def u32(self, v):
        self.out += struct.pack("<I", v)
        return self

    def u64(self, v):
        self.out += struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)
        return self

    def str(self, s):
        b = s.encode()
        self.u64(len(b))
        self.out += b
        return self

    def head(self, fingerprint="fp", epoch=1, bytes_per_slot=640,
             handle="", capacity=0, num_slots=0, region_bytes=0,
             device_images=""):
        self.str(fingerprint).u64(epoch).u64(bytes_per_slot)
        self.str(handle).u64(capacity).u64(num_slots).u64(region_bytes)
        return self.str(device_images)

    def records(self, records, count=None):
        """records: (hash, location, mark, checksum) tuples."""
        self.u64(len(records) if count is None else count)
        for h, loc, mark, sum_ in records:
            self.u64(h).u64(loc).u8(mark).u64(sum_)
        return self

    def seed(self, mode=1):
        """The mode byte, the bytes, 8 placeholder bytes for the checksum."""
        return bytes([mode]) + bytes(self.out) + b"\0" * 8


def seeds():
    out = {}
    out["empty"] = Index().head(fingerprint="", bytes_per_slot=0).records(
        []).str("").records([]).seed()
    out["host_region"] = Index().head(
        fingerprint="identity=m;transfer=fork:1;layout=0xabc", epoch=7,
        bytes_per_slot=4096, handle="/statecache-7-100-200-kept", capacity=16,
        num_slots=8, region_bytes=8 * 4096).records(
        [(11, 3, 0, 0x1111), (12, 0, 1, 0x2222), (1 << 62, 7, 0, 3)]).str(
        "").records([]).seed()
    out["images_and_tier"] = Index().head(
        epoch=9, device_images="device-9.images").records(
        [(5, 0, 1, 9), (6, 1, 0, 10)]).str("tier-9.images").records(
        [(7, 0, 0, 1), (8, 1, 0, 2), (9, 2, 1, 3)]).seed()
    # Image locations whose byte offsets wrap: (2^54-1) x 17920 passes the
    # end after wrapping, 2^55 x 17920 is 35 x 2^64, image 0's offset.
    out["huge_location"] = Index().head(
        epoch=11, bytes_per_slot=17920, device_images="device-11.images",
        region_bytes=4 * 17920).records(
        [(5, (1 << 54) - 1, 0, 9), (6, 1 << 55, 0, 10),
         (7, 3, 0, 11)]).str("tier-11.images").records(
        [(8, (1 << 63) - 1, 0, 1)]).seed()
    # A region kept under a keeper key, and one whose name tries to leave
    # /dev/shm: only the first is a retained name.
    out["kept_with_keeper"] = Index().head(
        epoch=12, bytes_per_slot=64,
        handle="/statecache-12-100-200-k00000000deadbeef-kept", capacity=4,
        num_slots=4, region_bytes=4 * 64).records(
        [(1, 2, 0, 5)]).str("").records([]).seed()
    out["kept_escaping"] = Index().head(
        epoch=13, bytes_per_slot=64,
        handle="/../statecache-13-100-200-k00000000deadbeef-kept",
        capacity=4, num_slots=4, region_bytes=4 * 64).records(
        [(1, 2, 0, 5)]).str("").records([]).seed()
    # Refused behind a valid checksum.
    out["bad_version"] = Index(version=2).head().records([]).str(
        "").records([]).seed()
    out["huge_count"] = Index().head().records(
        [(1, 1, 0, 1)], count=1 << 40).seed()
    out["negative_hash"] = Index().head().records(
        [(-1, 0, 0, 0)]).str("").records([]).seed()
    out["region_overfull"] = Index().head(
        handle="/statecache-1-2-3-kept", capacity=2, num_slots=3).records(
        []).str("").records([]).seed()
    # Mode 0: the bytes as they are (the placeholder is no checksum).
    out["raw_unsealed"] = Index().head().records([]).str("").records(
        []).seed(mode=0)
    return out


def main():
    out_dir = (sys.argv[1] if len(sys.argv) > 1
               else os.path.join(HERE, "saved_state_seeds"))
    os.makedirs(out_dir, exist_ok=True)
    for name, seed in seeds().items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(seed)
        print("%s: %d bytes" % (name, len(seed)))


if __name__ == "__main__":
    main()
