#!/usr/bin/env python3
"""The layering checker finds what it is there to find: an upward include,
a cycle, and nothing in a tree that follows the rules."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402


def write_tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)


class CheckLayersTest(unittest.TestCase):
    def check(self, files):
        with tempfile.TemporaryDirectory() as root:
            write_tree(root, files)
            return check_layers.check(root)

    def test_a_tree_that_follows_the_rules_passes(self):
        self.assertEqual(self.check({
            "daemon/common/m.h": "",
            "kernels/k.h": '#include "daemon/common/m.h"\n',
            "daemon/device/d.h": '#include "kernels/k.h"\n',
            "daemon/core/c.h": '#include "daemon/common/m.h"\n',
            "daemon/service/s.h": ('#include "daemon/core/c.h"\n'
                                   '#include "daemon/device/d.h"\n'),
            "daemon/grpc/grpc_service.cc": '#include "daemon/service/s.h"\n',
            "daemon/main.cc": '#include "daemon/grpc/grpc_service.h"\n',
        }), [])

    def test_an_upward_include_is_named(self):
        problems = self.check({
            "daemon/device/d.h": "",
            "kernels/k.h": '#include "daemon/device/d.h"\n',
        })
        self.assertEqual(len(problems), 1)
        self.assertIn("kernels/k.h:1: includes daemon/device/d.h", problems[0])

    def test_the_service_may_not_include_its_adapter(self):
        problems = self.check({
            "daemon/grpc/grpc_service.h": "",
            "daemon/service/s.cc": '#include "daemon/grpc/grpc_service.h"\n',
        })
        self.assertEqual(len(problems), 1)
        self.assertIn("the service layer", problems[0])

    def test_a_cycle_within_a_layer_is_named(self):
        problems = self.check({
            "daemon/core/a.h": '#include "daemon/core/b.h"\n',
            "daemon/core/b.h": '#include "daemon/core/a.h"\n',
        })
        self.assertEqual(problems, [
            "include cycle: daemon/core/a.h -> daemon/core/b.h -> "
            "daemon/core/a.h"])


if __name__ == "__main__":
    unittest.main()
