#!/usr/bin/python3
"""The scheduler loop of client/README.md, runnable against a real daemon.

    PYTHONPATH=build/python /usr/bin/python3 \\
        client/python/examples/scheduler_loop.py [--address ADDR]

The loop (run_scheduler) is the README's, line for line. Around it stand
what a real engine supplies: requests (multi-turn conversations whose
prompts extend the previous turn's), a KV prefix cache that remembers the
blocks it prefilled, and a forward that advances each request by a chunk
of prefill (stopping at the prompt's last full block, where the scheduler
checkpoints) or by one decoded token. It prints the prefill tokens the
daemon saved, and checks that every resume started at a block the
conversation really had computed.
"""

import argparse
import hashlib
import json
from dataclasses import dataclass

import statecache

BLOCK, CHUNK, MAX_ADMIT = 64, 512, 4


@dataclass
class Request:
    id: str
    prompt: list        # token ids
    max_output: int
    pos: int = 0        # tokens whose state is in `slot`
    slot: int = -1
    read_from: int = -1  # the slot the next forward reads (-1: `slot`)
    checkpointed: bool = False
    output: int = 0

    @property
    def hashes(self):   # chained hashes of the full blocks
        out, h = [], b""
        for i in range(len(self.prompt) // BLOCK):
            block = self.prompt[i * BLOCK:(i + 1) * BLOCK]
            h = hashlib.blake2b(h + json.dumps(block).encode(),
                                digest_size=8).digest()
            out.append(int.from_bytes(h, "little") >> 1)
        return out

    @property
    def boundary(self):  # the prompt's last full block, in tokens
        return len(self.prompt) // BLOCK * BLOCK

    @property
    def finished(self):
        return self.output >= self.max_output


class KvCache:
    """The engine's prefix cache: the block hashes it has computed."""

    def __init__(self):
        self.blocks = set()

    def hit_blocks(self, hashes):
        n = 0
        while n < len(hashes) and hashes[n] in self.blocks:
            n += 1
        return n


def make_forward(kv, stats):
    def forward(running):
        """One forward: each request reads r.read_from (or its own slot),
        writes r.slot, and advances by a chunk or one decoded token."""
        for r in running:
            if r.pos < r.boundary:
                target = r.boundary         # stop here: checkpoint next
            elif r.pos < len(r.prompt):
                target = len(r.prompt)
            else:
                target = r.pos + 1
            step = min(CHUNK, target - r.pos)
            if r.pos < len(r.prompt):
                stats["prefilled"] += step
            else:
                r.output += 1
            r.pos += step
            kv.blocks.update(r.hashes[:min(r.pos, r.boundary) // BLOCK])
        return [r for r in running if r.finished]
    return forward


def run_scheduler(session, waiting, kv, forward):
    running = []
    while waiting or running:
        step, batch = session.step().begin_pass(), waiting[:MAX_ADMIT]
        for r in batch:
            step.admit(r.id, width=1, num_tokens=len(r.prompt),
                       anchor_pos=r.boundary, block_hashes=r.hashes,
                       kv_hit_blocks=kv.hit_blocks(r.hashes))
        for r, a in zip(batch, step.send()[1:]):
            if a.code == 8:                  # no free slots: a later pass
                continue
            a.check()
            waiting.remove(r)
            running.append(r)
            r.slot, r.read_from = a.slots[0], a.fork_src
            r.pos = a.blocks_resumed * BLOCK
            r.checkpointed = r.pos == r.boundary
        finished = forward(running)          # reads r.read_from, writes r.slot
        after, checkpoints = session.step(), []
        for r in running:
            if r.read_from >= 0:             # its forward has been issued
                after.consume_fork(r.id)
                r.read_from = -1
            if r.pos == r.boundary and not r.checkpointed and r.boundary:
                after.checkpoint(r.id, boundary_blocks=r.boundary // BLOCK,
                                 hash=r.hashes[-1])
                checkpoints.append((r, len(after) - 1))
        for r in finished:
            after.release(r.id)
            running.remove(r)
        results = after.send() if len(after) else []
        for r, i in checkpoints:
            r.checkpointed = True
            if results[i].kept:              # next forward reads the source
                r.slot, r.read_from = results[i].state_slot, results[i].fork_src


def conversations(n=3, turns=3):
    """Each turn's prompt is the previous prompt, its reply and a tool
    output: the next turn resumes at the previous prompt's last block."""
    rounds = []
    for c in range(n):
        prompt = [c * 1000 + t for t in range(300 + 70 * c)]  # system + task
        for t in range(turns):
            rounds.append((t, Request(f"c{c}-t{t}", list(prompt), 20)))
            prompt += [7] * 20 + [9] * (150 + 40 * t)   # reply, tool output
    return [[r for t, r in rounds if t == k] for k in range(turns)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None)
    parser.add_argument("--model_id", default="my/model")
    args = parser.parse_args()
    kv, stats = KvCache(), {"prefilled": 0}
    total = 0
    with statecache.Client.connect(args.address) as client, \
            client.attach(model_id=args.model_id,
                          hash_block_size=BLOCK) as session:
        for turn in conversations():         # turns arrive one after another
            total += sum(len(r.prompt) for r in turn)
            run_scheduler(session, list(turn), kv, make_forward(kv, stats))
        resumed = client.admin.stats()
    saved = total - stats["prefilled"]
    print(json.dumps({"prompt_tokens": total,
                      "prefilled_tokens": stats["prefilled"],
                      "saved_tokens": saved,
                      "resumes_fork": resumed.resumes_fork,
                      "resumes_adopt": resumed.resumes_adopt,
                      "checkpoints_kept": resumed.checkpoints_kept}))


if __name__ == "__main__":
    main()
