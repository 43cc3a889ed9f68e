#!/usr/bin/python3
"""Writes step_channel_fuzz's seed corpus (tests/fuzz/step_channel_seeds/).

    write_step_channel_seeds.py [OUT_DIR]

Each seed is one request as a client writes it into its step channel's
request area (proto/step_channel.h: a 64-byte RequestHeader, then the
columns args, hashes, kinds, request_id_lengths and request_ids, each at the
next multiple of 8), which is what step_channel_fuzz.cc copies into the
attacker's area: every command, well-formed Steps of every operation kind
(the packed form's layout rule in statecache.proto), Steps aimed at the
victim's requests and its checkpoint (hashes 3 and 4, requests v0 and v1:
step_channel_fuzz.cc's World), a reply too long for the 4096-byte reply
area, counts at and past the area's edge, and the harness's own steering
(control-block scribbles, a reply left in parts). The seeds stay valid inputs
whatever the fuzzer becomes (every input is); when the layout or the World
changes, run this again so the seeds keep meaning what their names say.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

STEP, PING, CONTINUE, CLOSE = 1, 2, 3, 4
AREA = 4096
HEADER = 64
SCRIBBLE = 0x53435249  # RequestHeader.reserved[0]: scribble the control block
ABANDON = 0x41424E44   # RequestHeader.reserved[9]: leave a reply in parts

# Operation kinds: the field numbers of Operation's `kind` oneof.
KINDS = {
    "begin_pass": 1, "admit": 2, "resumable_hit": 3, "lookup": 4,
    "reserve": 5, "publish": 6, "cancel": 7, "checkpoint": 8,
    "consume_fork": 9, "adopt_fork_source": 10, "release": 11,
    "unindex": 12, "clear_index": 13, "copy": 14, "snapshot": 15,
}


def align8(n):
    return (n + 7) & ~7


class Pass:
    """A Step's operations as the packed form's columns."""

    def __init__(self):
        self.kinds, self.args, self.hashes = [], [], []
        self.lengths, self.ids = [], b""

    def op(self, kind):
        self.kinds.append(KINDS[kind])
        return self

    def id(self, request_id):
        data = request_id.encode()
        self.lengths.append(len(data))
        self.ids += data

    # One method per kind: its fields in field-number order.
    def begin_pass(self):
        self.op("begin_pass")

    def admit(self, r, width=1, tokens=128, anchor=0, hashes=(), kv_hit=0):
        self.op("admit").id(r)
        self.args += [width, tokens, anchor, len(hashes)]
        self.hashes += list(hashes)
        self.args.append(kv_hit)

    def resumable_hit(self, tokens, hashes, kv_hit, assume_checkpointed=0):
        self.op("resumable_hit")
        self.args += [tokens, len(hashes)]
        self.hashes += list(hashes)
        self.args += [kv_hit, assume_checkpointed]

    def lookup(self, h):
        self.op("lookup")
        self.hashes.append(h)

    def reserve(self, r, positions):
        self.op("reserve").id(r)
        self.args.append(len(positions))
        for position, h in positions:
            self.args.append(position)
            self.hashes.append(h)

    def publish(self, r, keep_all=0):
        self.op("publish").id(r)
        self.args.append(keep_all)

    def cancel(self, r):
        self.op("cancel").id(r)

    def checkpoint(self, r, blocks, h, anchor=0):
        self.op("checkpoint").id(r)
        self.args.append(blocks)
        self.hashes.append(h)
        self.args.append(anchor)

    def consume_fork(self, r):
        self.op("consume_fork").id(r)

    def adopt_fork_source(self, r):
        self.op("adopt_fork_source").id(r)

    def release(self, r):
        self.op("release").id(r)

    def unindex(self, hashes):
        self.op("unindex")
        self.args.append(len(hashes))
        self.hashes += list(hashes)

    def clear_index(self):
        self.op("clear_index")

    def copy(self, r, src, dst):
        self.op("copy").id(r)
        self.args += [src, dst]

    def snapshot(self, r, position, h):
        self.op("snapshot").id(r)
        self.args.append(position)
        self.hashes.append(h)


def header(command, kinds=0, lengths=0, ids=0, args=0, hashes=0, reserved=()):
    words = list(reserved) + [0] * (10 - len(reserved))
    return struct.pack("<6I10I", command, kinds, lengths, ids, args, hashes,
                       *words)


def request(p, reserved=()):
    """A kStep request carrying pass `p`, laid out as the contract says."""
    out = bytearray(header(STEP, len(p.kinds), len(p.lengths), len(p.ids),
                           len(p.args), len(p.hashes), reserved))
    for column in (struct.pack("<%dq" % len(p.args), *p.args),
                   struct.pack("<%dq" % len(p.hashes), *p.hashes),
                   struct.pack("<%dI" % len(p.kinds), *p.kinds),
                   struct.pack("<%dI" % len(p.lengths), *p.lengths),
                   p.ids):
        out += b"\0" * (align8(len(out)) - len(out))
        out += column
    assert len(out) <= AREA, len(out)
    return bytes(out)


def seeds():
    out = {}
    out["ping"] = header(PING)
    out["continue_nothing_pending"] = header(CONTINUE)
    out["close"] = header(CLOSE)
    out["unknown_command"] = header(77)
    out["empty_step"] = header(STEP)

    p = Pass()
    p.begin_pass()
    p.admit("a0", tokens=128, hashes=[7, 8])
    p.checkpoint("a0", 2, 8)
    p.lookup(8)
    p.release("a0")
    out["admit_checkpoint_lookup"] = request(p)

    # The attacker resumes from the victim's checkpoint (hash 4, pinned by
    # the victim's v0): reads it, copies out of it, snapshots its own.
    p = Pass()
    p.begin_pass()
    p.admit("a1", width=2, tokens=200, anchor=128, hashes=[3, 4], kv_hit=2)
    p.consume_fork("a1")
    p.copy("a1", 0, 1)
    p.snapshot("a1", 64, 9)
    p.resumable_hit(200, [3, 4], 2)
    out["fork_from_the_victims_checkpoint"] = request(p)

    p = Pass()
    p.begin_pass()
    p.admit("a2", width=2, tokens=200, anchor=128, hashes=[3, 4], kv_hit=2)
    p.adopt_fork_source("a2")
    p.release("a2")
    out["adopt_the_victims_checkpoint"] = request(p)

    # The victim's checkpoint unindexed and the whole index cleared.
    p = Pass()
    p.unindex([4, 3])
    p.lookup(4)
    p.clear_index()
    out["unindex_clear_index"] = request(p)

    # The victim's own request ids, from the attacker's session.
    p = Pass()
    for r in ("v0", "v1"):
        p.release(r)
        p.consume_fork(r)
        p.copy(r, 0, 1)
        p.snapshot(r, 64, 10)
        p.checkpoint(r, 1, 11)
        p.publish(r)
        p.cancel(r)
    out["the_victims_request_ids"] = request(p)

    p = Pass()
    p.begin_pass()
    p.admit("a3", width=1, tokens=300, anchor=0)
    p.reserve("a3", [(64, 12), (128, 13)])
    p.publish("a3", 0)
    p.reserve("a3", [(192, 14)])
    p.cancel("a3")
    p.release("a3")
    out["reserve_publish_cancel"] = request(p)

    # Every slot asked for: the pool runs dry around the victim's slots.
    p = Pass()
    p.begin_pass()
    for i in range(8):
        p.admit("w%d" % i, width=3, tokens=64)
    out["admit_everything"] = request(p)

    # 300 refusals: a reply of about 14 KiB, four reply areas.
    p = Pass()
    for _ in range(300):
        p.release("v0")
    out["reply_in_parts"] = request(p)
    # The same left unread after its first part: the seeds run in name
    # order, so kContinue gets its second part, then a new Step drops the
    # rest and leaves its own, whose second part the last one gets.
    abandoned = request(p, reserved=[0] * 9 + [ABANDON])
    out["abandon_0_a_reply_in_parts"] = abandoned
    out["abandon_1_continue"] = header(CONTINUE)
    out["abandon_2_a_step_drops_it"] = abandoned
    out["abandon_3_continue"] = header(CONTINUE)

    # Malformed columns Step refuses whole (the counts fit the area).
    p = Pass()
    p.admit("a4")
    bad = bytearray(request(p))
    bad[struct.calcsize("<6I10I") + 8 * len(p.args) + 8 * len(p.hashes)] = 99
    out["unknown_kind"] = bytes(bad)
    p.args.pop()
    out["args_too_short"] = request(p)
    p = Pass()
    p.checkpoint("a4", 1, 5)
    p.hashes.pop()
    out["hashes_too_short"] = request(p)
    # Counts at and past the area's edge (the columns are the zeros after).
    out["ids_fill_the_area"] = header(STEP, ids=AREA - HEADER)
    out["ids_overrun_the_area"] = header(STEP, ids=AREA - HEADER + 1)
    out["args_fill_the_area"] = header(STEP, args=(AREA - HEADER) // 8)
    out["kinds_overrun"] = header(STEP, kinds=0xFFFFFFFF)
    out["every_count_huge"] = header(STEP, 0x40000000, 0x40000000,
                                     0x40000000, 0x40000000, 0x40000000)

    # The control block scribbled on (the layout's words, the heartbeat,
    # daemon_waiting and client_waiting), then a ping and a Step.
    # (offset / 4, value) pairs: magic, heartbeat, daemon_waiting, client_waiting.
    scribbles = [SCRIBBLE, 0, 0xFFFFFFFF, 12, 0xFFFFFFFF, 17, 1, 33, 0]
    out["scribble_then_ping"] = header(PING, reserved=scribbles)
    p = Pass()
    p.begin_pass()
    p.admit("a5")
    p.release("a5")
    out["scribble_then_step"] = request(p, reserved=scribbles)
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        HERE, "step_channel_seeds")
    os.makedirs(out_dir, exist_ok=True)
    for name, seed in seeds().items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(seed)
        print("%s: %d bytes" % (name, len(seed)))


if __name__ == "__main__":
    main()
