"""``hybrid reproduce``: list the paper checks, or run some and print their table."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from hybrid.errors import ConfigError
from hybrid.flags import OneLineParser, fail


def reproduce_command(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="hybrid reproduce",
        description="Run published results under their sources' settings and print hybrid "
        "beside the published figure (IQM, mean ± std, runs solved, verdict); writes "
        "reproduce.md and reproduce.tex.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="entries to run, or 'all'")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0-4")
    parser.add_argument("--out", default="runs/reproduce", help="where runs and tables go")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one core each)")
    parser.add_argument(
        "--budget-scale",
        type=float,
        default=1.0,
        help="fraction of the source's env steps; below 1 the verdict is 'not comparable'",
    )
    args = parser.parse_args(argv)
    from hybrid.reproduce import all_entries, get_entry

    if args.list:
        for entry in all_entries().values():
            print(f"{entry.name:24s} {entry.title} [{entry.env_id}, {entry.budget:,} steps]")
        return 0
    if not args.names:
        return fail("reproduce", "NAME: name an entry (hybrid reproduce --list shows them)")
    if args.jobs < 1:
        return fail("reproduce", f"jobs: {args.jobs} must be >= 1")
    if not 0 < args.budget_scale <= 1:
        return fail("reproduce", f"budget_scale: {args.budget_scale} must be in (0, 1]")
    if args.seeds is not None and (len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0):
        return fail("reproduce", "seeds: distinct integers >= 0")
    try:
        chosen = (
            list(all_entries().values())
            if args.names == ["all"]
            else [get_entry(name) for name in args.names]
        )
    except ConfigError as exc:
        return fail("reproduce", str(exc))
    for entry in chosen:
        seeds = tuple(args.seeds) if args.seeds is not None else entry.default_seeds
        least = entry.source_seeds or 0
        if len(seeds) < least:
            print(
                f"hybrid reproduce: warning: {entry.name}: {len(seeds)} seeds, fewer than "
                f"the source's {least}",
                file=sys.stderr,
            )
    from hybrid.reproduce.run import reproduce, to_markdown, write_tables

    out = Path(args.out)
    reports = []
    for entry in chosen:
        seeds = tuple(args.seeds) if args.seeds is not None else entry.default_seeds
        try:
            reports.append(reproduce(entry, seeds, out / entry.name, args.jobs, args.budget_scale))
        except ConfigError as exc:
            return fail("reproduce", str(exc))
        print(f"{entry.name}: {reports[-1].verdict} ({reports[-1].wall_s:.0f} s)")
    md, tex = write_tables(reports, out)
    print()
    print(to_markdown(reports))
    print(f"tables written to {md} and {tex}")
    return 0
