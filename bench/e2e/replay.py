#!/usr/bin/python3
"""replay.py: recorded passes sent again through the `statecache` package.

    PYTHONPATH=build/python /usr/bin/python3 bench/e2e/replay.py PASSES.jsonl
        (--address ADDR | --statecached BIN [--daemon-flag F ...])
        [--warmup N] [--stream | --raw] [--json]

PASSES.jsonl is a record of passes (`statecache-loadgen --record`, the
format in bench/loadgen/record.h): a header with the identity and the pool,
then one Step per line, its operations in the proto's field names, the
result codes and results the recording run got, and its client's time.
Each pass is built with ``session.step()`` (the builder's methods, named
and keyworded as the proto's operations; off the clock), sent with
``send()`` (the packed form: encoding, the round trip, decoding the results
into dataclasses; on the clock) and its results compared, off the clock,
with the recorded ones: on a fresh daemon of the same pool the same passes
meet the same decisions, so every code and every result must match.

With --statecached it starts a fresh daemon itself (a Unix socket in a
temporary directory, --num_slots from the record's header, plus each
--daemon-flag) and stops it at the end. Prints the step latency p50/p99
(over the passes after --warmup), the passes checked and the first
difference, or with --json one JSON object (every Step's time in
``step_us``). Exit status 0, 3 if a result differs, 1 on an error.

bench/e2e/run.py uses :func:`load` and :func:`replay` directly.
"""

import argparse
import dataclasses
import gc
import json
import math
import os
import re
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import statecache
except ImportError:
    sys.path.insert(0, os.path.join(_HERE, os.pardir, os.pardir, "build",
                                    "python"))
    import statecache
from statecache.v1 import statecache_pb2 as _pb  # noqa: E402

FORMAT = "statecache-passes"
_clock = time.perf_counter_ns

# The Operation field names a record may carry: each is a StepBuilder
# method of the same name whose keyword arguments are the message's fields.
KINDS = ("begin_pass", "admit", "resumable_hit", "lookup", "reserve",
         "publish", "cancel", "checkpoint", "consume_fork",
         "adopt_fork_source", "release", "unindex", "clear_index", "copy",
         "snapshot")


class RecordError(ValueError):
    """The file is not a record of passes this replayer can send."""


@dataclasses.dataclass
class Record:
    """A record file, read: `passes[i]` is a list of (builder method,
    fields) to call in order; `codes[i]` / `results[i]` what the recording
    run got (None where the line has none); `us[i]` its Step time."""

    path: str
    header: dict
    passes: list
    kinds: list
    codes: list
    results: list
    us: list

    @property
    def identity(self):
        return self.header["identity"]

    @property
    def pool(self):
        return self.header["pool"]

    def operations(self, i):
        return len(self.passes[i])


def load(path):
    """Reads a record (see the module docstring). Raises RecordError naming
    the line for anything else."""
    methods = {k: getattr(statecache.StepBuilder, k) for k in KINDS}
    passes, kinds, codes, results, us = [], [], [], [], []
    header = None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                j = json.loads(line)
            except ValueError as e:
                raise RecordError("%s:%d: %s" % (path, number, e)) from None
            if header is None:
                if j.get("format") != FORMAT or j.get("version") != 1:
                    raise RecordError("%s:%d: not a %s version 1 header"
                                      % (path, number, FORMAT))
                header = j
                continue
            ops, names = [], []
            for op in j["ops"]:
                if len(op) != 1:
                    raise RecordError("%s:%d: an operation has one key"
                                      % (path, number))
                (kind, fields), = op.items()
                if kind not in methods:
                    raise RecordError("%s:%d: unknown operation %r"
                                      % (path, number, kind))
                ops.append((methods[kind], fields))
                names.append(kind)
            for column in (j.get("codes"), j.get("results")):
                if column is not None and len(column) != len(ops):
                    raise RecordError("%s:%d: %d codes or results for %d "
                                      "operations" % (path, number,
                                                      len(column), len(ops)))
            passes.append(ops)
            kinds.append(names)
            codes.append(j.get("codes"))
            results.append(j.get("results"))
            us.append(j.get("us"))
    if header is None:
        raise RecordError("%s: empty" % path)
    return Record(path, header, passes, kinds, codes, results, us)


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name[:-len("Result")]).lower()


_SHAPES = {}  # result class -> (record key, field names but code/message)


def _shape(cls):
    shape = _SHAPES.get(cls)
    if shape is None:
        # The fields the record carries: the packed layout's (a field
        # numbered 100 or more is the list form's only).
        proto = _pb.DESCRIPTOR.message_types_by_name[cls.__name__]
        names = tuple(f.name for f in dataclasses.fields(cls)
                      if f.name not in ("code", "message")
                      and proto.fields_by_name[f.name].number < 100)
        shape = _SHAPES[cls] = (_snake(cls.__name__), names)
    return shape


def _plain(value):
    if isinstance(value, list):
        if value and dataclasses.is_dataclass(value[0]):
            return [{f.name: _plain(getattr(v, f.name))
                     for f in dataclasses.fields(v)} for v in value]
        return value
    return value


def result_record(result):
    """A package result in the record's form: ``{"admit": {"slots": [...],
    ...}}`` (the proto's names, code and message left out); None when the
    operation was refused."""
    if result.code != 0:
        return None
    key, names = _shape(type(result))
    return {key: {name: _plain(getattr(result, name)) for name in names}}


def _difference(record, i, results):
    """Where pass i's results differ from the record's, or None."""
    kinds = record.kinds[i]
    if len(results) != len(kinds):
        return "pass %d: %d results for %d operations" % (
            i, len(results), len(kinds))
    codes, recorded = record.codes[i], record.results[i]
    for k, r in enumerate(results):
        if codes is not None and r.code != codes[k]:
            return "pass %d operation %d (%s): code %d, recorded %d (%s)" % (
                i, k, kinds[k], r.code, codes[k], r.message)
        if recorded is not None:
            mine = result_record(r)
            if mine != recorded[k]:
                return "pass %d operation %d (%s): %s, recorded %s" % (
                    i, k, kinds[k], json.dumps(mine),
                    json.dumps(recorded[k]))
    return None


def percentile(values, q):
    """Nearest-rank percentile (as the loadgen's report computes it)."""
    if not values:
        return 0.0
    v = sorted(values)
    rank = min(max(math.ceil(q * len(v)), 1), len(v))
    return v[rank - 1]


def summary(us):
    """p50, p99, mean, max of `us` (microseconds)."""
    return {"p50": percentile(us, 0.5), "p99": percentile(us, 0.99),
            "mean": sum(us) / len(us) if us else 0.0,
            "max": max(us) if us else 0.0}


def replay(address, record, warmup=0, streamed=False, raw=False,
           client_name="e2e-replay"):
    """Sends every pass of `record` to the daemon at `address` through the
    package, one Step each (over one StepStream with `streamed`), and
    returns a dict: step_us (every Step's send(), in us), build_latency_us
    (the builder's methods, off the clock), step_latency_us (summary() of
    the passes after `warmup`), operations (in those), passes_checked,
    mismatches, first_mismatch, daemon_hit_ratio (GetStats' resumed /
    wanted blocks over the run) and wall_seconds. The passes go back to
    back; the results are kept and checked against the record after the
    last. Python's garbage collector is off during the passes (collected
    before and after): with it on, its full collections scan the loaded
    record and the kept results, neither of which a scheduler holds, and
    show up as pauses in the p99.

    With `raw`, what gRPC Python's call costs by itself: every pass is
    built and encoded into its StepRequest bytes first, and the timed call
    sends them with the package's internal bytes stub, decoding nothing
    (as bench/python_step_bench.py's `gRPC only` row); only the codes are
    checked.

    Raises RecordError if the daemon's pool is not the record's, and the
    package's errors (statecache.Error) if a Step fails as a whole."""
    identity, pool = record.identity, record.pool
    step_us, build_us = [], []
    checked = mismatches = 0
    first = None
    with statecache.Client.connect(address) as client:
        before = client.admin.stats()
        session = client.attach(
            model_id=identity.get("model_id", ""),
            hash_block_size=identity["hash_block_size"],
            hash_namespace=identity.get("hash_namespace", ""),
            num_spec=identity.get("num_spec", 0), client_name=client_name,
            advise_placement=pool.get("placement_advised", False))
        with session:
            transfer = pool.get("transfer", {})
            if (session.num_slots != pool["num_slots"]
                    or session.transfer.kind != transfer.get("kind")):
                raise RecordError(
                    "the daemon's pool (%d slots, transfer %s) is not the "
                    "record's (%d slots, transfer %s)" % (
                        session.num_slots, session.transfer.kind,
                        pool["num_slots"], transfer.get("kind")))
            if raw:
                return _replay_raw(client, session, record, warmup, before)
            stream = session.stream() if streamed else None
            new_step = (stream or session).step
            got = []
            gc_was_on = gc.isenabled()
            gc.collect()
            gc.disable()
            started = time.monotonic()
            try:
                # Back to back, nothing but building the next pass between
                # Steps; the results are checked after the last.
                for ops in record.passes:
                    t0 = _clock()
                    step = new_step()
                    for method, fields in ops:
                        method(step, **fields)
                    t1 = _clock()
                    results = step.send()
                    t2 = _clock()
                    build_us.append((t1 - t0) / 1000.0)
                    step_us.append((t2 - t1) / 1000.0)
                    got.append(results)
            finally:
                wall = time.monotonic() - started
                if gc_was_on:
                    gc.enable()
                if stream is not None:
                    stream.close()
        after = client.admin.stats()
    for i, results in enumerate(got):
        if record.codes[i] is None and record.results[i] is None:
            continue
        checked += 1
        why = _difference(record, i, results)
        if why is not None:
            mismatches += 1
            first = first or why
    wanted = after.resume_blocks_wanted - before.resume_blocks_wanted
    resumed = after.resume_blocks_resumed - before.resume_blocks_resumed
    timed = step_us[warmup:]
    return {
        "path": record.path,
        "address": address,
        "streamed": streamed,
        "raw": False,
        "passes": len(record.passes),
        "warmup": warmup,
        "timed": len(timed),
        "operations": sum(len(p) for p in record.passes[warmup:]),
        "step_latency_us": summary(timed),
        "build_latency_us": summary(build_us[warmup:]),
        "wall_seconds": wall,
        "passes_checked": checked,
        "mismatches": mismatches,
        "first_mismatch": first,
        "daemon_hit_ratio": resumed / wanted if wanted else 0.0,
        "step_us": step_us,
    }


def _replay_raw(client, session, record, warmup, before):
    """replay(raw=True): pre-encoded StepRequests, nothing decoded."""
    from statecache import _step
    requests, build_us = [], []
    for ops in record.passes:
        t0 = _clock()
        step = statecache.StepBuilder(None)
        for method, fields in ops:
            method(step, **fields)
        requests.append(_step.step_request(session._request_prefix,
                                           step.encode()))
        build_us.append((_clock() - t0) / 1000.0)
    send = client._step_bytes
    timeout = client.timeout
    step_us, got = [], []
    gc_was_on = gc.isenabled()
    gc.collect()
    gc.disable()
    started = time.monotonic()
    try:
        for request in requests:
            t1 = _clock()
            response = send(request, timeout=timeout)
            t2 = _clock()
            step_us.append((t2 - t1) / 1000.0)
            got.append(response)
    finally:
        wall = time.monotonic() - started
        if gc_was_on:
            gc.enable()
    checked = mismatches = 0
    first = None
    for i, response in enumerate(got):
        if response.error_code:
            raise statecache.Error("pass %d refused whole: %s"
                                   % (i, response.error_message))
        if record.codes[i] is None:
            continue
        checked += 1
        codes = list(response.packed_results.codes)
        if codes != record.codes[i]:
            mismatches += 1
            first = first or "pass %d: codes %s, recorded %s" % (
                i, codes, record.codes[i])
    after = client.admin.stats()
    wanted = after.resume_blocks_wanted - before.resume_blocks_wanted
    resumed = after.resume_blocks_resumed - before.resume_blocks_resumed
    timed = step_us[warmup:]
    return {
        "path": record.path, "address": client.address, "streamed": False,
        "raw": True, "passes": len(record.passes), "warmup": warmup,
        "timed": len(timed),
        "operations": sum(len(p) for p in record.passes[warmup:]),
        "step_latency_us": summary(timed),
        "build_latency_us": summary(build_us[warmup:]),
        "wall_seconds": wall, "passes_checked": checked,
        "mismatches": mismatches, "first_mismatch": first,
        "daemon_hit_ratio": resumed / wanted if wanted else 0.0,
        "step_us": step_us,
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("record", help="a statecache-passes file")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="a running daemon (a fresh one: "
                       "its decisions must be the recording daemon's)")
    where.add_argument("--statecached", help="start a fresh daemon with "
                       "this binary, --num_slots from the record")
    parser.add_argument("--daemon-flag", action="append", default=[],
                        help="another flag for the daemon --statecached "
                        "starts (repeatable)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="passes left out of the latency figures")
    parser.add_argument("--stream", action="store_true",
                        help="send the passes over one StepStream")
    parser.add_argument("--raw", action="store_true",
                        help="time gRPC Python's call alone: pre-encoded "
                        "requests, results not decoded (codes checked)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        record = load(args.record)
    except (OSError, RecordError) as e:
        print("replay.py: %s" % e, file=sys.stderr)
        return 1
    if args.address:
        result = replay(args.address, record, args.warmup, args.stream,
                        args.raw)
    else:
        from daemon import Daemon
        with tempfile.TemporaryDirectory(prefix="e2e-replay.") as d, \
                Daemon(args.statecached,
                       ["--num_slots=%d" % record.pool["num_slots"]]
                       + args.daemon_flag, d) as daemon:
            result = replay(daemon.address, record, args.warmup, args.stream,
                            args.raw)
    if args.json:
        print(json.dumps(result))
    else:
        s = result["step_latency_us"]
        print("replayed %d passes (%d timed, %d operations) in %.2f s\n"
              "step latency p50 %.1f us, p99 %.1f us, mean %.1f us "
              "(building off the clock: p50 %.1f us)\n"
              "results: %d passes checked against the record, %d differ%s"
              % (result["passes"], result["timed"], result["operations"],
                 result["wall_seconds"], s["p50"], s["p99"], s["mean"],
                 result["build_latency_us"]["p50"], result["passes_checked"],
                 result["mismatches"],
                 "; first: " + result["first_mismatch"]
                 if result["first_mismatch"] else ""))
    return 3 if result["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
