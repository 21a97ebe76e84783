"""Does ELECTRA beat MLM at equal pretraining compute on this machine? (issue #17)

    python experiments/electra_vs_mlm/replicate_paper.py --output-dir /work/replication [--stage S] [--quick]
        [--status] [--report] [--max-units N] [--clock {machine,wall}]

Stage 1 finds a regime where BERT-MLM pretraining beats random init (go/no-go), stage 2
pretrains electra and bert with the same FLOPs and fine-tunes them on five GLUE dev sets, stage 3
runs the paper's ablations. The plan, pre-registered before any result, is the docstring of
experiments/electra_vs_mlm/paper_replication/settings.py; stage 4, diagnostics of `electra` outside the
plan and its cap, was added there after stage 2's `electra` had run (each fixed in REPORT.md
before it ran). Every unit writes a small result JSON under `<output-dir>/units/` and
`<results-dir>/units/` (committed); rerunning the same command resumes and never redoes a
finished unit. Keep `--output-dir` outside the checkout (e.g.
/work/replication): it holds the data, checkpoints and logs, which the work tree must not.
Start the long run niced; `<output-dir>/run.pid` names its pid, which leads its process group, so
`kill -STOP -<pid>` pauses it (and its workers) and `kill -CONT -<pid>` resumes it.
Hours (budgets, the cap) are machine hours: CPU time over the cores. On a dedicated machine with
a GPU, `--clock wall` makes them wall hours, in a replication of its own.
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).resolve().parent
sys.path[1:1] = [str(REPO), str(EXPERIMENT)]  # this checkout's packages and paper_replication beside us


def build_parser() -> argparse.ArgumentParser:
    from electra_tf.cli import script_parser
    from paper_replication.runner import CLOCKS
    parser = script_parser(__doc__, "nice -n 19 .venv/bin/python experiments/electra_vs_mlm/replicate_paper.py "
                                    "--output-dir /work/replication --status")
    parser.add_argument("--output-dir", required=True, help="data, checkpoints, logs (outside the checkout)")
    parser.add_argument("--results-dir", default=None,
                        help="small result files, results.json, table.md, PNGs (default: results/ beside this script; "
                             "with --quick, OUTPUT/results)")
    parser.add_argument("--stage", type=int, choices=(1, 2, 3, 4), default=4,
                        help="run stages 1..S (4: the diagnostics, outside the plan and the cap)")
    parser.add_argument("--quick", action="store_true", help="every stage on tiny settings, in minutes")
    parser.add_argument("--status", action="store_true", help="print what is done and what remains, then exit")
    parser.add_argument("--report", action="store_true", help="regenerate results.json, table.md, PNGs, then exit")
    parser.add_argument("--max-units", type=int, default=None,
                        help="stop after this many units; each pretraining segment is a unit, but a run's pending "
                             "segments are never split (N below their number is refused)")
    parser.add_argument("--clock", choices=CLOCKS, default=None,
                        help="what budgets count: machine (CPU time over the cores, so a shared CPU machine does "
                             "not shrink them) or wall (a dedicated machine, e.g. one GPU, where CPU time says "
                             "little) (default: the replication's own, fixed by its first run; machine for a new one)")
    parser.add_argument("--shared-data", default=None,
                        help="the shared data dir (default: shared/data beside the checkout or its parent)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_units is not None and args.max_units < 1:
        print(f"error: --max-units {args.max_units} must be at least 1", file=sys.stderr)
        return 2
    from paper_replication.report import write_report
    from paper_replication.runner import execute, find_shared_data, settle_clock
    from paper_replication.settings import QUICK, REAL
    from paper_replication.status import status
    from paper_replication.units import Context
    shared = Path(args.shared_data) if args.shared_data else find_shared_data(REPO)
    if shared is None or not (shared / "corpus").is_dir():
        print(f"error: no shared data found (looked for shared/data beside {REPO}); give --shared-data",
              file=sys.stderr)
        return 2
    output = Path(args.output_dir).resolve()
    results = Path(args.results_dir) if args.results_dir else (
        output / "results" if args.quick else EXPERIMENT / "results")
    ctx = Context(QUICK if args.quick else REAL, output, results.resolve(), REPO, shared.resolve())
    refused = settle_clock(ctx, args.clock)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    if args.status:
        print(status(ctx, args.stage))
        return 0
    if args.report:
        for name, path in write_report(ctx, args.stage).items():
            print(f"{name}: {path}")
        return 0
    return execute(ctx, args.stage, write_report, args.max_units)


if __name__ == "__main__":
    sys.exit(main())
