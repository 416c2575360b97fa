"""The server hook's cost for one small push: CPU of ``python -m gitwork.hookcheck pre-receive``.

    python benchmarks/bench_hook_start.py [--rounds 30] [--tree OTHER_CHECKOUT ...]

A real bare arbiter with gitwork's server hooks and a clone driven by ``gw``. Three pushes are recorded
as git hands them to the hook (its stdin) and then replayed against the arbiter as it was before each:
``claim`` (one state commit of a CAS arbiter, derived and accepted), ``forged`` (that commit with another
author: derived and refused, one line, exit 1) and ``inbox`` (one request of a batch arbiter, checked and
accepted); and ``python -m gitwork.statecheck`` on the whole history before the claim (the tests' ``assert_sound``).
Each round runs, interleaved, the floors ``python -S -c pass`` and ``python -c pass`` and the
hook under every tree given (this one first; ``--tree`` adds another checkout, e.g. main, for an A/B
at the same load). Printed per case: the median CPU (user + system of the process and every git it
ran, by ``wait4``) and wall time. Asserts nothing about speed (the machine is shared); it does check
that every tree gives the same exit code and stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
STATE = "refs/gitwork/state"


def git(cwd: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, input=data)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.decode()}")
    return done.stdout.decode().strip()


def gw(clone: Path, *args: str) -> str:
    done = subprocess.run([PY, "-m", "gitwork", *args], cwd=clone, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"gw {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def world(base: Path, batch: bool) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT))
    from gitwork.hooks_install import install_server

    base.mkdir(parents=True)
    bare = base / "arbiter.git"
    git(base, "init", "-q", "--bare", str(bare))
    install_server(str(bare))
    hook = bare / "hooks" / "pre-receive"
    # Record each push's hook input (what git hands the hook) for the replay.
    text = hook.read_text().replace("input=$(cat)\n", 'input=$(cat)\nprintf \'%s\\n\' "$input" > "$GIT_DIR/last-input"\n', 1)
    hook.write_text(text)
    clone = base / "clone"
    git(base, "init", "-q", str(clone))
    for key, value in (("user.name", "alice"), ("user.email", "alice@example.com"), ("gitwork.agent", "alice")):
        git(clone, "config", key, value)
    if batch:
        git(bare, "config", "gitwork.arbiter", "batch")
        git(clone, "config", "gitwork.arbiter", "batch")
    git(clone, "commit", "-q", "--allow-empty", "-m", "root")
    git(clone, "remote", "add", "origin", str(bare))
    gw(clone, "init", "--remote", "origin")
    return bare, clone


def quarantine(bare: Path, name: str, tips: list[str], exclude: list[str]) -> tuple[Path, set[str]]:
    """A copy of the objects a push of ``tips`` brings (those ``exclude`` does not reach), in a folder
    of their own as git's receive-pack keeps them until the hook accepts: the hook then sees them through
    GIT_OBJECT_DIRECTORY and the repository's own objects as an alternate."""
    folder = bare / "objects" / f"incoming-{name}"
    oids = {line.split()[0] for line in git(bare, "rev-list", "--objects", *tips, "--not", *exclude).splitlines()}
    for oid in oids:
        (folder / oid[:2]).mkdir(parents=True, exist_ok=True)
        shutil.copy2(bare / "objects" / oid[:2] / oid[2:], folder / oid[:2] / oid[2:])
    return folder, oids


def cases(base: Path) -> dict[str, tuple[Path, bytes, Path]]:
    """name -> (arbiter, hook input, quarantine folder), each arbiter left as it was before that push."""
    bare, clone = world(base / "cas", batch=False)
    item = gw(clone, "new", "one").split()[0]
    gw(clone, "sync")
    old = git(bare, "rev-parse", STATE)
    gw(clone, "claim", item)
    new = git(bare, "rev-parse", STATE)
    git(bare, "update-ref", STATE, old, new)  # the arbiter as before the claim
    raw = git(bare, "cat-file", "commit", new)
    lines = raw.split("\n")
    lines = [("author Mallory <m@example.com>" + line[line.rindex(">") + 1:]) if line.startswith("author ") else line
             for line in lines]
    forged = git(bare, "hash-object", "-t", "commit", "-w", "--stdin", data=("\n".join(lines) + "\n").encode())
    q_claim, pushed = quarantine(bare, "claim", [new], [old])
    q_forged, pushed_forged = quarantine(bare, "forged", [forged], [old])
    for oid in pushed | pushed_forged:  # in the quarantine only, as during a real push
        (bare / "objects" / oid[:2] / oid[2:]).unlink()
    out = {"claim": (bare, f"{old} {new} {STATE}\n".encode(), q_claim),
           "forged": (bare, f"{old} {forged} {STATE}\n".encode(), q_forged)}
    bare_b, clone_b = world(base / "batch", batch=True)
    item_b = gw(clone_b, "new", "one").split()[0]
    gw(clone_b, "sync")
    gw(clone_b, "claim", item_b)
    data = (bare_b / "last-input").read_bytes()
    request = data.split()[1].decode()
    q_inbox = bare_b / "objects" / "incoming-inbox"
    (q_inbox / request[:2]).mkdir(parents=True)
    os.replace(bare_b / "objects" / request[:2] / request[2:], q_inbox / request[:2] / request[2:])
    out["inbox"] = (bare_b, data, q_inbox)
    return out


def measure(argv: list[str], cwd: Path, data: bytes, env: dict[str, str]) -> tuple[float, float, int, bytes]:
    """(CPU s, wall s, exit code, stderr) of one run, CPU by wait4 (the process and what it waited for)."""
    r, w = os.pipe()
    e_r, e_w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.chdir(cwd)
        os.dup2(r, 0)
        os.dup2(e_w, 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        for fd in (r, w, e_r, e_w, devnull):
            os.close(fd)
        os.execve(argv[0], argv, env)
    os.close(r)
    os.close(e_w)
    os.write(w, data)
    os.close(w)
    err = b""
    while chunk := os.read(e_r, 65536):
        err += chunk
    os.close(e_r)
    _pid, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return usage.ru_utime + usage.ru_stime, wall, os.waitstatus_to_exitcode(status), err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tree", action="append", default=[], help="another checkout of gitwork to compare")
    args = parser.parse_args()
    trees = [("this", ROOT)] + [(Path(t).name, Path(t).resolve()) for t in args.tree]
    base = Path(tempfile.mkdtemp(prefix="gw-hookstart-"))
    try:
        recorded = cases(base)
        # Bytecode written and used, as an installed gitwork has it (PYTHONDONTWRITEBYTECODE would
        # make every run compile its modules again: ~150 ms, more than everything measured here).
        env0 = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"))}
        runs: list[tuple[str, list[str], Path, bytes, dict[str, str]]] = [
            ("floor python -S -c pass", [PY, "-S", "-c", "pass"], base, b"", env0),
            ("floor python -c pass", [PY, "-c", "pass"], base, b"", env0),
        ]
        for case, (bare, data, incoming) in recorded.items():
            for name, tree in trees:
                # As git runs the hook in a bare repository: GIT_DIR set, the cwd the repository, the
                # pushed objects in quarantine.
                env = {**env0, "PYTHONPATH": str(tree), "GIT_DIR": ".", "GIT_QUARANTINE_PATH": str(incoming),
                       "GIT_OBJECT_DIRECTORY": str(incoming), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(bare / "objects")}
                runs.append((f"{case} [{name}]", [PY, "-m", "gitwork.hookcheck", "pre-receive"], bare, data, env))
        bare, data, incoming = recorded["claim"]
        whole = f"{'0' * 40} {data.split()[0].decode()} {STATE}\n".encode()
        for name, tree in trees:
            # The tests' assert_sound: the whole history checked as if pushed from nothing.
            env = {**env0, "PYTHONPATH": str(tree), "GIT_DIR": str(bare), "GW_NOW": "2100-01-01T00:00:00Z"}
            runs.append((f"statecheck [{name}]", [PY, "-m", "gitwork.statecheck"], bare, whole, env))
        results: dict[str, list[tuple[float, float]]] = {label: [] for label, *_ in runs}
        outcome: dict[str, tuple[int, bytes]] = {}
        load = os.getloadavg()[0]
        for round_ in range(args.rounds + 1):
            for label, argv, cwd, data, env in runs:
                cpu, wall, code, err = measure(argv, cwd, data, env)
                if round_ == 0:
                    continue  # the warm-up: writes the bytecode
                results[label].append((cpu, wall))
                case = label.split(" [")[0]
                if not label.startswith("floor"):
                    seen = outcome.setdefault(case, (code, err))
                    if seen != (code, err):
                        raise SystemExit(f"{label}: exit {code} {err!r}, another tree gave {seen}")
        print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {args.rounds} rounds, load {load:.2f} -> "
              f"{os.getloadavg()[0]:.2f}")
        for label, values in results.items():
            cpu = statistics.median(v[0] for v in values) * 1000
            wall = statistics.median(v[1] for v in values) * 1000
            code = outcome.get(label.split(" [")[0], (0, b""))[0]
            print(f"{label:34} CPU {cpu:6.1f} ms  wall {wall:6.1f} ms  exit {code}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
