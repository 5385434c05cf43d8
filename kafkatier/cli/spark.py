"""``kafkatier spark produce|read``: Spark batch jobs through the ``kafkatier`` data source.

``produce`` writes ``--rows`` generated rows (``key-<n>``, ``--record-size`` byte values) or the rows of an
``--input`` file (CSV with a header line, Parquet, JSON lines) to ``--topic``; ``read`` reads a topic from its
earliest to its latest offset, prints rows and bytes per partition and writes the rows to ``--output``
(Parquet, JSON or CSV by extension) when given.  Spark runs ``local[*]`` unless ``--master`` says otherwise;
a progress bar follows Spark's tasks.  A local master's driver JVM maps a class archive that the first command
records in ``~/.cache/kafkatier/spark-cds`` (:mod:`kafkatier.spark.class_archive`; ``--no-class-archive``).  Errors found before work (brokers unreachable, missing topic, bad
columns or options) print one line: exit 2 for bad arguments, options or input files, 1 for the brokers.
"""
from __future__ import annotations

import re

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.cli import common
from kafkatier.cli.main import UsageError

# Exceptions the data source raises before work, as Spark wraps them: "<module>.<Name>: message".
_SOURCE_ERROR = re.compile(r"kafkatier\.spark\.\w+\.(\w+): (.+)")
# Failures inside tasks: the sink's and source's own RuntimeErrors, inside Spark's task failure text.
_TASK_ERROR = re.compile(r"(RuntimeError): (kafkatier (?:sink|source): .+)")
_USAGE_ERRORS = {"DataSourceOptionError", "JobInputError"}


def register(subparsers) -> None:
    p = subparsers.add_parser("spark", help="Spark batch jobs writing and reading topics (data source kafkatier)",
                              description="Spark batch jobs through the kafkatier Python data source.")
    sub = p.add_subparsers(dest="spark_command", metavar="JOB", required=True)

    prod = common.add_client_command(sub, "produce", run_produce,
                                     help="write generated rows or a file's rows to a topic")
    prod.add_argument("--topic", required=True)
    prod.add_argument("--rows", type=_positive, help="rows to generate (or the first N rows of --input)")
    prod.add_argument("--record-size", type=_positive, default=100, help="value bytes of generated rows (100)")
    prod.add_argument("--input", metavar="FILE", help="rows from a .csv (header line), .parquet or .json file")
    _add_common(prod)

    rd = common.add_client_command(sub, "read", run_read, help="read a topic from its earliest to its latest offset")
    rd.add_argument("--topic", required=True)
    rd.add_argument("--output", metavar="PATH", help="write the rows to PATH (.parquet, .json or .csv directory)")
    _add_common(rd)


def _add_common(p) -> None:
    p.add_argument("--master", help="Spark master URL (default local[*])")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a data source option, e.g. kafka.linger.ms=20 or minPartitions=8 (repeatable)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, e.g. spark.ui.enabled=true or spark.driver.extraJavaOptions=... "
                        "(repeatable; wins over the job's defaults)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the default when stderr is not a tty)")
    p.add_argument("--no-class-archive", action="store_true",
                   help="neither map nor record the driver JVM's class archive (a local master's start-up cache "
                        "in ~/.cache/kafkatier/spark-cds)")


def _progress(args) -> bool:
    return not args.no_progress and common.stderr_is_tty()


def _positive(text: str) -> int:
    import argparse
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {n}")
    return n


def _options(args) -> dict[str, str]:
    return _pairs(args.option, "--option")


def _conf(args) -> dict[str, str]:
    return _pairs(args.conf, "--conf")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        out[k.strip()] = v
    return out


def _bootstrap(args) -> str:
    try:
        return ",".join(common.connection_from_args(args).bootstrap_servers)
    except NoReachableBrokerError as e:
        raise _Failed(str(e)) from None


class _Failed(Exception):
    pass


def _run(args, job) -> int:
    command = f"spark {args.spark_command}"
    from kafkatier.spark.jobs import JobInputError
    from kafkatier.spark.options import DataSourceOptionError
    try:
        return job()
    except _Failed as e:
        return common.print_error(command, str(e))
    except (JobInputError, DataSourceOptionError) as e:
        raise UsageError(str(e)) from None
    except UsageError:
        raise   # bad input (no cluster.json in --data-dir, a bad --command-config): exit 2, not a job failure
    except Exception as e:  # noqa: BLE001 - Spark wraps the data source's errors; print one line of them
        name, message = source_error(e)
        if name in _USAGE_ERRORS:
            raise UsageError(message) from None
        return common.print_error(command, message)


def source_error(exc: BaseException) -> tuple[str | None, str]:
    """``(error class, one-line message)`` of an exception Spark raised for the data source."""
    text = str(exc)
    for pattern in (_SOURCE_ERROR, _TASK_ERROR):
        found = pattern.findall(text)
        if found:
            return found[-1][0], found[-1][1].strip()
    return None, next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)


def run_produce(args) -> int:
    if args.rows is None and args.input is None:
        raise UsageError("--rows N or --input FILE is required")
    options, conf = _options(args), _conf(args)

    def job() -> int:
        from kafkatier.spark import jobs
        from kafkatier.spark.options import WriterOptions
        if args.input:
            jobs.input_format(args.input)          # a bad file name fails before Spark starts
        bootstrap = _bootstrap(args)
        # A bad option fails before Spark starts too (the data source would refuse it the same way, after the
        # JVM's start-up and its log lines).
        WriterOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": args.topic, **options})
        spark = jobs.spark_session(args.master, app_name=f"kafkatier produce {args.topic}", conf=conf,
                                   class_archive=not args.no_class_archive)
        df = (jobs.file_rows(spark, args.input, args.rows) if args.input
              else jobs.generated_rows(spark, args.rows, args.record_size))
        result = jobs.produce(spark, df, bootstrap, args.topic, options, progress=_progress(args),
                              rows=None if args.input else args.rows)
        print(f"wrote {result.rows} rows to {result.topic} in {result.seconds:.1f} s "
              f"({result.rows / max(result.seconds, 1e-9):,.0f} rows/s)")
        return 0
    return _run(args, job)


def run_read(args) -> int:
    options, conf = _options(args), _conf(args)

    def job() -> int:
        from kafkatier.spark import jobs
        from kafkatier.spark.options import ReaderOptions
        if args.output:
            jobs.output_format(args.output)
        bootstrap = _bootstrap(args)
        ReaderOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": args.topic, **options})
        spark = jobs.spark_session(args.master, app_name=f"kafkatier read {args.topic}", conf=conf,
                                   class_archive=not args.no_class_archive)
        result = jobs.read(spark, bootstrap, args.topic, args.output, options, progress=_progress(args))
        for p, (rows, first, last) in sorted(result.per_partition.items()):
            print(f"partition {p}: {rows} rows, offsets {first}..{last}")
        print(f"read {result.rows} rows ({result.value_bytes} value bytes) from {result.topic} in "
              f"{result.seconds:.1f} s" + (f"; written to {result.output}" if result.output else ""))
        return 0
    return _run(args, job)
