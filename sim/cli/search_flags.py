"""The flags the planning searches share (size, sweep, check): how sure each verdict
must be (--confidence, --max-replications) and where trials run (--executor, --workers,
--scheduler)."""
from __future__ import annotations

import argparse
import importlib.util

from sim.config.errors import ScenarioError
from sim.cli.common import MAX_REPLICATIONS, MAX_WORKERS, count_arg, share_arg


def confidence_from_args(args: argparse.Namespace):
    """The confidence ``--confidence`` and ``--max-replications`` ask for, or None (each
    verdict from one run with the scenario's seed)."""
    from sim.planning.verdict import MIN_REPLICATIONS, Confidence

    if args.confidence is None:
        if args.max_replications is not None:
            raise ScenarioError("--max-replications caps the seeds a confident verdict may "
                                "take: give --confidence too (e.g. --confidence 95%)",
                                field="--max-replications")
        return None
    cap = args.max_replications if args.max_replications is not None else \
        Confidence().max_replications
    if cap < MIN_REPLICATIONS:
        raise ScenarioError(f"--max-replications {cap}: a confident verdict needs at least "
                            f"{MIN_REPLICATIONS} replications", field="--max-replications")
    return Confidence(level=args.confidence, max_replications=cap)


def _confidence_arg(text: str) -> float:
    """A confidence level: 95% or 0.95, from 50% to 99.99%."""
    value = share_arg(text, "a confidence level (95% or 0.95)")
    if not 0.5 <= value <= 0.9999:         # NaN fails too
        raise argparse.ArgumentTypeError(
            f"a confidence level from 50% to 99.99% (95% or 0.95), got {text!r}")
    return value


def add_confidence(parser) -> None:
    from sim.planning.verdict import DEFAULT_MAX_REPLICATIONS, MIN_REPLICATIONS
    parser.add_argument(
        "--confidence", type=_confidence_arg, metavar="LEVEL",
        help="replicate each trial over independent seeds until every SLO's interval "
             f"clears its target at this level (e.g. 95%%): from {MIN_REPLICATIONS} "
             "replications, doubling, up to --max-replications; without it one seed "
             "decides")
    parser.add_argument(
        "--max-replications", type=count_arg(MAX_REPLICATIONS), metavar="N",
        help=f"most seeds per trial with --confidence (default "
             f"{DEFAULT_MAX_REPLICATIONS}); a verdict still open there is the estimate's, "
             "marked uncertain")


def check_executor(args: argparse.Namespace) -> None:
    if args.scheduler is not None and args.executor != "dask":
        raise ScenarioError("--scheduler names a Dask scheduler: add --executor dask",
                            field="--scheduler")
    if args.executor == "dask" and importlib.util.find_spec("distributed") is None:
        raise ScenarioError("--executor dask needs Dask, which local runs do without: "
                            "pip install 'fleetsim[cluster]'", field="--executor")


def add_executor(parser, workers_help: str) -> None:
    parser.add_argument("--executor", choices=["local", "dask"], default="local")
    parser.add_argument("--workers", type=count_arg(MAX_WORKERS), default=1,
                        help=workers_help)
    parser.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786")
