"""Conversations: posts per second, replay of a 100,000-message thread, ``gw inbox`` over 10,000 items.

    python benchmarks/bench_messages.py [--quick] [--runs N] [--no-wait] [--reinstall]

- **Posts.** In-process ``Workplane.do("msg")`` to a fresh thread and to the end of the 100,000-message
  thread (segmenting should keep the two alike), 4 processes posting to one thread at once (posts per
  second, all landed), ``gw msg`` start-to-exit next to ``python -c pass``, and repository growth per
  1,000 posts (loose objects) on the small and on the large thread.
- **Replay.** A 100,000-message thread built through the library (segments written by
  ``codec.encode_record`` at ``thread.segment_path``, one commit via ``Store.write_commit``):
  ``thread.replay`` in-process, ``gw thread ID --json`` and ``gw thread ID --since N`` (the last 10).
- **Inbox.** 10,000 items with 10 messages each (one commit): about 1 in 50 messages is addressed to
  the reader, who also holds 1 item in 50; a tenth of the items (the held ones among them) carry the
  reader's cursors (read 7, responded 2). ``gw inbox --json``
  cold (the read caches deleted before every run), warm (cache at this commit), and after one post
  (cache one commit behind: the incremental path).
Results: stdout (markdown tables of medians) and benchmarks/results/bench_messages.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

READER = "bench-human"
TTL_FAR = "2099-01-01T00:00:00Z"


# --- building states through the library ------------------------------------------------------------


def _commit(repo: Path, changes: dict[str, bytes | None], message: str) -> str:
    """One commit on top of the current tip, written through the library; the ref moves by CAS."""
    from gitwork.store import Repository, Store, identity_signature

    store = Store(Repository.discover(str(repo)))
    try:
        base = store.snapshot()
        commit = store.write_commit(base, changes, message, identity_signature(c.AGENT), int(time.time()))
        if not store.set_if_equals(base.commit, commit):
            raise RuntimeError("the ref moved while building")
        return commit
    finally:
        store.close()


def _records(item_id: str, count: int, *, start: int = 1, to_seqs: frozenset[int] = frozenset(),
             when: str) -> dict[str, bytes]:
    """``count`` messages from ``start`` as segment files (path → bytes)."""
    from gitwork import codec
    from gitwork import thread as messages

    out: dict[str, bytearray] = {}
    kinds = ("note", "question", "answer", "note", "note")
    for seq in range(start, start + count):
        record = {"seq": seq, "id": f"b-{item_id[2:10]}-{seq:07d}", "at": when, "by": f"peer{seq % 5}",
                  "kind": kinds[seq % 5], "epoch": 0}
        if seq in to_seqs:
            record["to"] = READER
        record["text"] = f"message {seq} about {item_id}: the frobnicator needs {seq % 97} more tests"
        out.setdefault(messages.segment_path(item_id, seq), bytearray()).extend(codec.encode_record(record))
    return {path: bytes(data) for path, data in out.items()}


def build_long_thread(repo: Path, count: int) -> dict[str, object]:
    """An item whose thread holds ``count`` messages, in one commit on top of a 100-item state."""
    state = c.build_state(repo, 100, realistic=False)
    item = state["claimable"][0]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    changes = _records(item, count, when=when)
    commit = _commit(repo, dict(changes), f"benchmark thread: {count} messages\n")
    return {"item": item, "commit": commit, "messages": count, "segments": len(changes),
            "build_s": time.perf_counter() - t0}


def build_inbox_state(repo: Path, items: int, per_item: int) -> dict[str, object]:
    """``items`` items with ``per_item`` messages each; the reader holds 1 in 50 and has cursors on 1 in 10."""
    from gitwork import codec, layout
    from gitwork import thread as messages
    from gitwork.model import Lease

    state = c.build_state(repo, items, realistic=False)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    changes: dict[str, bytes | None] = {}
    held = 0
    for i, item in enumerate(state["ids"]):
        addressed = frozenset(seq for seq in range(1, per_item + 1) if (i * per_item + seq) % 50 == 0)
        changes.update(_records(item, per_item, to_seqs=addressed, when=when))
        if i % 50 == 0:
            held += 1
            lease = Lease(item=item, epoch=0, fence=i + 1, holder=READER, state="active", granted_at=when,
                          expires_at=TTL_FAR, ttl=900)
            changes[layout.item_path(item, layout.LEASE_FILE)] = codec.dump_yaml(lease.to_doc())
        if i % 10 == 0:
            changes[messages.cursors_path(item)] = messages.dump_cursors({READER: {"read": 7, "responded": 2}})
    commit = _commit(repo, changes, f"benchmark inbox: {items} items x {per_item} messages\n")
    return {"commit": commit, "items": items, "per_item": per_item, "held": held,
            "build_s": time.perf_counter() - t0 + float(state["total_s"]), "ids": state["ids"]}


# --- measurements -----------------------------------------------------------------------------------


def posts_in_process(repo: Path, item: str, count: int) -> dict[str, float]:
    from gitwork.workplane import Workplane

    c.BUSY_SEEN.append(c.wait_quiet())
    objects = c.common_dir(repo) / "objects"
    with Workplane(str(repo), agent="poster") as wp:
        t0 = time.perf_counter()
        wp.post(item, "the first post (cold caches)", epoch=0)
        first = time.perf_counter() - t0
        times = []
        kib = c.du_kib(objects, apparent=True)
        cpu0 = c.cpu_now()
        for n in range(count):
            t0 = time.perf_counter()
            wp.do("msg", item=item, text=f"post {n}: status update, all green", epoch=0)
            times.append(time.perf_counter() - t0)
        cpu = c.cpu_now() - cpu0
        grown = c.du_kib(objects, apparent=True) - kib
    return {"first_post_ms": first * 1000, "median_ms": statistics.median(times) * 1000,
            "posts_per_s": count / sum(times), "cpu_ms_per_post": cpu * 1000 / count,
            "kib_per_1000_posts": grown * 1000 / count, "posts": count}


WRITER = r"""
import sys, time
from gitwork.workplane import Workplane
repo, item, who, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
wp = Workplane(repo, agent=who)
wp.do("msg", item=item, text="warm-up", epoch=0)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
for n in range(count):
    wp.do("msg", item=item, text=f"{who} post {n}", epoch=0)
print(time.perf_counter() - t0, flush=True)
"""


def posts_contended(repo: Path, item: str, procs: int, count: int) -> dict[str, float]:
    from gitwork import thread as messages
    from gitwork.workplane import Workplane

    c.BUSY_SEEN.append(c.wait_quiet())
    with Workplane(str(repo)) as wp:
        before = messages.last_seq(wp.store.snapshot(), wp.resolve(item))
    children = [subprocess.Popen([str(c.venv_python()), "-c", WRITER, str(repo), item, f"w{k}", str(count)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=c.child_env())
                for k in range(procs)]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        child.communicate(timeout=600)
        if child.returncode != 0:
            raise RuntimeError("a contended writer failed")
    wall = time.perf_counter() - t0
    with Workplane(str(repo)) as wp:
        after = messages.last_seq(wp.store.snapshot(), wp.resolve(item))
    landed = after - before - procs  # minus the warm-up posts
    return {"processes": procs, "posts": procs * count, "landed": landed, "wall_s": wall,
            "posts_per_s": procs * count / wall}


def replay_in_process(repo: Path, item: str, runs: int) -> dict[str, float]:
    from gitwork import thread as messages
    from gitwork.workplane import Workplane

    c.BUSY_SEEN.append(c.wait_quiet())
    full, tail = [], []
    count = 0
    for _ in range(runs):
        with Workplane(str(repo)) as wp:  # a fresh store each run: no blobs cached in memory
            snapshot = wp.store.snapshot()
            t0 = time.perf_counter()
            count = sum(1 for _ in messages.replay(snapshot, item, 0))
            full.append(time.perf_counter() - t0)
        with Workplane(str(repo)) as wp:
            snapshot = wp.store.snapshot()
            t0 = time.perf_counter()
            last = sum(1 for _ in messages.replay(snapshot, item, count - 10))
            tail.append(time.perf_counter() - t0)
    return {"messages": count, "full_median_ms": statistics.median(full) * 1000,
            "messages_per_s": count / statistics.median(full), "tail10_median_ms": statistics.median(tail) * 1000,
            "tail_messages": last}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000-message thread, 1,000 inbox items, few runs")
    parser.add_argument("--runs", type=int, help="runs per CLI case (default 15, quick 5)")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine before timing")
    parser.add_argument("--reinstall", action="store_true", help="reinstall gitwork into the bench venv")
    args = parser.parse_args(argv)
    c.QUIET["enabled"] = not args.no_wait
    runs = args.runs or (5 if args.quick else 15)
    thread_size = 10_000 if args.quick else 100_000
    inbox_items = 1_000 if args.quick else 10_000
    posts = 60 if args.quick else 300
    info = c.machine()
    c.log(f"machine: {info}")
    gw, py = str(c.venv_gw()), str(c.venv_python())
    results: dict[str, object] = {"machine": info}

    # --- posts ----------------------------------------------------------------------------------
    root = c.scratch("messages")
    small = c.make_repo(root / "small")
    c.build_state(small, 100, realistic=False)
    with subprocess.Popen([gw, "new", "a small thread"], cwd=small, env=c.child_env(),
                          stdout=subprocess.PIPE, text=True) as proc:
        small_item = (proc.stdout.read() if proc.stdout else "").strip()
    c.log(f"in-process posts to a fresh thread ({posts})")
    results["posts_small"] = posts_in_process(small, small_item, posts)

    big = c.make_repo(root / "big")
    c.BUSY_SEEN.append(c.wait_quiet())
    c.log(f"building a {thread_size}-message thread in one commit ...")
    long = build_long_thread(big, thread_size)
    c.log(f"built {long['messages']} messages in {long['segments']} segments in {long['build_s']:.1f}s")
    results["long_thread"] = {k: v for k, v in long.items() if k != "commit"}
    big_item, big_base = str(long["item"]), str(long["commit"])
    c.log("replay in-process")
    results["replay_in_process"] = replay_in_process(big, big_item, max(3, runs // 3))
    c.log("CLI: gw thread (full and tail), gw msg")
    cli = c.measure([
        c.Case(f"gw thread ID --json ({thread_size} messages)", [gw, "thread", big_item, "--json"]),
        c.Case("gw thread ID --since N-10 --json", [gw, "thread", big_item, "--since", str(thread_size - 10),
                                                    "--json"]),
    ], big, runs=max(3, runs // 3), warmup=1)
    cli.update(c.measure([
        c.Case(f"gw msg ID TEXT (thread of {thread_size})", [gw, "msg", big_item, "status: green", "--epoch", "0"],
               prepare=["git", "update-ref", c.REF, big_base]),
        c.Case("gw msg ID TEXT (short thread)", [gw, "msg", "-C", str(small), small_item, "status: green",
                                                 "--epoch", "0"]),
        c.Case("floor: python -c pass", [py, "-c", "pass"]),
    ], big, runs=runs, warmup=2))
    results["cli"] = cli
    c.git(big, "update-ref", c.REF, big_base)
    c.log(f"in-process posts at the end of the {thread_size}-message thread ({posts})")
    results["posts_large"] = posts_in_process(big, big_item, posts)
    c.log("4 processes posting to one thread at once")
    results["posts_contended"] = posts_contended(small, small_item, 4, 25 if args.quick else 50)

    # --- inbox ----------------------------------------------------------------------------------
    repo = c.make_repo(root / "inbox")
    c.BUSY_SEEN.append(c.wait_quiet())
    c.log(f"building {inbox_items} items x 10 messages in two commits ...")
    inbox_state = build_inbox_state(repo, inbox_items, 10)
    c.log(f"built in {inbox_state['build_s']:.1f}s")
    base = str(inbox_state["commit"])
    gitwork_dir = c.common_dir(repo) / "gitwork"
    drop = ["bash", "-c", f"rm -f {gitwork_dir}/*.marshal"]
    inbox_argv = [gw, "inbox", "--as", READER, "--json"]
    subprocess.run(inbox_argv, cwd=repo, env=c.child_env(), capture_output=True, check=True)  # caches at base
    saved = root / "inbox-cache-at-base"
    saved.mkdir()
    for path in gitwork_dir.glob("*.marshal"):
        shutil.copy(path, saved / path.name)
    box = json.loads(subprocess.run(inbox_argv, cwd=repo, env=c.child_env(), capture_output=True,
                                    check=True).stdout)
    # One more post: the cache is one commit behind, the incremental path.
    subprocess.run([gw, "msg", str(inbox_state["ids"][7]), "one more", "--to", READER, "--epoch", "0"], cwd=repo,
                   env=c.child_env(), capture_output=True, check=True)
    after_post = c.tip(repo)
    restore = ["bash", "-c", f"cp {saved}/*.marshal {gitwork_dir}/ && git update-ref {c.REF} {after_post}"]
    c.log("gw inbox cold / warm / one post after the cache")
    inbox = c.measure([
        c.Case(f"gw inbox --json cold ({inbox_items} items)", inbox_argv, prepare=drop),
        c.Case("gw inbox --json after one post (incremental)", inbox_argv, prepare=restore),
    ], repo, runs=max(3, runs // 3), warmup=1)
    c.git(repo, "update-ref", c.REF, base)
    subprocess.run(inbox_argv, cwd=repo, env=c.child_env(), capture_output=True, check=True)
    inbox.update(c.measure([
        c.Case("gw inbox --json warm", inbox_argv),
        c.Case("floor: python -c pass", [py, "-c", "pass"]),
    ], repo, runs=runs, warmup=2))
    results["inbox"] = {"state": {k: v for k, v in inbox_state.items() if k not in ("ids", "commit")},
                        "unread": len(box["unread"]), "unanswered": len(box["unanswered"]), "timings": inbox}
    info["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    info["max_busy_before_a_measurement"] = max(c.BUSY_SEEN) if c.BUSY_SEEN else None
    c.save("bench_messages" + ("-quick" if args.quick else ""), results)

    ps, pl, pc = results["posts_small"], results["posts_large"], results["posts_contended"]
    print("## Posts (medians)\n")
    print(c.markdown(("case", "median ms/post", "posts/s", "CPU ms/post", "KiB per 1,000 posts (loose)"), [
        ("in-process, fresh thread", ps["median_ms"], ps["posts_per_s"], ps["cpu_ms_per_post"],  # type: ignore[index]
         ps["kib_per_1000_posts"]),  # type: ignore[index]
        (f"in-process, end of a {thread_size}-message thread", pl["median_ms"], pl["posts_per_s"],  # type: ignore[index]
         pl["cpu_ms_per_post"], pl["kib_per_1000_posts"]),  # type: ignore[index]
        (f"{pc['processes']} processes at once, one thread ({pc['landed']}/{pc['posts']} landed)",  # type: ignore[index]
         None, pc["posts_per_s"], None, None),  # type: ignore[index]
    ]))
    rp = results["replay_in_process"]
    print(f"\n## Replay of a {thread_size}-message thread ({long['segments']} segments; built in "
          f"{long['build_s']:.1f}s)\n")
    rows = [("in-process messages.replay, whole thread", rp["full_median_ms"], None),  # type: ignore[index]
            ("in-process messages.replay, last 10", rp["tail10_median_ms"], None)]  # type: ignore[index]
    rows += [(name, r["median_ms"], r.get("cpu_ms")) for name, r in cli.items()]
    print(c.markdown(("case", "median ms", "CPU ms"), rows))
    print(f"\n## gw inbox over {inbox_items} items x 10 messages ({box and len(box['unread'])} unread, "
          f"{len(box['unanswered'])} unanswered for {READER})\n")
    print(c.markdown(("case", "median ms", "min ms", "CPU ms", "runs"),
                     [(name, r["median_ms"], r["min_ms"], r.get("cpu_ms"), r["runs"]) for name, r in inbox.items()]))
    return 0


if __name__ == "__main__":
    c.enter_venv(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
