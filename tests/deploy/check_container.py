#!/usr/bin/python3
"""Parses deploy/container/Containerfile: no container engine runs here, so
this reads the recipe the way a builder would and checks what it can.

    check_container.py DEPLOY_DIR REPO [BINDIR]

- every line is a known instruction, continuation lines joined, parser
  directives only at the top; JSON (exec) form for ENTRYPOINT, CMD and
  HEALTHCHECK is valid JSON, a list of strings;
- ARG before the first FROM, stage names unique, COPY --from names an earlier
  stage, ${VARS} used in FROM are declared;
- every COPY source from the build context (the repository root) exists and
  is not excluded by Containerfile.dockerignore;
- the build stage uses the project's own dependency script (.ci/install-deps);
- the final stage runs as a non-root USER, has a HEALTHCHECK, runs
  statecached as ENTRYPOINT, exposes the metrics port, installs no compiler
  or build tool, and ENTRYPOINT and HEALTHCHECK programs are put there by a
  COPY;
- the flags in CMD exist in the daemon;
- every shell-form RUN script passes shellcheck (warnings and up), as the
  builder's /bin/sh gets it;
- where this machine runs the base image's Debian release, every package the
  recipe names is one apt knows (apt-cache show, no network), and, given the
  built statecached and statecachectl in BINDIR, the build stage's
  ldd-to-package script runs here and names only packages apt knows.
"""

import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import deploylib

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV",
                "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG",
                "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
BUILD_TOOLS = {"build-essential", "cmake", "ninja-build", "clang", "g++", "gcc",
               "make", "hipcc", "libgrpc++-dev", "protobuf-compiler"}


def logical_lines(text):
    """[(line number, instruction, arguments)] and the parser directives."""
    lines, directives, pending, start = [], {}, "", None
    seen_instruction = False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending:
            if not stripped:
                continue
            if stripped.startswith("#"):
                match = re.match(r"#\s*(\w+)\s*=\s*(.+)$", stripped)
                if match and not seen_instruction and not lines:
                    directives[match.group(1).lower()] = match.group(2).strip()
                continue
            start = number
        elif stripped.startswith("#"):
            continue  # comments inside a continued instruction are dropped
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        seen_instruction = True
        word, _, rest = full.partition(" ")
        lines.append((start, word, rest.strip()))
    if pending:
        lines.append((start, "<unterminated>", pending))
    return lines, directives


def parse_flags(args):
    """--key=value options in front of an instruction's arguments."""
    flags = {}
    while args.startswith("--"):
        word, _, args = args.partition(" ")
        key, _, value = word[2:].partition("=")
        flags[key] = value
        args = args.strip()
    return flags, args


def json_form(args):
    if not args.startswith("["):
        return None
    value = json.loads(args)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("not a JSON list of strings")
    return value


def ignore_patterns(path):
    patterns = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    patterns.append(line.rstrip("/"))
    return patterns


def ignored(source, patterns):
    parts = source.strip("/").split("/")
    for pattern in patterns:
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pattern[3:])):
                return True
    return False


def apt_unknown(packages):
    """The packages apt's lists do not offer, or None without lists to ask."""
    apt_cache = shutil.which("apt-cache")
    if not apt_cache or not glob.glob("/var/lib/apt/lists/*_Packages*"):
        return None
    _, output = deploylib.run([apt_cache, "policy"] + sorted(set(packages)))
    offered, current = set(), None
    for line in output.splitlines():
        if re.match(r"^\S+:$", line):
            current = line[:-1].split(":")[0]
        elif current and line.strip().startswith("Candidate:") and "(none)" not in line:
            offered.add(current)
    return set(packages) - offered


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    deploy, repo = sys.argv[1], sys.argv[2]
    bindir = sys.argv[3] if len(sys.argv) == 4 else None
    path = os.path.join(deploy, "container", "Containerfile")
    failures = deploylib.Failures("container recipe")
    with open(path) as f:
        lines, directives = logical_lines(f.read())
    patterns = ignore_patterns(path + ".dockerignore")
    failures.check(patterns, path + ".dockerignore",
                   "missing: the build context (repository root) would include build trees")

    global_args, stages, apt_packages = {}, [], []
    for number, word, args in lines:
        where = "%s:%d" % (os.path.basename(path), number)
        if word.upper() not in INSTRUCTIONS:
            failures.add(where, "unknown instruction %r" % word)
            continue
        if word != word.upper():
            failures.add(where, "instruction %r should be upper case" % word)
        word = word.upper()
        if not args:
            failures.add(where, "%s without arguments" % word)
            continue
        if word == "ARG" and not stages:
            name, _, default = args.partition("=")
            global_args[name] = default.strip('"')
            continue
        if word == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            if not failures.check(match, where, "cannot read FROM %r" % args):
                continue
            for var in re.findall(r"\$\{?(\w+)", match.group(1)):
                failures.check(var in global_args, where, "FROM uses undeclared ARG %s" % var)
            name = match.group(2)
            failures.check(name is None or name not in [s["name"] for s in stages], where,
                           "stage name %r used twice" % name)
            stages.append({"name": name, "image": match.group(1), "lines": [], "copied": set()})
            continue
        if not failures.check(stages, where, "%s before the first FROM" % word):
            continue
        stage = stages[-1]
        stage["lines"].append((where, word, args))
        if word == "ARG":
            name, _, default = args.partition("=")
            stage.setdefault("args", {})[name] = default.strip('"')
        if word in ("COPY", "ADD"):
            flags, rest = parse_flags(args)
            try:
                parts = json_form(rest) or rest.split()
            except ValueError as error:
                failures.add(where, "%s: %s" % (word, error))
                continue
            if not failures.check(len(parts) >= 2, where, "%s needs a source and a destination" % word):
                continue
            sources, dest = parts[:-1], parts[-1]
            if "from" in flags:
                earlier = [s["name"] for s in stages[:-1]]
                failures.check(flags["from"] in earlier, where,
                               "COPY --from=%s names no earlier stage" % flags["from"])
            else:
                for source in sources:
                    found = glob.glob(os.path.join(repo, source))
                    failures.check(found, where, "COPY source %r is not in the repository" % source)
                    failures.check(not ignored(source, patterns), where,
                                   "COPY source %r is excluded by the .dockerignore" % source)
            for source in sources:
                target = dest if not dest.endswith("/") else dest + os.path.basename(source.rstrip("/"))
                stage["copied"].add(target)
                stage["copied"].add(dest)
        if word == "SHELL":
            try:
                stage["shell"] = json_form(args)
            except ValueError as error:
                failures.add(where, "SHELL: %s" % error)
        if word == "RUN" and not args.startswith("["):
            # Shell form: the builder runs it with `sh -c` (or the stage's
            # SHELL), continuation lines joined and comments dropped, as
            # logical_lines() reads it.
            shell = (stage.get("shell") or ["/bin/sh", "-c"])[0]
            shell = {"/bin/sh": "sh", "/bin/bash": "bash", "/bin/dash": "dash"}.get(shell)
            if failures.check(shell, where, "RUN under a SHELL shellcheck cannot read"):
                deploylib.check_shell(args, shell, where + ": RUN", failures)
        if word == "RUN":
            known = dict(global_args, **stage.get("args", {}))
            expanded = re.sub(r"\$\{(\w+)\}", lambda m: known.get(m.group(1), m.group(0)), args)
            for match in re.finditer(r"apt-get install((?:\s+-\S+)*)\s+([^&;|]+)", expanded):
                for package in match.group(2).split():
                    if re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", package):
                        apt_packages.append((where, package, stage))
        if word in ("CMD", "ENTRYPOINT"):
            try:
                failures.check(json_form(args) is not None, where,
                               "%s in shell form: signals would go to /bin/sh, not the daemon" % word)
            except ValueError as error:
                failures.add(where, "%s: %s" % (word, error))
        if word == "HEALTHCHECK":
            flags, rest = parse_flags(args)
            for key, value in flags.items():
                failures.check(key in ("interval", "timeout", "start-period", "start-interval", "retries"),
                               where, "unknown HEALTHCHECK option --%s" % key)
            if rest.upper() != "NONE":
                failures.check(rest.startswith("CMD "), where, "HEALTHCHECK needs CMD")
                try:
                    failures.check(json_form(rest[4:].strip()) is not None, where,
                                   "HEALTHCHECK CMD should be in JSON form")
                except ValueError as error:
                    failures.add(where, "HEALTHCHECK: %s" % error)

    if not failures.check(len(stages) >= 2, path, "want a multi-stage build (build, runtime)"):
        failures.done()
    build, final = stages[0], stages[-1]
    failures.check(any(w == "RUN" and ".ci/install-deps" in a for _, w, a in build["lines"]), path,
                   "the build stage must install the project's own dependencies (.ci/install-deps)")
    # Everything the top-level CMakeLists.txt configures must be in the build
    # stage's tree: copied, and not excluded from the context.
    copied = []
    for _, word, args in build["lines"]:
        if word in ("COPY", "ADD"):
            flags, rest = parse_flags(args)
            if "from" not in flags:
                parts = json_form(rest) if rest.startswith("[") else rest.split()
                copied.extend(p.strip("./") or "." for p in parts[:-1])
    with open(os.path.join(repo, "CMakeLists.txt")) as f:
        cmake = f.read()
    needed = {"CMakeLists.txt"}
    needed.update(re.findall(r"^\s*add_subdirectory\(\s*([^\s)]+)", cmake, re.M))
    needed.update(re.findall(r"^\s*include\(\s*([^\s)$]+/[^\s)]+)", cmake, re.M))
    for item in sorted(needed):
        covered = any(c == "." or item == c or item.startswith(c + "/") for c in copied)
        failures.check(covered, path, "the build stage does not copy %s, which CMakeLists.txt needs" % item)
        failures.check(not ignored(item, patterns), path,
                       "%s, which CMakeLists.txt needs, is excluded by the .dockerignore" % item)

    def last(word):
        found = [(where, a) for where, w, a in final["lines"] if w == word]
        return found[-1] if found else (path, None)

    where, user = last("USER")
    failures.check(user and user.split(":")[0] not in ("root", "0"), where,
                   "the final stage must run as a non-root USER")
    where, health = last("HEALTHCHECK")
    failures.check(health, path, "the final stage has no HEALTHCHECK")
    where, entrypoint = last("ENTRYPOINT")
    entry = json_form(entrypoint) if entrypoint and entrypoint.startswith("[") else None
    if failures.check(entry and entry[0].endswith("/statecached"), where,
                      "ENTRYPOINT must run statecached"):
        failures.check(entry[0] in final["copied"] or os.path.dirname(entry[0]) + "/" in final["copied"],
                       where, "nothing COPYs %s into the final stage" % entry[0])
    if health:
        program = json_form(parse_flags(health)[1][4:].strip())[0]
        failures.check(program in final["copied"] or os.path.dirname(program) + "/" in final["copied"],
                       where, "nothing COPYs the health check program %s" % program)
    where, cmd = last("CMD")
    if cmd and cmd.startswith("["):
        deploylib.check_flags(json_form(cmd), where, failures, deploylib.daemon_flags(repo))
    where, expose = last("EXPOSE")
    failures.check(expose and "9400" in expose.split(), where, "the metrics port 9400 is not EXPOSEd")
    for where, package, stage in apt_packages:
        if stage is final:
            failures.check(package not in BUILD_TOOLS, where,
                           "the runtime stage installs the build tool %s" % package)

    # Package names, where this machine is the base image's release.
    base = global_args.get("BASE_IMAGE", "")
    codename = ""
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            match = re.search(r"^VERSION_CODENAME=(\w+)", f.read(), re.M)
            codename = match.group(1) if match else ""
    unknown = apt_unknown([p for _, p, _ in apt_packages]) if base.endswith(":" + codename) else None
    if codename and unknown is not None:
        for where, package, _ in apt_packages:
            failures.check(package not in unknown, where, "apt does not know the package %s" % package)
        print("checked %d apt package names against this machine's %s archive" % (
            len(apt_packages), codename))
        # The build stage's ldd -> dpkg script, run on this build's programs.
        owners = [(w, a) for w, word, a in build["lines"] if word == "RUN" and "dpkg -S" in a]
        programs = [os.path.join(bindir or "", p) for p in ("statecached", "statecachectl")]
        if bindir and all(os.access(p, os.X_OK) for p in programs) and failures.check(
                owners, path, "no RUN finds the runtime packages with dpkg -S"):
            where, script = owners[0]
            with tempfile.TemporaryDirectory() as tmp:
                script = (script.replace("/tmp/", tmp + "/")
                          .replace("/out/usr/local/bin/", os.path.abspath(bindir) + "/")
                          .replace("/out/runtime-packages.txt", tmp + "/packages.txt"))
                proc = subprocess.run(["/bin/sh", "-c", script], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, universal_newlines=True)
                packages = proc.stdout.split()
                if failures.check(proc.returncode == 0 and packages, where,
                                  "the runtime-package script fails here:\n" + proc.stdout):
                    print("runtime packages for this build: " + " ".join(packages))
                    for package in sorted(apt_unknown(packages)):
                        failures.add(where, "apt does not know %s" % package)
        elif not bindir:
            failures.note("no built programs given: the runtime-package script was not run")
    else:
        failures.note("package names not checked: this machine is not the base image's "
                      "release (%s vs %s) or has no apt lists" % (codename or "unknown", base))
    failures.done("%d instructions, %d stages" % (len(lines), len(stages)))


if __name__ == "__main__":
    sys.exit(main())
