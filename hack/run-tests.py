#!/usr/bin/env python3
"""Runs the workspace's test binaries, and any other jobs, in parallel lanes.

Most of the suite's time is spent waiting (API servers starting, leases,
idle connections held open), so hack/test.sh runs its test binaries side by
side instead of one after another as `cargo test` does. Each binary stays
one process running its tests as libtest does, so nothing that a binary's
tests share in-process (a lock, a binary built once) is shared across
binaries, and the tests were already written for several test processes on
one machine (ports, namespaces and address slots are per process or locked
across processes).

Usage: hack/run-tests.py [--lanes N] [--list] < JOBS

JOBS has one job per line, started in the order given as a lane comes free:

    NAME [needs=JOB] [nice=N] [VAR=value ...] -- COMMAND...

where COMMAND is a program and its arguments, or `@TARGET [ARGS...]`: the
test binary of the test target TARGET (a root package's `[[test]]`, a
crate's `tests/*.rs`) with libtest's ARGS, run from its package's folder as
`cargo test` runs it. `@*` is one job for every test binary (unit tests
included) that no other `@` job of the list names, so a binary added to the
workspace runs without being named here (and one that is named runs only
as its jobs say: split by test-name filters, each half must be the other's
`--skip`s). A job with
`needs=` starts after that job passed (and fails, not run, if it did not).
Lines starting with `#` are comments.

The test binaries are built first (`cargo test --no-run`, the arguments
after --cargo-args) and the doc-tests run as a job of their own. Each job's
output is printed whole when it ends; a table of the jobs (wall and CPU
seconds, the result) is printed at the end and added to hack/lib/steps.sh's
table when HCP_STEPS is set. The exit code is 1 if any job failed.
"""

import argparse
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Job:
    name: str
    argv: list
    cwd: str | None = None
    env: dict = field(default_factory=dict)
    needs: str | None = None
    nice: int = 0
    # Filled in as it runs.
    process: subprocess.Popen | None = None
    started: float = 0.0
    result: str | None = None
    wall: float = 0.0
    cpu: float = 0.0


def die(message):
    print(f"hack/run-tests.py: {message}", file=sys.stderr)
    sys.exit(2)


def test_binaries(cargo_args):
    """Builds the test binaries; returns [(package, kind, target, path, package folder)]."""
    command = ["cargo", "test", *cargo_args, "--no-run", "--message-format=json-render-diagnostics"]
    print(f"hack/run-tests.py: {shlex.join(command)}", file=sys.stderr, flush=True)
    built = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if built.returncode != 0:
        die(f"the test build failed (exit {built.returncode})")
    binaries = []
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        binaries.append(
            (
                package_name(message["package_id"]),
                target["kind"][0],
                target["name"],
                message["executable"],
                os.path.dirname(message["manifest_path"]),
            )
        )
    return binaries


def package_name(package_id):
    """`path+file:///x/y#name@1.0` or, where the folder is the name, `…/name#1.0`."""
    url, _, fragment = package_id.partition("#")
    if "@" in fragment:
        return fragment.split("@")[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def parse_jobs(lines, binaries):
    jobs, named, wildcard = [], set(), None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if "--" not in words or words.index("--") == 0:
            die(f"job line {number}: want `NAME [options] -- COMMAND`: {line}")
        split = words.index("--")
        head, command = words[:split], words[split + 1 :]
        if not command:
            die(f"job line {number}: no command")
        job = Job(name=head[0], argv=command)
        for option in head[1:]:
            key, _, value = option.partition("=")
            if key == "needs":
                job.needs = value
            elif key == "nice":
                job.nice = int(value)
            elif value or option.endswith("="):
                job.env[key] = value
            else:
                die(f"job line {number}: unknown option {option}")
        if command[0] == "@*":
            wildcard, wildcard_at = job, len(jobs)
            continue
        if command[0].startswith("@"):
            target = command[0][1:]
            found = [b for b in binaries if b[2] == target and b[1] == "test"]
            if len(found) != 1:
                die(f"job line {number}: {len(found)} test targets named {target!r}")
            _, _, _, path, folder = found[0]
            job.argv, job.cwd = [path, *command[1:]], folder
            named.add(path)
        jobs.append(job)
    if wildcard is not None:
        position = wildcard_at
        for package, kind, target, path, folder in binaries:
            if path in named:
                continue
            name = f"{wildcard.name}: {package} {kind} {target}"
            jobs.insert(
                position,
                Job(name=name, argv=[path, *wildcard.argv[1:]], cwd=folder, env=wildcard.env, needs=wildcard.needs, nice=wildcard.nice),
            )
            position += 1
    names = [j.name for j in jobs]
    for job in jobs:
        if job.needs and job.needs not in names:
            die(f"job {job.name!r} needs {job.needs!r}, which is not in the list")
    return jobs


class Runner:
    def __init__(self, jobs, lanes):
        self.jobs, self.lanes = jobs, lanes
        self.lock = threading.Condition()
        self.pending = list(jobs)
        self.running = {}
        self.print_lock = threading.Lock()

    def next_job(self):
        """The first pending job whose need is met; marks unrunnable ones failed."""
        with self.lock:
            while True:
                if not self.pending:
                    return None
                for job in self.pending:
                    need = next((j for j in self.jobs if j.name == job.needs), None)
                    if need is None or need.result == "ok":
                        self.pending.remove(job)
                        self.running[job.name] = job
                        return job
                    if need.result is not None:
                        self.pending.remove(job)
                        job.result = f"not run: {need.name} failed"
                        self.report(job, "")
                        break
                else:
                    self.lock.wait()

    def lane(self):
        while (job := self.next_job()) is not None:
            self.run(job)
            with self.lock:
                del self.running[job.name]
                self.lock.notify_all()

    def run(self, job):
        env = {**os.environ, **job.env}
        with tempfile.TemporaryFile() as log:
            start = time.monotonic()
            job.started = time.time()
            print(f"hack/run-tests.py: start {job.name}", file=sys.stderr, flush=True)
            try:
                process = subprocess.Popen(
                    job.argv,
                    cwd=job.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=(lambda: os.nice(job.nice)) if job.nice else None,
                )
            except OSError as error:
                job.result = f"did not start: {error}"
                self.report(job, "")
                return
            job.process = process
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            job.wall = time.monotonic() - start
            job.cpu = usage.ru_utime + usage.ru_stime
            job.result = "ok" if process.returncode == 0 else f"exit {process.returncode}"
            log.seek(0)
            self.report(job, log.read().decode(errors="replace"))

    def report(self, job, output):
        with self.print_lock:
            sys.stdout.write(f"\n===== {job.name}: {job.result} ({job.wall:.0f} s, {job.cpu:.0f} s CPU)\n")
            sys.stdout.write(output)
            sys.stdout.flush()

    def start(self):
        threads = [threading.Thread(target=self.lane, daemon=True) for _ in range(self.lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=2, help="jobs running at once (2)")
    parser.add_argument("--list", action="store_true", help="build, then print the jobs without running them")
    parser.add_argument("--cargo-args", nargs=argparse.REMAINDER, default=["--workspace", "--locked"])
    args = parser.parse_args()

    lines = sys.stdin.read().splitlines()
    start, began = time.monotonic(), time.time()
    binaries = test_binaries(args.cargo_args)
    built = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    build_cpu = usage.ru_utime + usage.ru_stime
    jobs = parse_jobs(lines, binaries)
    jobs.append(Job(name="doc-tests", argv=["cargo", "test", *args.cargo_args, "--doc"]))

    if args.list:
        for job in jobs:
            needs = f" (after {job.needs})" if job.needs else ""
            env = " ".join(f"{k}=…" for k in job.env)
            print(f"{job.name}{needs}: {env + ' ' if env else ''}{shlex.join(job.argv)}")
        return
    runner = Runner(jobs, args.lanes)

    def stop(signum, _frame):
        # Each job is a process group of its own (and its tests' servers
        # with it): end those still running, then this script.
        for job in list(runner.running.values()):
            if job.process is not None:
                try:
                    os.killpg(job.process.pid, signal.SIGTERM)
                except OSError:
                    pass
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.start()

    failed = [j for j in jobs if j.result != "ok"]
    width = max(len(j.name) for j in jobs)
    print(f"\nhack/run-tests.py: {len(jobs)} jobs in {args.lanes} lanes, {time.monotonic() - start:.0f} s (the test build {built:.0f} s):", file=sys.stderr)
    for job in jobs:
        print(f"  {job.name:<{width}} {job.wall:6.0f} s {job.cpu:6.0f} s CPU  {job.result}", file=sys.stderr)
    steps = os.environ.get("HCP_STEPS")
    if steps:
        # Under the step that ran this script, by start time.
        depth = int(os.environ.get("HCP_STEP_DEPTH", "0"))
        with open(steps, "a") as table:
            table.write(f"{began:.3f}\t{depth}\tthe test build (cargo test --no-run)\t{built:.0f}\t{build_cpu:.0f}\t0\n")
            for job in jobs:
                code = 0 if job.result == "ok" else 1
                table.write(f"{job.started or began:.3f}\t{depth}\t{job.name}\t{job.wall:.0f}\t{job.cpu:.0f}\t{code}\n")
    if failed:
        print(f"hack/run-tests.py: failed: {', '.join(j.name for j in failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
