"""The scheduler loop client/README.md teaches (examples/scheduler_loop.py)
drives a real daemon: every later turn of a conversation resumes at the
previous prompt's last full block, so the prefill it saves is exactly the
sum of those boundaries. On a pool smaller than a turn's conversations,
admissions refused RESOURCE_EXHAUSTED wait for a later pass and everything
still runs (checkpoints are dropped for want of slots, so it saves less).
"""

import os
import sys

import statecache
from conftest import BLOCK, attach

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir,
                                "examples"))
import scheduler_loop  # noqa: E402


def expected_saving(turns):
    """Each later turn's prompt starts with the previous turn's prompt."""
    saved = 0
    for previous, turn in zip(turns, turns[1:]):
        for before, now in zip(previous, turn):
            assert now.prompt[:len(before.prompt)] == before.prompt
            saved += before.boundary
    return saved


def run_all(daemon):
    turns = scheduler_loop.conversations()
    kv, stats = scheduler_loop.KvCache(), {"prefilled": 0}
    forward = scheduler_loop.make_forward(kv, stats)
    with statecache.Client.connect(daemon.address) as client:
        with attach(client) as session:
            for turn in turns:
                waiting = list(turn)
                scheduler_loop.run_scheduler(session, waiting, kv, forward)
                assert not waiting
                assert all(r.finished for r in turn)
            after = client.admin.stats()
    assert after.requests == 0
    total = sum(len(r.prompt) for turn in turns for r in turn)
    return turns, total - stats["prefilled"], after


def test_loop_resumes_every_later_turn(start_daemon):
    assert scheduler_loop.BLOCK == BLOCK
    turns, saved, after = run_all(start_daemon(num_slots=64))
    assert saved == expected_saving(turns)
    later_turns = sum(len(turn) for turn in turns[1:])
    assert after.resumes_fork + after.resumes_adopt == later_turns


def test_loop_waits_for_slots_on_a_small_pool(start_daemon):
    turns, saved, _ = run_all(start_daemon(num_slots=2))
    assert len(turns[0]) > 2  # more conversations than slots
    assert 0 <= saved <= expected_saving(turns)
