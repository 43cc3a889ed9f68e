#!/usr/bin/python3
"""Writes step_fuzz's seed corpus (tests/fuzz/step_seeds/).

    write_step_seeds.py [OUT_DIR]

Each seed is a short scenario spelled as the bytes step_fuzz.cc reads (its
header, then actions; operations drawn as Draw in tests/service/
random_operations.h draws them, two bytes a value, low first), so the
fuzzer starts from every operation kind and every action reached once on
purpose, not only from what random bytes find. The seeds stay valid inputs
whatever step_fuzz becomes (every input is); when Draw or step_fuzz change
how they read, run this again so the seeds keep meaning what their names
say.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Seed:
    def __init__(self, num_slots=8, transfer="fork", fork_tokens=1, readable=True, max_ops=12):
        self.out = bytearray()
        self.byte(num_slots - 1)  # 1 + b % 16
        self.byte({"fork": 0, "replay": 1, "none": 2}[transfer])
        if transfer == "fork":
            self.byte(fork_tokens - 1)  # 1 + b % 64
            self.byte(1 if readable else 0)
        self.byte(max_ops - 1)  # 1 + b % 12

    def byte(self, value):
        self.out.append(value & 0xFF)

    def word(self, value):
        self.out += struct.pack("<H", value)

    # Draw's primitives: Below(n) reads a word modulo n, Chance(p) is
    # Below(100) < p.
    def below(self, value):
        self.word(value)

    def chance(self, yes):
        self.word(0 if yes else 99)

    def request_id(self, n):
        """"r<n>" (n in 0..4): not empty, not 300 bytes, then Below(5)."""
        self.chance(False)
        self.chance(False)
        self.below(n)

    def hash(self, h):
        """h in 0..15, or -1."""
        if h < 0:
            self.chance(True)
            return
        self.chance(False)
        self.chance(False)
        self.below(h)

    def hashes(self, hs):
        self.below(len(hs))  # Below(7)
        for h in hs:
            self.hash(h)

    def position(self, blocks):
        """blocks * 64, blocks in 0..5."""
        self.chance(False)
        self.below(blocks)

    def tokens(self, n):
        self.chance(False)
        self.below(n)  # Below(400)

    # Operations (Draw::Operation: Below(15) picks the kind).
    def begin_pass(self):
        self.below(0)

    def admit(self, r, width_pick=2, tokens=200, anchor_blocks=2, hashes=(), kv_hit=0):
        self.below(1)
        self.request_id(r)
        self.below(width_pick)  # Pick({-1, 0, 1, 1, 1, 2, 3, 1000})
        self.tokens(tokens)
        self.position(anchor_blocks)
        self.hashes(hashes)
        self.below(kv_hit + 1)  # Below(9) - 1

    def checkpoint(self, r, boundary, h, anchor_blocks=None):
        self.below(4)
        self.request_id(r)
        self.below(boundary + 1)  # Below(8) - 1
        self.hash(h)
        if anchor_blocks is None:
            self.chance(True)  # anchor 0
        else:
            self.chance(False)
            self.position(anchor_blocks)

    def release(self, r):
        self.below(6)
        self.request_id(r)

    def consume_fork(self, r):
        self.below(7)
        self.request_id(r)

    def adopt_fork_source(self, r):
        self.below(8)
        self.request_id(r)

    def reserve(self, r, positions):
        self.below(9)
        self.request_id(r)
        self.below(len(positions))  # Below(4)
        for blocks, h in positions:
            self.position(blocks)
            self.hash(h)

    def publish(self, r):
        self.below(10)
        self.chance(True)  # Chance(60)
        self.request_id(r)

    def cancel(self, r):
        self.below(10)
        self.chance(False)
        self.request_id(r)

    def resumable_hit(self, tokens, hashes, kv_hit):
        self.below(11)
        self.chance(True)  # Chance(50)
        self.tokens(tokens)
        self.hashes(hashes)
        self.below(kv_hit + 1)

    def lookup(self, h):
        self.below(11)
        self.chance(False)
        self.hash(h)

    def unindex(self, hashes):
        self.below(12)
        self.chance(True)  # Chance(95)
        self.hashes(hashes)

    def clear_index(self):
        self.below(12)
        self.chance(False)

    def copy(self, r, src, dst):
        self.below(13)
        self.request_id(r)
        self.below(src + 1)  # Below(5) - 1
        self.below(dst + 1)

    def snapshot(self, r, blocks, h):
        self.below(14)
        self.request_id(r)
        self.position(blocks)
        self.hash(h)

    # Actions (step_fuzz's loop: Byte() % 16 picks one).
    def step(self, *ops, packed=False, bend=None, session=0, one=False):
        """ops: (method name, args...) tuples, drawn in order."""
        if one:
            assert len(ops) == 1
            self.byte(2)
        else:
            self.byte(3)
            self.byte(len(ops))  # Byte() % 14
        for name, *args in ops:
            getattr(self, name)(*args)
        self.byte(1 if packed else 0)
        if packed:
            if bend is None:
                self.byte(1)  # Byte() % 4 != 0: not bent
            else:
                self.byte(0)
                for b in bend:
                    self.byte(b)
        self.who(session)

    def who(self, session):
        self.byte(7 if session is None else session)  # 7: a stranger

    def raw(self, message, session=0, parses=True):
        self.byte(0)
        self.byte(len(message))
        self.out += message
        if parses:  # a message that does not parse is dropped before `who`
            self.who(session)

    def tick(self, seconds):
        self.byte(1)
        self.byte(0)  # session index (unused)
        self.byte(0)
        self.byte(1 if seconds == 11 else 0)

    def detach(self, session):
        self.byte(1)
        self.byte(session)
        self.byte(1)

    def evict(self, session):
        self.byte(1)
        self.byte(session)
        self.byte(2)

    def resize(self, target_pick, deadline_pick=0):
        """Pick({-1, 0, 1, 2, 4, 8, 16, 32, 33}), Pick({0, 0, 5000})."""
        self.byte(1)
        self.byte(0)
        self.byte(3)
        self.word(target_pick)
        self.word(deadline_pick)

    def fault(self, kind, arg=0):
        """ArmFault: 0 the (1 + (arg & 3) % 3)th copy from now fails (after
        it ran when arg & 4), 1 every copy touching slot arg % 32, 2 every
        grow, 3 none any more."""
        self.byte(1)
        self.byte(0)
        self.byte(4)
        self.byte(kind)
        self.byte(arg)


def seeds():
    out = {}

    s = Seed()
    s.step(("begin_pass",), ("admit", 0), ("admit", 1),
           ("checkpoint", 0, 2, 3, 2), ("release", 0), ("release", 1))
    s.step(("begin_pass",), ("admit", 2, 2, 200, 2, [9, 3], 2),
           ("consume_fork", 2), ("release", 2))
    out["fork_resume"] = s

    s = Seed()
    s.step(("begin_pass",), ("admit", 0), ("checkpoint", 0, 2, 3, 2), ("release", 0),
           packed=True)
    s.step(("begin_pass",), ("admit", 1, 2, 200, 2, [9, 3], 2), ("adopt_fork_source", 1),
           ("release", 1), packed=True)
    out["packed_fork_adopt"] = s

    s = Seed(transfer="fork", readable=True)
    s.step(("begin_pass",), ("admit", 0, 2, 300, 3),
           ("reserve", 0, [(1, 5), (2, 6)]), ("publish", 0),
           ("reserve", 0, [(3, 7)]), ("cancel", 0))
    s.step(("resumable_hit", 300, [5, 6], 2), ("lookup", 5), ("lookup", 6),
           ("release", 0))
    out["midstep_reserve_publish"] = s

    s = Seed()
    s.step(("begin_pass",), ("admit", 0, 5), ("copy", 0, 0, 1), ("snapshot", 0, 1, 4),
           ("checkpoint", 0, 2, 8, 2), ("release", 0))
    s.step(("unindex", [8, 4]), ("clear_index",))
    out["copy_snapshot_unindex"] = s

    s = Seed(transfer="replay")
    s.step(("begin_pass",), ("admit", 0), ("admit", 1), ("checkpoint", 0, 2, 3),
           ("release", 0))
    s.tick(3)
    s.resize(7)          # grow to 32
    s.resize(2, 2)       # shrink to 1, 5 s deadline: r1 (slot 1) is moved
    s.step(("begin_pass",), ("release", 1), session=0)
    s.tick(11)           # leases lapse (both sessions re-attach)
    s.detach(0)
    s.evict(1)
    s.step(("begin_pass",), ("admit", 0), session=1)
    out["resize_lease_detach_evict"] = s

    s = Seed(num_slots=2, transfer="none", max_ops=3)
    s.step(("begin_pass",), ("admit", 0), ("admit", 1))
    s.step(("begin_pass",), ("admit", 2), ("admit", 3), ("admit", 4))  # 4 > 3 ops
    s.step(("admit", 2, 7), one=True)           # width 1000
    s.step(("release", 4), one=True)            # unknown request
    s.step(("checkpoint", 0, 6, -1), one=True)  # negative hash
    s.step(("admit", 0), one=True)              # already admitted
    s.step(("admit", 2), one=True)              # no free slot
    s.step(("begin_pass",), session=None)       # a stranger
    out["refusals"] = s

    # Every kind refused on its own, with checkpoints in the LRU, a request
    # holding a slot and a pin outstanding: a refusal must change none of it.
    s = Seed()
    s.step(("begin_pass",), ("admit", 0), ("admit", 1), ("admit", 2),
           ("checkpoint", 0, 2, 3, 2), ("checkpoint", 1, 2, 4, 2),
           ("checkpoint", 2, 2, 5, 2), ("release", 0), ("release", 1))
    s.step(("begin_pass",))  # r2's source was read this pass: one more
    s.step(("begin_pass",), ("admit", 3, 2, 200, 2, [9, 3], 2))  # pins 0
    for op in [("release", 4), ("consume_fork", 4), ("adopt_fork_source", 4),
               ("checkpoint", 4, 2, 6, 2), ("publish", 4), ("cancel", 4),
               ("copy", 2, 0, 3), ("snapshot", 4, 1, 6), ("reserve", 2, [(1, -1)]),
               ("lookup", -1), ("unindex", [-1]), ("admit", 2), ("admit", 4, 7),
               ("resumable_hit", 100, [3, -1], 2)]:
        s.step(op, one=True)
    out["refusals_with_checkpoints"] = s

    s = Seed()
    s.step(("begin_pass",), ("admit", 0), ("admit", 1), ("release", 0),
           packed=True, bend=[0, 1, 16])        # a kind changed
    s.step(("begin_pass",), ("admit", 0), packed=True, bend=[1])  # args cut
    s.step(("admit", 2), ("checkpoint", 2, 2, 3), packed=True, bend=[3])  # hashes cut
    s.step(("admit", 3), packed=True, bend=[4, 0, 200])  # id length bent
    s.step(("release", 3), packed=True, bend=[5])  # a stray id byte
    out["packed_bent"] = s

    s = Seed()
    begin_and_admit = (b"\x12\x02\x0a\x00"  # operations { begin_pass {} }
                       b"\x12\x0a\x12\x08\x0a\x02r0\x10\x01\x18\x64")  # admit r0
    s.raw(begin_and_admit)
    s.raw(b"\x0a\x02zz" + begin_and_admit, session=None)  # an unknown session
    s.raw(b"\x0a\x02\xff\xfe", parses=False)  # invalid UTF-8
    s.raw(b"\x12\x00")          # an empty operation
    out["raw_messages"] = s

    # The state memory failing: a snapshot's copy (refused, nothing filed),
    # a copy that ran and then failed, the relocations of a shrink, a grow.
    s = Seed()
    s.step(("begin_pass",), ("admit", 0), ("admit", 1), ("admit", 2, 5),
           ("snapshot", 1, 1, 4))  # r0 0, r1 1, r2 2-3, checkpoint 4 at 4
    s.fault(0, 0)
    s.step(("snapshot", 0, 1, 5), one=True)
    s.fault(0, 4)
    s.step(("copy", 2, 0, 1), one=True)
    s.step(("snapshot", 0, 2, 6), ("lookup", 5), ("lookup", 6), ("release", 2))
    s.fault(1, 4)
    s.resize(4)          # shrink to 4: checkpoint 4 moves 4 -> 2, and fails
    s.step(("begin_pass",), ("lookup", 4), ("lookup", 6))
    s.fault(2)
    s.resize(7)          # grow to 32: refused, nothing changes
    s.fault(3)
    s.resize(7)
    out["device_faults"] = s
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "step_seeds")
    os.makedirs(out_dir, exist_ok=True)
    for name, seed in seeds().items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(seed.out)
        print("%s: %d bytes" % (name, len(seed.out)))


if __name__ == "__main__":
    main()
