"""``kafkatier scenario list | run FILE|NAME [--seed N] [--quick] [--dry-run] | replay RUN_DIR [--check] |
sweep FILE|NAME --seeds A..B [--parallel K | --spark [--master URL] [--output DIR]]``: failover scenarios (see
kafkatier/scenario/)."""
from __future__ import annotations

import glob
import json
import os

RUN_INCOMPLETE = 3   # exit code of a run that could not complete (no verdict: neither valid nor anomalies)


def register(sub) -> None:
    p = sub.add_parser("scenario", help="run failover scenarios: seeded faults, recorded history, checkers")
    ssub = p.add_subparsers(dest="scenario_command", metavar="ACTION", required=True)

    ls = ssub.add_parser("list", help="the scenario library (or the scenarios in a folder) and what each shows")
    ls.add_argument("--dir", default=None, help="a folder of scenario files (default: the installed library)")
    ls.set_defaults(func=_list)

    run = ssub.add_parser("run", help="run one scenario file")
    run.add_argument("file", metavar="FILE|NAME", help="a scenario file, or the name of a library scenario")
    _run_options(run)
    run.add_argument("--seed", type=int, default=None, help="drives every random choice (default: a random seed)")
    run.add_argument("--dry-run", action="store_true",
                     help="validate the file, print the schedule the seed draws (in time order) and exit 0")
    run.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/chroot]",
                     help="run against this (empty) ZooKeeper, or an empty chroot of it, instead of an embedded "
                          "one; ZooKeeper faults are then skipped")
    run.add_argument("--reports", choices=("all", "failing"), default="all",
                     help="failing: draw timeline.png and index.html only when the run is not valid (sweeps)")
    run.set_defaults(func=_run)

    rp = ssub.add_parser("replay", help="run a recorded run again with its seed (or only re-check its history)")
    rp.add_argument("run_dir")
    rp.add_argument("--check", action="store_true", help="re-run the checkers on history.jsonl, no cluster")
    rp.add_argument("--runs-dir", default=None)
    rp.add_argument("--no-progress", action="store_true")
    rp.set_defaults(func=_replay)

    sw = ssub.add_parser("sweep", help="run a scenario for a range of seeds; keep only failing runs")
    sw.add_argument("file", metavar="FILE|NAME", help="a scenario file, or the name of a library scenario")
    sw.add_argument("--seeds", required=True, help="A..B (inclusive)")
    sw.add_argument("--parallel", type=int, default=1, help="without --spark: runs at a time on this machine")
    sw.add_argument("--spark", action="store_true", help="run each seed as a Spark task (see --master)")
    sw.add_argument("--master", default=None, metavar="URL",
                    help="with --spark: local[N] (default local[2]) or spark://HOST:PORT of a standalone cluster")
    sw.add_argument("--per-executor", type=int, default=None, metavar="K",
                    help="with --spark on a cluster: seeds one executor runs at once (spark.executor.cores)")
    sw.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="with --spark: a Spark setting")
    sw.add_argument("--no-reuse", action="store_true",
                    help="every seed starts its own ZooKeeper (default: the seeds of an executor share one, a chroot "
                         "each, unless the scenario faults ZooKeeper or uses links)")
    sw.add_argument("--output", default=None, metavar="DIR",
                    help="with --spark: where results.parquet, index.html and failing runs go, shared with the "
                         "executors (default: RUNS_DIR/sweep-NAME)")
    _run_options(sw)
    sw.set_defaults(func=_sweep)


def _run_options(p) -> None:
    p.add_argument("--quick", action="store_true", help="the scenario's short [quick] profile (CI)")
    p.add_argument("--runs-dir", default="runs", help="where runs/<scenario>-<seed>/ go (default: runs)")
    p.add_argument("--no-progress", action="store_true")


def _load(path: str):
    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.spec import ScenarioSpecError, load, resolve
    try:
        return load(resolve(path))
    except ScenarioSpecError as e:
        raise UsageError(str(e)) from None


def _first_comment(path: str) -> str:
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                return line.lstrip("# ").rstrip()
    return ""


def _list(args) -> int:
    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.spec import library
    files = library() if args.dir is None else sorted(glob.glob(os.path.join(args.dir, "*.toml")))
    if not files:
        raise UsageError(f"no scenario files (*.toml) in {args.dir}")
    for f in files:
        spec = _load(f)
        print(f"{spec.name:<44} {_first_comment(f)}")
    return 0


def _run(args) -> int:
    import attrs

    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.runner import run_scenario
    spec = _load(args.file)
    if args.dry_run:
        return _dry_run(spec, args.seed, args.quick)
    if args.zookeeper:
        hostport, slash, chroot = args.zookeeper.partition("/")
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or (slash and not chroot.strip("/")):
            raise UsageError(f"--zookeeper: expected HOST:PORT[/chroot], got {args.zookeeper!r}")
        spec = attrs.evolve(spec, cluster=attrs.evolve(spec.cluster, zookeeper=args.zookeeper))
    return _guarded(lambda: run_scenario(spec, seed=args.seed, quick=args.quick, runs_dir=args.runs_dir,
                                         progress=False if args.no_progress else None, reports=args.reports))


def _dry_run(spec, seed: int | None, quick: bool) -> int:
    import random

    from kafkatier.scenario.runner import replay_command
    from kafkatier.scenario.schedule import derive
    if seed is None:
        seed = random.SystemRandom().randrange(1, 10**6)
    profile = spec.profile(quick)
    schedule = derive(profile, seed)
    print(f"scenario {spec.name}{' (quick)' if quick else ''}: seed {seed}, {profile.duration_s:g}s, "
          f"schedule digest {schedule.digest()} (dry run: nothing started)")
    print(schedule.describe())
    print(f"run it: {replay_command(spec, seed, quick)}")
    return 0


def _guarded(run) -> int:
    """Exit codes: 0 valid, 1 anomalies, 2 bad input (or a run that cannot happen here), 3 a run that could not
    complete (the cluster did not start...: one line on stderr; a sweep shows it as ``error``).  SIGTERM (a sweep
    being stopped) unwinds like Ctrl-C, so the run's cluster is torn down."""
    import signal
    import sys

    from kafkatier.waiting import WaitTimeout

    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    from kafkatier.common.errors import UsageError
    from kafkatier.scenario.runner import ScenarioUnavailableError
    try:
        return run().exit_code
    except ScenarioUnavailableError as e:
        print(f"kafkatier scenario: cannot run here: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except UsageError:
        raise   # bad input found while starting (exit 2)
    except Exception as e:  # noqa: BLE001 - no verdict: never exit 1, the code for anomalies
        # (RuntimeError, OSError, WaitTimeout, and what a client library raised while the cluster was being set
        # up or torn down: a KafkaException, a ZooKeeper error...)
        text = str(e).splitlines()[0] if str(e).strip() else repr(e)
        if not isinstance(e, (RuntimeError, OSError, WaitTimeout)) and not text.startswith(type(e).__name__):
            text = f"{type(e).__name__}: {text}"
        print(f"kafkatier scenario: the run could not complete: {text}", file=sys.stderr)
        return RUN_INCOMPLETE


def _replay(args) -> int:
    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.runner import recheck, run_scenario
    try:
        with open(os.path.join(args.run_dir, "results.json")) as f:
            res = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{args.run_dir} is not a scenario run directory ({e})") from None
    if args.check:
        return recheck(args.run_dir).exit_code
    spec = _load(os.path.join(args.run_dir, "scenario.toml"))
    runs_dir = args.runs_dir or os.path.join(os.path.dirname(os.path.abspath(args.run_dir)), "replays")
    return _guarded(lambda: run_scenario(spec, seed=res["seed"], quick=res["quick"], runs_dir=runs_dir,
                                         progress=False if args.no_progress else None))


def _sweep(args) -> int:
    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.sweep import parse_seeds, sweep
    spec = _load(args.file)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if args.spark:
        return _spark_sweep(args, spec, seeds)
    if args.master or args.per_executor or args.conf or args.output:
        raise UsageError("--master, --per-executor, --conf and --output need --spark")
    from kafkatier.scenario.executor_zookeeper import reuse_refused
    refused = "--no-reuse" if args.no_reuse else reuse_refused(spec)
    results = sweep(spec.path, spec.name, seeds, parallel=args.parallel, quick=args.quick, runs_dir=args.runs_dir,
                    share_zookeeper=refused is None)
    codes = {r.exit_code for r in results}   # as a Spark sweep: anomalies first, then runs that could not complete
    return 1 if 1 in codes else (RUN_INCOMPLETE if codes - {0} else 0)


def _spark_sweep(args, spec, seeds) -> int:
    import sys

    from kafkatier.cli.main import UsageError
    from kafkatier.scenario.spark_sweep import SweepSetupError, spark_sweep
    master = args.master or "local[2]"
    if not (master.startswith(("local", "spark://", "yarn", "k8s://"))):
        raise UsageError(f"--master: expected local[N] or spark://HOST:PORT, got {master!r}")
    if args.per_executor is not None and args.per_executor < 1:
        raise UsageError("--per-executor must be at least 1")
    conf = {}
    for c in args.conf:
        key, sep, value = c.partition("=")
        if not sep or not key:
            raise UsageError(f"--conf: expected KEY=VALUE, got {c!r}")
        conf[key] = value
    output = args.output or os.path.join(args.runs_dir, f"sweep-{spec.name}")
    try:
        return spark_sweep(spec, seeds, master, args.quick, output, args.per_executor, conf,
                           reuse=not args.no_reuse).exit_code
    except SweepSetupError as e:
        print(f"kafkatier scenario sweep: {e}", file=sys.stderr)
        return RUN_INCOMPLETE
