"""Render the summary table of docs/performance.md from benchmarks/results/*.json.

    python benchmarks/report.py [--quick]

Reads bench_cli.json, bench_scale.json and bench_contention.json (the ``-quick`` ones with
``--quick``) and prints one markdown table: every figure, its floor measured in the same run, the
target from the issue and whether it is met. Runs under any Python 3.10+ (no gitwork import).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def load(name: str, quick: bool) -> dict[str, Any] | None:
    path = RESULTS / f"{name}{'-quick' if quick else ''}.json"
    return json.loads(path.read_text()) if path.exists() else None


def ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def verdict(value: float | None, limit: float) -> str:
    if value is None:
        return ""
    return "met" if value <= limit else f"**missed** ({value / limit:.2f}x)"


def rows(cli: dict[str, Any] | None, scale: dict[str, Any] | None, cont: dict[str, Any] | None) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    if cli:
        s = cli["startup"]
        med = lambda k: s[k]["median_ms"] if k in s else None  # noqa: E731
        cpu = lambda k: s[k].get("cpu_ms") if k in s else None  # noqa: E731
        out += [
            ("`python -c pass` (interpreter floor)", ms(med("python -c pass")), "", "", ""),
            ("`gw --version`", ms(med("gw --version")), ms(med("python -c pass")) + " (python -c pass)", "", ""),
            ("`gw claim ID` (100 items)", f"{ms(med('gw claim ID'))} (CPU {ms(cpu('gw claim ID'))})",
             f"{ms(med('floor claim (git plumbing)'))} (CPU {ms(cpu('floor claim (git plumbing)'))})", "≤ 100 ms",
             verdict(med("gw claim ID"), 100)),
            ("`gw release ID` (100 items)", ms(med("gw release ID")), ms(med("floor release (git plumbing)")), "", ""),
            ("`gw claim ID`, PYTHONDONTWRITEBYTECODE=1", ms(med("gw claim ID [PYTHONDONTWRITEBYTECODE=1]")),
             ms(med("floor claim (git plumbing)")), "≤ 100 ms", verdict(med("gw claim ID [PYTHONDONTWRITEBYTECODE=1]"), 100)),
        ]
        ip = cli["in_process"]
        out += [
            ("in-process commands/s (Workplane.do claim+release)", f"{ip['commands_per_s']:.0f}/s",
             f"{ip['floor_commands_per_s']:.1f}/s (floor.sh loop)", "", ""),
            ("in-process claim / release, median", f"{ms(ip['claim_median_ms'])} / {ms(ip['release_median_ms'])}",
             f"{ms(ip['floor_claim_median_ms'])} / {ms(ip['floor_release_median_ms'])}; one `git update-ref`: "
             f"{ms(ip['update_ref_median_ms'])}", "", ""),
        ]
    if scale:
        sizes = {int(k): v for k, v in scale["sizes"].items()}
        smallest = sizes[min(sizes)]
        for n, e in sizes.items():
            ratio = e["cli"]["gw claim ID"]["median_ms"] / smallest["cli"]["gw claim ID"]["median_ms"]
            ip_ratio = e["in_process"]["claim_median_ms"] / smallest["in_process"]["claim_median_ms"]
            target = "≤ 1.5x the 100-item cost" if n != min(sizes) else ""
            out.append((f"per command at {n:,} items: `gw claim` / in-process claim",
                        f"{ms(e['cli']['gw claim ID']['median_ms'])} / {ms(e['in_process']['claim_median_ms'])}"
                        + (f" ({ratio:.2f}x / {ip_ratio:.2f}x)" if n != min(sizes) else ""),
                        ms(e["cli"]["floor claim"]["median_ms"]), target,
                        verdict(max(ratio, ip_ratio), 1.5) if target else ""))
        for n, e in sizes.items():
            for key, tag in (("reads", ""), ("reads_packed", " (packed)")):
                r = e.get(key)
                if not r:
                    continue
                limit = 300 if n <= 10_000 else 1000
                floor_cold = r.get(f"floor: read every item.yaml (ls-tree -r, cat-file --batch){tag}", {}).get("median_ms")
                floor_warm = r.get(f"floor: python -c pass{tag}", {}).get("median_ms")
                for cmd in ("ready", "list"):
                    warm = r[f"gw {cmd} warm{tag}"]["median_ms"]
                    cold = r[f"gw {cmd} cold{tag}"]["median_ms"]
                    tgt = f"≤ {ms(limit)}" if cmd == "ready" else ""
                    out.append((f"`gw {cmd}` at {n:,} items{tag}, warm", ms(warm), ms(floor_warm) + " (python -c pass)",
                                tgt, verdict(warm, limit) if tgt else ""))
                    out.append((f"`gw {cmd}` at {n:,} items{tag}, cold (no cache)", ms(cold),
                                ms(floor_cold) + " (read every item.yaml)", tgt, verdict(cold, limit) if tgt else ""))
        for h, e in (scale.get("history") or {}).items():
            out.append((f"per command after {int(h):,} earlier commands: `gw claim` / in-process claim",
                        f"{ms(e['cli']['gw claim ID']['median_ms'])} / {ms(e['in_process']['claim_median_ms'])}",
                        ms(e["cli"]["floor claim"]["median_ms"]), "", ""))
    if cont:
        r = cont["results"]
        procs = cont["procs"]
        gw8 = r.get(f"gw claim --next x{procs} processes")
        gw1 = r.get("gw claim --next x1 process")
        fl8 = r.get(f"floor.sh claim x{procs} processes")
        fl1 = r.get("floor.sh claim x1 process")
        if gw8 and fl8:
            out.append((f"{procs}-process contended `gw claim --next`, {cont['items']} items",
                        f"{gw8['median_claims_per_s']:.1f} claims/s ({ms(gw8['median_ms_per_claim'])}/claim)",
                        f"{fl8['median_claims_per_s']:.1f} claims/s (floor.sh x{procs})", "", ""))
        if gw1 and fl1:
            out.append(("same, one process (no contention)",
                        f"{gw1['median_claims_per_s']:.1f} claims/s ({ms(gw1['median_ms_per_claim'])}/claim)",
                        f"{fl1['median_claims_per_s']:.1f} claims/s (floor.sh x1)", "", ""))
    if cli:
        g = cli["growth"]
        out.append(("growth per 1,000 renewals: loose (disk / apparent)",
                    f"{g['loose_du_kib_per_1000'] / 1024:.1f} MiB / {g['loose_apparent_kib_per_1000'] / 1024:.1f} MiB "
                    f"({g['loose_objects_per_renewal']:.0f} objects per renewal)", "", "", ""))
        out.append(("growth per 1,000 renewals: after `git gc`", f"{g['packed_kib_per_1000']:.0f} KiB", "", "", ""))
    if scale:
        for h, e in (scale.get("history") or {}).items():
            out.append((f"growth per 1,000 renewals after {int(h):,} earlier commands (loose, apparent)",
                        f"{e['loose_apparent_kib_per_1000_renewals'] / 1024:.1f} MiB", "", "", ""))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    cli, scale, cont = (load(n, args.quick) for n in ("bench_cli", "bench_scale", "bench_contention"))
    table = rows(cli, scale, cont)
    print("| figure (median) | gitwork | floor, same run | target | |")
    print("|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    for name, data in (("bench_cli", cli), ("bench_scale", scale), ("bench_contention", cont)):
        if data:
            m = data["machine"]
            print(f"\n{name}: {m['date']}, gitwork {m['gitwork_commit']} (installed {m.get('gitwork_installed_digest', '?')}), "
                  f"busiest before a measurement {m.get('max_busy_before_a_measurement')}, load {m.get('loadavg_at_start')} "
                  f"-> {m.get('loadavg_at_end')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
