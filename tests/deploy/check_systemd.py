#!/usr/bin/python3
"""Checks deploy/systemd/ with systemd's own tools, and runs the template's
command line.

    check_systemd.py DEPLOY_DIR REPO [STATECACHED]

1. `systemd-analyze verify` on statecached.service and on instances 0 and 12
   of statecached@.service: exit 0 and not a single warning (verify exits 0
   on unknown keys, so its output must be empty too).
   verify refuses a unit whose ExecStart binary does not exist, and the units
   name the installed path (/usr/local/bin/statecached), which a build
   machine does not have: the check verifies copies with that path replaced
   by STATECACHED (the built daemon, when the build has one) or else
   /bin/true. Nothing else in the copies changes.
2. `systemd-analyze security --offline=true`: exposure at most 2.0.
3. The settings operators rely on are there (user, runtime directory,
   ProtectSystem=strict, NoNewPrivileges, restart policy, LimitMEMLOCK,
   SIGTERM) and TimeoutStopSec exceeds the daemon's --shutdown_grace.
4. The template's ExecStart runs: its sh script, expanded as systemd would
   for instance 3, starts a stub that records its arguments: --device=3, the
   socket under /run/statecache/gpu3/, metrics on 127.0.0.1:9403, the
   environment files' arguments last. Instance "x" is refused with exit 2.
5. Every flag passed to statecached exists in daemon/ (or is pending, see
   deploylib.PENDING_FLAGS).
6. statecache.sysusers.conf passes `systemd-sysusers --dry-run` in an empty
   root and creates the statecache user.
"""

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

import deploylib

INSTALLED_BINARY = "/usr/local/bin/statecached"
MAX_EXPOSURE = 2.0
SHUTDOWN_MARGIN_S = 5.0


def parse_unit(path):
    """{section: [(key, value)]}, continuation lines joined as systemd does."""
    sections, section, pending = {}, None, ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip()[0] in "#;"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = pending + line, ""
            if line.startswith("["):
                section = line.strip()[1:-1]
                sections.setdefault(section, [])
                continue
            key, _, value = line.partition("=")
            sections.setdefault(section, []).append((key.strip(), value.strip()))
    return sections


def values(unit, section, key):
    return [v for k, v in unit.get(section, []) if k == key]


def one(unit, section, key):
    found = values(unit, section, key)
    return found[-1] if found else None


def expand_specifiers(text, instance):
    return re.sub(r"%(.)", lambda m: {"i": instance, "I": instance, "%": "%"}.get(
        m.group(1), m.group(0)), text)


def systemd_words(command, instance, environment):
    """ExecStart's argv as systemd builds it (the subset these units use)."""
    words = []
    for word in shlex.split(expand_specifiers(command, instance)):
        match = re.fullmatch(r"\$(\w+)", word)
        if match:  # unbraced $VAR alone: split into words
            words.extend(environment.get(match.group(1), "").split())
        else:
            words.append(word.replace("$$", "$"))
    return words


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    deploy, repo = sys.argv[1], sys.argv[2]
    statecached = (os.path.abspath(sys.argv[3])
                   if len(sys.argv) == 4 and os.access(sys.argv[3], os.X_OK) else "/bin/true")
    unit_dir = os.path.join(deploy, "systemd")
    failures = deploylib.Failures("systemd units")
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        failures.add(unit_dir, "systemd-analyze not found: install Debian's systemd package")
        failures.done()
    defined = deploylib.daemon_flags(repo)
    print("verifying with ExecStart's %s replaced by %s" % (INSTALLED_BINARY, statecached))

    with tempfile.TemporaryDirectory() as tmp:
        # 1, 2: systemd-analyze on copies that point at a binary that exists.
        copies = os.path.join(tmp, "units")
        os.mkdir(copies)
        for name in ("statecached.service", "statecached@.service"):
            with open(os.path.join(unit_dir, name)) as f:
                text = f.read()
            if not failures.check(INSTALLED_BINARY in text, name,
                                  "ExecStart does not run %s" % INSTALLED_BINARY):
                continue
            with open(os.path.join(copies, name), "w") as f:
                f.write(text.replace(INSTALLED_BINARY, statecached))
        for name in ("statecached.service", "statecached@0.service", "statecached@12.service"):
            path = os.path.join(copies, name)
            status, output = deploylib.run([analyze, "verify", path])
            print("systemd-analyze verify %s: exit %d%s" % (
                name, status, (", said:\n" + output.rstrip()) if output.strip() else ", silent"))
            failures.check(status == 0 and not output.strip(), name,
                           "systemd-analyze verify is not clean:\n" + output)
            status, output = deploylib.run([analyze, "security", "--offline=true", path])
            match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", output)
            exposure = float(match.group(1)) if match else None
            print("systemd-analyze security %s: exposure %s" % (name, exposure))
            failures.check(exposure is not None and exposure <= MAX_EXPOSURE, name,
                           "exposure %s above %.1f:\n%s" % (exposure, MAX_EXPOSURE, output))

        # 3: settings operators rely on.
        units = {}
        for name in ("statecached.service", "statecached@.service"):
            unit = units[name] = parse_unit(os.path.join(unit_dir, name))
            expected = {
                "User": "statecache", "Group": "statecache", "ProtectSystem": "strict",
                "NoNewPrivileges": "yes", "Restart": "on-failure", "KillSignal": "SIGTERM",
                "LimitMEMLOCK": "infinity", "RestartPreventExitStatus": "2",
                "PrivateTmp": "yes", "ProtectHome": "yes",
            }
            for key, value in expected.items():
                failures.check(one(unit, "Service", key) == value, name,
                               "%s=%s expected, found %r" % (key, value, one(unit, "Service", key)))
            failures.check(one(unit, "Service", "RuntimeDirectory"), name, "no RuntimeDirectory=")
            failures.check(one(unit, "Install", "WantedBy") == "multi-user.target", name,
                           "not WantedBy=multi-user.target")
            execs = values(unit, "Service", "ExecStart")
            failures.check(len(execs) == 1, name, "want exactly one ExecStart")
            grace = re.search(r"--shutdown_grace=(\S+?)['\s]", execs[0] + " ") if execs else None
            timeout = one(unit, "Service", "TimeoutStopSec")
            if failures.check(grace and timeout, name, "--shutdown_grace and TimeoutStopSec= must both be set"):
                g = deploylib.parse_duration_seconds(grace.group(1))
                t = deploylib.parse_duration_seconds(timeout)
                failures.check(t >= g + SHUTDOWN_MARGIN_S, name,
                               "TimeoutStopSec=%s leaves under %ds after --shutdown_grace=%s" % (
                                   timeout, SHUTDOWN_MARGIN_S, grace.group(1)))

        # 5 (plain unit): its flags.
        plain = values(units["statecached.service"], "Service", "ExecStart")
        if plain:
            argv = systemd_words(plain[0], "", {})
            failures.check(argv[0] == INSTALLED_BINARY, "statecached.service", "ExecStart runs %s" % argv[0])
            failures.check("--listen=unix:/run/statecache/statecached.sock" in argv, "statecached.service",
                           "does not listen on the default socket")
            failures.check("--metrics_address=127.0.0.1:9400" in argv, "statecached.service",
                           "metrics not on 127.0.0.1:9400")
            deploylib.check_flags(argv[1:], "statecached.service", failures, defined)

        # 4: run the template's command line for real, with a stub daemon.
        template = values(units["statecached@.service"], "Service", "ExecStart")
        stub = os.path.join(tmp, "statecached-stub")
        record = os.path.join(tmp, "argv")
        with open(stub, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > %s\n' % shlex.quote(record))
        os.chmod(stub, stat.S_IRWXU)
        env = {"PATH": "/usr/bin:/bin", "STATECACHED_ARGS": "--num_slots=4096 --model_id=m",
               "STATECACHED_INSTANCE_ARGS": "--max_slots=8192"}
        for instance in ("3", "x", ""):
            argv = systemd_words(template[0].replace(INSTALLED_BINARY, stub), instance, env)
            if os.path.exists(record):
                os.unlink(record)
            proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, timeout=10)
            where = "statecached@%s.service" % instance
            if instance != "3":
                failures.check(proc.returncode == 2 and not os.path.exists(record), where,
                               "a non-numeric instance must exit 2 without starting the daemon "
                               "(exit %d)" % proc.returncode)
                failures.check("GPU index" in proc.stderr, where, "no message saying why")
                continue
            if not failures.check(proc.returncode == 0 and os.path.exists(record), where,
                                  "the ExecStart script failed: %s" % proc.stderr):
                continue
            with open(record) as f:
                got = f.read().split("\n")[:-1]
            print("statecached@3 would run: statecached " + " ".join(got))
            want = ["--listen=unix:/run/statecache/gpu3/statecached.sock", "--device=3",
                    "--metrics_address=127.0.0.1:9403"]
            for arg in want:
                failures.check(arg in got, where, "missing %s" % arg)
            failures.check(got[-3:] == ["--num_slots=4096", "--model_id=m", "--max_slots=8192"],
                           where, "the environment files' arguments must come last, split into words")
            deploylib.check_flags(got, "statecached@.service", failures, defined)
            runtime = one(units["statecached@.service"], "Service", "RuntimeDirectory")
            failures.check(expand_specifiers(runtime or "", "3") == "statecache/gpu3", where,
                           "RuntimeDirectory must be statecache/gpu%i (the socket's directory)")

        # The example environment file: sh-readable, only flags the daemon has.
        example = os.path.join(unit_dir, "statecached.env.example")
        proc = subprocess.run(["/bin/sh", "-c", '. "$1" && printf "%s" "$STATECACHED_ARGS"', "sh", example],
                              stdout=subprocess.PIPE, universal_newlines=True)
        if failures.check(proc.returncode == 0 and proc.stdout.strip(), example,
                          "must set STATECACHED_ARGS in sh syntax"):
            args = proc.stdout.split()
            deploylib.check_flags(args, example, failures, defined)
            for arg in args:
                name = arg[2:].split("=", 1)[0]
                failures.check(name not in ("listen", "device", "metrics_address", "shutdown_grace"),
                               example, "--%s belongs to the unit, not the environment file" % name)

        # 6: sysusers.
        sysusers = shutil.which("systemd-sysusers")
        conf = os.path.abspath(os.path.join(unit_dir, "statecache.sysusers.conf"))
        if failures.check(sysusers, conf, "systemd-sysusers not found"):
            root = os.path.join(tmp, "root")
            os.makedirs(os.path.join(root, "etc"))
            for name in ("passwd", "group", "shadow", "gshadow"):
                open(os.path.join(root, "etc", name), "w").close()
            status, output = deploylib.run([sysusers, "--root=" + root, "--dry-run", conf])
            print("systemd-sysusers --dry-run: exit %d\n%s" % (status, output.rstrip()))
            failures.check(status == 0 and "Creating user 'statecache'" in output, conf,
                           "systemd-sysusers does not accept it or creates no statecache user")
    failures.done()


if __name__ == "__main__":
    sys.exit(main())
