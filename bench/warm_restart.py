#!/usr/bin/python3
"""What a warm restart (--state_dir) costs and what it brings back.

Two measurements against the real daemon (host backend, a preset layout),
each run against fresh daemons and fresh state directories:

1. Restart time with a full pool. A daemon with --state_dir on an empty
   directory starts (cold: the baseline); its pool is then filled with
   published checkpoints of known bytes (written through the mapped
   region; every slot but the one a fork checkpoint needs free) and the
   index is saved. Then:
     warm after SIGKILL   the next start reads the retained region the
                          index names (the region path);
     SIGTERM shutdown     the daemon writes the device images file
                          (fsync'd) and the index, and removes its region;
     warm after SIGTERM   the next start reads the images file (the
                          images-file path).
   Each start is timed from the process's spawn to its "ready" on
   --ready_fd; GetStats' warm_restart gives restore_seconds, from which
   the GB/s of checkpoint bytes restored. Every restored checkpoint's
   bytes are checked against what was written. A start without --state_dir
   at all is timed too, and, in this process, a numpy copy of the pool's
   checkpoint bytes into a buffer already touched and into a fresh one
   (page faults included): the hardware baseline for restore GB/s.

2. Checkpoints recovered after a SIGKILL under load. A client thread
   publishes checkpoints as fast as it can (admit cold, fill the slot's
   bytes, checkpoint, release, begin_pass), so the pool churns and evicts;
   at a random moment the main thread reads GetStats (indexed_hashes: the
   checkpoints indexed just before the kill) and SIGKILLs the daemon; the
   restart reports restored_checkpoints and dropped_bad_checksum (a saved
   checkpoint whose slot was reused since the last index write). Each
   restored checkpoint found by lookup is checked byte for byte against
   the bytes its hash was published with (a dict hash -> seed). Runs with
   --state_save_interval at 1s and at its default, 100ms (--intervals).

3. What checksums cost the pass that publishes. With --state_dir every
   checkpoint is read back and checksummed at the end of the Step that
   filed it. The Step that checkpoints one request (checkpoint,
   consume_fork, release, two begin_pass) is timed round trip, the slot's
   bytes written beforehand outside the timing, on a daemon without and
   one with --state_dir; the difference per checkpoint is set against an
   in-process memcpy of one slot.

A wrong byte ends the run with exit status 3. Figures are medians of
--runs (part 1) and of --trials (part 2). The state directories go under --state_parent
(default: a temporary directory on /tmp's file system, where the images
file is fsync'd); every retained region (/dev/shm/*-kept) a run leaves is
removed. Run from the repository root after building (statecached and the
package):

    /usr/bin/python3 bench/warm_restart.py --runs 5 --trials 5
"""

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
sys.path.insert(0, os.path.join(REPO, "build", "python"))

import numpy as np  # noqa: E402

import statecache  # noqa: E402
from statecache.testing import Daemon  # noqa: E402

BLOCK = 64
MODEL_ID = "warm-restart-bench"
GB = 1e9


class WrongState(Exception):
    """A restored checkpoint holds bytes other than the ones written."""


class Pattern:
    """The bytes published under seed s: the seed (int64) in the first 8
    bytes, then a window of one random buffer starting at an offset that
    depends on s (a view: no per-checkpoint generation)."""

    def __init__(self, slot_bytes):
        self.slot_bytes = slot_bytes
        self.base = np.random.default_rng(12345).integers(
            0, 256, slot_bytes + 4096, dtype=np.uint8)

    def _window(self, seed):
        off = (seed * 8 + 8) % 4096
        return self.base[off:off + self.slot_bytes - 8]

    def fill(self, memory, slot, seed):
        view = memory.slot_bytes(slot)
        view[8:] = self._window(seed)
        view[:8] = np.frombuffer(np.int64(seed).tobytes(), np.uint8)

    def check(self, memory, slot, seed):
        view = memory.slot_bytes(slot)
        got = int(np.frombuffer(view[:8].tobytes(), np.int64)[0])
        if got != seed or not np.array_equal(view[8:], self._window(seed)):
            raise WrongState("slot %d: header says seed %d, expected %d%s"
                             % (slot, got, seed, "" if got != seed else
                                " (the body differs)"))


def ok(results):
    for r in results:
        r.check()
    return results


def hashes_of(p):
    return [(1 << 40) + 2 * p, (1 << 40) + 2 * p + 1]


def publish(session, pattern, p, seeds):
    """Prompt p: a cold admit, the slot filled with seed p, checkpointed at
    2 blocks under hashes_of(p)[1], released, its pins cleared."""
    h = hashes_of(p)
    rid = "w%d" % p
    admit, = ok(session.step().admit(
        rid, width=1, num_tokens=2 * BLOCK + 10, anchor_pos=2 * BLOCK,
        block_hashes=h, kv_hit_blocks=0).send())
    pattern.fill(session.memory, admit.slots[0], p)
    seeds[h[1]] = p
    ok(session.step().checkpoint(rid, boundary_blocks=2, hash=h[1])
       .consume_fork(rid).release(rid).begin_pass().begin_pass().send())


def found_slots(session, hashes):
    """hash -> slot for each hash the daemon holds a checkpoint for."""
    found = {}
    hashes = list(hashes)
    for i in range(0, len(hashes), 2048):
        chunk = hashes[i:i + 2048]
        step = session.step()
        for h in chunk:
            step.lookup(h)
        for h, r in zip(chunk, ok(step.send())):
            if r.slot >= 0:
                found[h] = r.slot
    return found


def verify(session, pattern, seeds, sample=None, rng=None):
    """Checks the bytes of the restored checkpoints (all, or `sample` of
    them); returns (restored found by lookup, checked)."""
    found = found_slots(session, seeds)
    items = sorted(found.items())
    if sample is not None and len(items) > sample:
        items = rng.sample(items, sample)
    for h, slot in items:
        pattern.check(session.memory, slot, seeds[h])
    return len(found), len(items)


def remove_kept(logs):
    """Unlinks every retained region these daemon logs name."""
    for text in logs:
        for handle in set(re.findall(r"handle=/(\S+-kept)", text)):
            try:
                os.unlink("/dev/shm/" + handle)
            except FileNotFoundError:
                pass


def timed_start(daemon):
    t0 = time.perf_counter()
    daemon.start()
    return time.perf_counter() - t0


def flags_for(args, pool, state_dir, interval=None):
    flags = ["--model=" + args.model, "--model_id=" + MODEL_ID,
             "--hash_block_size=%d" % BLOCK, "--num_slots=%d" % pool]
    if state_dir is not None:
        flags.append("--state_dir=" + state_dir)
    if interval is not None:
        flags.append("--state_save_interval=" + interval)
    return flags


def wait_saved(client, count, timeout=60.0):
    deadline = time.monotonic() + timeout
    while client.admin.stats().warm_restart.saved_checkpoints != count:
        if time.monotonic() > deadline:
            raise RuntimeError("the index never held %d checkpoints" % count)
        time.sleep(0.01)


# ---- 1. restart time with a full pool

def restart_run(args, pattern_box):
    pool = args.pool
    state_dir = tempfile.mkdtemp(prefix="wr-state-", dir=args.state_parent)
    r = {}
    daemon = None
    try:
        # No --state_dir: the start without any of this.
        t0 = time.perf_counter()
        plain = Daemon(flags_for(args, pool, None), binary=args.binary,
                       ready_timeout=120)
        r["off_s"] = time.perf_counter() - t0
        plain.close()

        t0 = time.perf_counter()
        daemon = Daemon(flags_for(args, pool, state_dir),
                        binary=args.binary, ready_timeout=120)
        r["cold_s"] = time.perf_counter() - t0
        seeds = {}
        with statecache.Client.connect(daemon.address) as client, \
                client.attach(MODEL_ID, BLOCK, client_name="bench") as s:
            assert client.admin.stats().warm_restart.outcome == "cold"
            slot_bytes = s.memory.bytes_per_slot
            if pattern_box[0] is None:
                pattern_box[0] = Pattern(slot_bytes)
            pattern = pattern_box[0]
            t0 = time.perf_counter()
            # A checkpoint (fork transfer) takes the request a fresh slot:
            # a pool of N holds N - 1 checkpoints and that one free slot.
            for p in range(pool - 1):
                publish(s, pattern, p, seeds)
            r["publish_s"] = time.perf_counter() - t0
            stats = client.admin.stats()
            if stats.indexed_hashes != pool - 1:
                raise RuntimeError("%d checkpoints indexed, not %d"
                                   % (stats.indexed_hashes, pool - 1))
            wait_saved(client, pool - 1)
        r["slot_bytes"] = slot_bytes
        r["pool_bytes"] = (pool - 1) * slot_bytes

        def after(key):
            with statecache.Client.connect(daemon.address) as client, \
                    client.attach(MODEL_ID, BLOCK, client_name="bench") as s:
                w = client.admin.stats().warm_restart
                if w.outcome != "restored":
                    raise RuntimeError("%s: outcome %s (%s)"
                                       % (key, w.outcome, w.reason))
                found, checked = verify(s, pattern, seeds)
                r[key] = {"restore_s": w.restore_seconds,
                          "restored": w.restored_checkpoints,
                          "dropped": w.dropped_bad_checksum
                          + w.dropped_unreadable + w.dropped_no_room,
                          "found": found, "checked": checked}
                s.memory.close()

        daemon.kill()
        r["kill_start_s"] = timed_start(daemon)
        after("kill")
        t0 = time.perf_counter()
        code = daemon.stop(timeout=300)
        r["term_s"] = time.perf_counter() - t0
        if code != 0:
            raise RuntimeError("SIGTERM: exit code %s" % code)
        images = sum(os.path.getsize(os.path.join(state_dir, f))
                     for f in os.listdir(state_dir) if f.endswith(".images"))
        r["images_bytes"] = images
        r["term_start_s"] = timed_start(daemon)
        after("term")
        daemon.stop(timeout=300)
    finally:
        if daemon is not None:
            daemon.stop(timeout=300)
            remove_kept([daemon.log()])
            daemon.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    return r


def memcpy_s(nbytes, reps=3):
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    warm = []
    fresh = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        warm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        new = np.empty_like(src)
        np.copyto(new, src)
        fresh.append(time.perf_counter() - t0)
        del new
    return statistics.median(warm), statistics.median(fresh)


# ---- 2. share recovered after a SIGKILL under load

def churn_trial(args, interval, pattern_box, rng):
    pool = args.churn_pool
    state_dir = tempfile.mkdtemp(prefix="wr-churn-", dir=args.state_parent)
    daemon = None
    r = {}
    try:
        daemon = Daemon(flags_for(args, pool, state_dir, interval),
                        binary=args.binary, ready_timeout=120)
        seeds = {}
        published = [0]
        failure = []
        ready = threading.Event()
        client = statecache.Client.connect(daemon.address)
        session = client.attach(MODEL_ID, BLOCK, client_name="publisher")
        if pattern_box[0] is None:
            pattern_box[0] = Pattern(session.memory.bytes_per_slot)
        pattern = pattern_box[0]

        def publisher():
            p = 0
            try:
                while True:
                    publish(session, pattern, p, seeds)
                    p += 1
                    published[0] = p
                    if p == pool:
                        ready.set()
            except Exception as e:  # the kill ends it
                failure.append(e)
                ready.set()

        thread = threading.Thread(target=publisher, daemon=True)
        t_start = time.perf_counter()
        thread.start()
        ready.wait()
        # The pool has filled once; then a random moment.
        time.sleep(args.warmup + rng.uniform(0, args.spread))
        with statecache.Client.connect(daemon.address) as watcher:
            stats = watcher.admin.stats()
            daemon.kill()
        t_kill = time.perf_counter()
        kill_unix = time.time()
        thread.join()
        if failure and isinstance(failure[0], WrongState):
            raise failure[0]
        n = published[0]
        r["rate"] = n / (t_kill - t_start)
        r["published"] = n
        r["indexed"] = stats.indexed_hashes
        r["saved"] = stats.warm_restart.saved_checkpoints
        r["since_save"] = kill_unix - stats.warm_restart.last_save_unix_seconds
        try:
            session.memory.close()
            client.close()
        except Exception:
            pass
        r["start_s"] = timed_start(daemon)
        with statecache.Client.connect(daemon.address) as client2, \
                client2.attach(MODEL_ID, BLOCK, client_name="bench") as s:
            w = client2.admin.stats().warm_restart
            r["outcome"] = w.outcome
            r["restored"] = w.restored_checkpoints
            r["bad"] = w.dropped_bad_checksum
            r["restore_s"] = w.restore_seconds
            r["other_dropped"] = w.dropped_unreadable + w.dropped_no_room
            found, checked = verify(s, pattern, seeds, args.verify_sample,
                                    rng)
            r["found"] = found
            r["checked"] = checked
            s.memory.close()
        r["share"] = r["restored"] / r["indexed"] if r["indexed"] else 0.0
        daemon.kill()
    finally:
        if daemon is not None:
            daemon.kill()
            remove_kept([daemon.log()])
            daemon.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    return r


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3,
                        help="restart-time runs (part 1)")
    parser.add_argument("--trials", type=int, default=3,
                        help="SIGKILL-under-load trials per interval (part 2)")
    parser.add_argument("--model", default="jamba-v0.1")
    parser.add_argument("--pool", type=int, default=96,
                        help="slots in part 1 (all of them checkpoints)")
    parser.add_argument("--churn_pool", type=int, default=96,
                        help="slots in part 2")
    parser.add_argument("--intervals", default="1s,100ms",
                        help="--state_save_interval values for part 2")
    parser.add_argument("--warmup", type=float, default=1.5,
                        help="part 2: seconds after the pool first filled")
    parser.add_argument("--spread", type=float, default=2.0,
                        help="part 2: the kill comes up to this much later")
    parser.add_argument("--verify_sample", type=int, default=32,
                        help="part 2: restored checkpoints checked a trial")
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--publishes", type=int, default=200,
                        help="part 3: checkpoint Steps timed per daemon")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--state_parent", default=None,
                        help="where the state directories go (default: "
                        "the system's temporary directory)")
    parser.add_argument("--binary",
                        default=os.path.join(REPO, "build/bin/statecached"))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    rng = random.Random(args.seed)
    pattern_box = [None]
    where = args.state_parent or tempfile.gettempdir()
    print("model %s; state directories under %s; binary %s"
          % (args.model, where, args.binary))
    try:
        if "1" in parts:
            part1(args, pattern_box)
        if "2" in parts:
            part2(args, pattern_box, rng)
        if "3" in parts:
            part3(args, pattern_box)
    except WrongState as e:
        print("WRONG STATE:", e)
        return 3
    leftover = [f for f in os.listdir("/dev/shm") if f.endswith("-kept")]
    if leftover:
        print("note: retained regions in /dev/shm not from this run:",
              " ".join(sorted(leftover)))
    return 0


def part1(args, pattern_box):
    runs = []
    copies = []
    for i in range(args.runs):
        r = restart_run(args, pattern_box)
        runs.append(r)
        copies.append(memcpy_s(r["pool_bytes"]))
        print("  run %d: off %.3fs cold %.3fs | SIGKILL->ready %.3fs "
              "(restore %.3fs) | SIGTERM %.3fs | SIGTERM->ready %.3fs "
              "(restore %.3fs) | memcpy %.3fs, fresh %.3fs" % (
                  i + 1, r["off_s"], r["cold_s"], r["kill_start_s"],
                  r["kill"]["restore_s"], r["term_s"], r["term_start_s"],
                  r["term"]["restore_s"], copies[-1][0], copies[-1][1]),
              flush=True)
    first = runs[0]
    nbytes = first["pool_bytes"]
    warm_copy = statistics.median(c[0] for c in copies)
    fresh_copy = statistics.median(c[1] for c in copies)
    cold = med(runs, "cold_s")
    print()
    print("1. restart with a full pool: %d slots, %d checkpoints x %d "
          "bytes = %.0f MB (images file %.0f MB); medians of %d runs"
          % (args.pool, args.pool - 1, first["slot_bytes"], nbytes / 1e6,
             first["images_bytes"] / 1e6, args.runs))
    print("   publishing the pool (Python fill + Steps): %.2fs"
          % med(runs, "publish_s"))
    print("   memcpy of %.0f MB here (numpy): %.3fs = %.2f GB/s; into a "
          "fresh buffer %.3fs = %.2f GB/s"
          % (nbytes / 1e6, warm_copy, nbytes / warm_copy / GB, fresh_copy,
             nbytes / fresh_copy / GB))
    print("%-30s %9s %8s %10s %9s %10s %10s" % (
        "", "to ready", "x cold", "restore s", "GB/s", "x memcpy", "restored"))
    print("%-30s %8.3fs %8.2f" % ("no --state_dir", med(runs, "off_s"),
                                  med(runs, "off_s") / cold))
    print("%-30s %8.3fs %8.2f" % ("cold (empty state dir)", cold, 1.0))
    for key, name, start in (("kill", "warm after SIGKILL (region)",
                              "kill_start_s"),
                             ("term", "warm after SIGTERM (images)",
                              "term_start_s")):
        restore = statistics.median(r[key]["restore_s"] for r in runs)
        restored = statistics.median(r[key]["restored"] for r in runs)
        checked = min(r[key]["checked"] for r in runs)
        dropped = max(r[key]["dropped"] for r in runs)
        gbs = restored * first["slot_bytes"] / restore / GB
        print("%-30s %8.3fs %8.2f %9.3fs %9.2f %10.2f %6d/%d  (bytes "
              "checked: %d, dropped: %d)" % (
                  name, med(runs, start), med(runs, start) / cold, restore,
                  gbs, restore / warm_copy, restored, args.pool - 1, checked,
                  dropped))
    term = med(runs, "term_s")
    print("%-30s %8.3fs %8s %10s %9.2f %10.2f" % (
        "SIGTERM shutdown (to exit)", term, "", "",
        first["images_bytes"] / term / GB, term / warm_copy))
    print("   (x memcpy: seconds over the in-process memcpy of the same "
          "bytes; GB/s: checkpoint bytes over restore_seconds, or the "
          "images file over the shutdown)")
    print(flush=True)


def part2(args, pattern_box, rng):
    intervals = args.intervals.split(",")
    results = {}
    for interval in intervals:
        for t in range(args.trials):
            r = churn_trial(args, interval, pattern_box, rng)
            results.setdefault(interval, []).append(r)
            print("  %s trial %d: %d published (%.0f/s), indexed %d, last "
                  "index %d (%.2fs before the kill), restored %d, bad "
                  "checksum %d, other dropped %d, share %.3f, bytes "
                  "checked %d/%d, start %.3fs (restore %.3fs)" % (
                      interval, t + 1, r["published"], r["rate"],
                      r["indexed"], r["saved"], r["since_save"],
                      r["restored"], r["bad"], r["other_dropped"],
                      r["share"], r["checked"], r["found"], r["start_s"],
                      r["restore_s"]),
                  flush=True)
            if r["found"] != r["restored"]:
                print("  note: lookup found %d, GetStats says %d restored"
                      % (r["found"], r["restored"]))
    print()
    print("2. SIGKILL under load: %d slots, a publisher as fast as it goes; "
          "the kill %.1f-%.1fs after the pool first filled; medians of %d "
          "trials" % (args.churn_pool, args.warmup,
                      args.warmup + args.spread, args.trials))
    print("%-10s %8s %9s %8s %8s %9s %9s %10s %8s %9s %9s %9s" % (
        "interval", "pub/s", "turnover", "indexed", "in index", "restored",
        "bad sum", "share", "checked", "since save", "to ready",
        "restore"))
    for interval in intervals:
        rs = results[interval]
        rate = med(rs, "rate")
        print("%-10s %8.0f %8.2fs %8.0f %8.0f %9.0f %9.0f %10.3f %4d/%-3d "
              "%8.2fs %8.3fs %8.3fs" % (
                  interval, rate, args.churn_pool / rate, med(rs, "indexed"),
                  med(rs, "saved"), med(rs, "restored"), med(rs, "bad"),
                  med(rs, "share"), sum(r["checked"] for r in rs),
                  sum(min(r["found"], args.verify_sample) for r in rs),
                  med(rs, "since_save"), med(rs, "start_s"),
                  med(rs, "restore_s")))
    print("   (turnover: pool slots / publish rate, the time in which every "
          "slot is reused; share: restored / indexed just before the kill; "
          "in index: checkpoints the last index write held; to ready / "
          "restore: the restart after the kill)")


def checkpoint_step_seconds(args, pattern_box, state_dir):
    """Round-trip seconds of each checkpoint Step on a fresh daemon (with
    --state_dir when given), the slot's bytes written before each."""
    daemon = Daemon(flags_for(args, args.churn_pool, state_dir),
                    binary=args.binary, ready_timeout=120)
    times = []
    try:
        with statecache.Client.connect(daemon.address) as client, \
                client.attach(MODEL_ID, BLOCK) as session:
            pattern = pattern_box[0] or Pattern(session.memory.bytes_per_slot)
            pattern_box[0] = pattern
            for p in range(args.publishes):
                h = hashes_of(p)
                rid = "c%d" % p
                admit, = ok(session.step().admit(
                    rid, width=1, num_tokens=2 * BLOCK + 10,
                    anchor_pos=2 * BLOCK, block_hashes=h,
                    kv_hit_blocks=0).send())
                pattern.fill(session.memory, admit.slots[0], p)
                step = (session.step().checkpoint(rid, boundary_blocks=2,
                                                  hash=h[1])
                        .consume_fork(rid).release(rid).begin_pass()
                        .begin_pass())
                t0 = time.perf_counter()
                ok(step.send())
                times.append(time.perf_counter() - t0)
        logs = [daemon.log()]
    finally:
        daemon.close()
    remove_kept(logs)
    return times


def part3(args, pattern_box):
    runs = []
    for i in range(args.runs):
        state_dir = tempfile.mkdtemp(prefix="wr-state-", dir=args.state_parent)
        try:
            off = statistics.median(
                checkpoint_step_seconds(args, pattern_box, None))
            on = statistics.median(
                checkpoint_step_seconds(args, pattern_box, state_dir))
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        slot = pattern_box[0].slot_bytes
        copy = memcpy_s(slot, reps=20)[0]
        runs.append((off, on, copy))
        print("  run %d: checkpoint Step %.3f ms without, %.3f ms with "
              "--state_dir; memcpy of one slot %.3f ms"
              % (i + 1, off * 1e3, on * 1e3, copy * 1e3), flush=True)
    off = statistics.median(r[0] for r in runs)
    on = statistics.median(r[1] for r in runs)
    copy = statistics.median(r[2] for r in runs)
    slot = pattern_box[0].slot_bytes
    print()
    print("3. checksums on the publishing pass: one checkpoint Step, %d "
          "bytes a slot; medians of %d runs of %d Steps"
          % (slot, args.runs, args.publishes))
    print("   without --state_dir %.3f ms, with %.3f ms: +%.3f ms a "
          "checkpoint (%.2f GB/s of slot bytes), = %.1f x a memcpy of the "
          "slot (%.3f ms)" % (off * 1e3, on * 1e3, (on - off) * 1e3,
                              slot / max(on - off, 1e-9) / GB,
                              (on - off) / copy, copy * 1e3))


if __name__ == "__main__":
    sys.exit(main())
