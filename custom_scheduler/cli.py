"""The ``custom-scheduler`` command: argument parsing only; the work happens elsewhere.

Commands:
  run           the daemon (``--config``, ``--kubeconfig``, ``--dry-run`` for shadow mode,
                ``--tls-cert-file``/``--tls-private-key-file`` for the HTTPS port's certificate)
  check-config  validate a config file and print the effective configuration (defaults filled)
  explain       why a pod goes (or would go) where it does: every node, every plugin
  simulate      place pods on a cluster snapshot offline, with utilisation before and after
  snapshot      write a cluster snapshot (nodes and their pods) for simulate
  demo          a local control plane, the daemon, a sample workload and a summary

Exit codes: 0 success, 1 runtime failure, 2 invalid usage or configuration (a message naming the
field, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

EXIT_CONFIG = 2


DESCRIPTION = (
    "A Kubernetes scheduler that places the pods whose spec.schedulerName names one of its profiles, "
    "with kube-scheduler 1.37's plugins, configuration and metrics."
)
EPILOG = (
    "Exit codes: 0 success, 1 runtime failure, 2 invalid usage or configuration. "
    "'custom-scheduler COMMAND --help' describes each command."
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("custom-scheduler")
    except PackageNotFoundError:  # run from a source tree that is not installed
        mine = "unknown"
    return f"custom-scheduler {mine} (kube-scheduler {UPSTREAM_VERSION} semantics)"


#: The kube-scheduler release whose behaviour this one reproduces.
UPSTREAM_VERSION = "1.37.2"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: argparse's own action wants the string when the
    parser is built, and ``importlib.metadata`` scans every installed distribution for it (60-120 ms
    of every command's start-up on two loaded cores)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(_version())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="custom-scheduler", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the scheduler daemon")
    run.add_argument("--config", required=True, help="KubeSchedulerConfiguration YAML file")
    run.add_argument("--kubeconfig", default=None, help="overrides clientConnection.kubeconfig")
    run.add_argument("--dry-run", action="store_true", help="shadow mode: decide, but never write to the API")
    run.add_argument("--log-level", default=None)
    run.add_argument(
        "--feature-gates",
        default=None,
        metavar="NAME=BOOL,...",
        help="kube-scheduler feature gates this scheduler follows: OpportunisticBatching, "
        "SchedulerPopFromBackoffQ (both beta, on)",
    )
    run.add_argument(
        "--decision-record",
        default=None,
        metavar="NS/NAME|off",
        help="ConfigMap ring the decisions are recorded in, read by `why` and `shadow-report` (default "
        "kube-system/custom-scheduler-decisions, with --dry-run kube-system/custom-scheduler-shadow-decisions; "
        "$CUSTOM_SCHEDULER_DECISION_RECORD)",
    )
    run.add_argument(
        "--decision-record-scores",
        choices=("on", "off"),
        default=None,
        help="record the chosen node's top plugin scores and the runner-up (default on: read from the "
        "columns the score sum adds anyway; $CUSTOM_SCHEDULER_DECISION_RECORD_SCORES)",
    )
    # kube-scheduler's flag names. Without them the HTTPS port serves a self-signed certificate.
    run.add_argument(
        "--tls-cert-file",
        default=None,
        help="PEM certificate (chain) for the HTTPS port; re-read when the file changes",
    )
    run.add_argument("--tls-private-key-file", default=None, help="PEM private key matching --tls-cert-file")

    chk = sub.add_parser("check-config", help="validate a config file and print the effective config")
    chk.add_argument("file")

    demo = sub.add_parser("demo", help="run the demo on a local control plane")
    demo.add_argument("--keep", action="store_true", help="leave the control plane running until Ctrl-C")
    demo.add_argument(
        "scenario", nargs="?", choices=["kueue"], help="kueue: Kueue in front of the scheduler (hack/kueue.sh first)"
    )

    from custom_scheduler import tools

    tools.register(sub)
    return p


def _load(path: str, registry: Any = None) -> object:
    from custom_scheduler import config
    from custom_scheduler.errors import ConfigError
    from custom_scheduler.plugins.builtin import full_registry

    try:
        return config.load_config_file(path, registry if registry is not None else full_registry())
    except ConfigError as e:
        print(f"custom-scheduler: invalid configuration {path}:", file=sys.stderr)
        for err in e.errors:
            print(f"  {err}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def cmd_check_config(args: argparse.Namespace) -> int:
    from pathlib import Path

    from custom_scheduler import config
    from custom_scheduler.config import advice
    from custom_scheduler.config.loading import parse_yaml

    cfg = _load(args.file)
    assert isinstance(cfg, config.SchedulerConfig)
    # The file loaded, so it reads and parses again; warnings and the summary go to stderr,
    # stdout stays the effective config's YAML.
    found = advice.warnings(parse_yaml(Path(args.file).read_text(encoding="utf-8")), cfg)
    for line in found:
        print(f"custom-scheduler: warning: {line}", file=sys.stderr)
    sys.stdout.write(config.render_effective(cfg))
    print(f"custom-scheduler: {advice.summary(args.file, cfg, len(found))}", file=sys.stderr)
    return 0


def _run_options(args: argparse.Namespace) -> tuple[Any, Any] | int:
    """``run``'s decision record and feature gates from the flags (and the record's environment
    variables), or the exit code after a clear message."""
    import os

    from custom_scheduler.config import gates as feature_gates
    from custom_scheduler.core.decision_store import RECORD_ENV, SCORES_ENV, parse_ring_ref
    from custom_scheduler.errors import ConfigError

    scores = (args.decision_record_scores or os.environ.get(SCORES_ENV) or "on").lower() == "on"
    try:
        record = parse_ring_ref(args.decision_record or os.environ.get(RECORD_ENV), shadow=args.dry_run, scores=scores)
    except ValueError as e:
        print(f"custom-scheduler: --decision-record: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        gates = feature_gates.parse(args.feature_gates)
    except ConfigError as e:
        for err in e.errors:
            print(f"custom-scheduler: {err}", file=sys.stderr)
        return EXIT_CONFIG
    return record, gates


def cmd_run(args: argparse.Namespace) -> int:
    import gc

    # Start-up builds about 140k objects that live as long as the process (modules, classes, the
    # frameworks). A cyclic collection meanwhile frees next to nothing but traverses them all (some
    # 200 collections, 45-60 ms), and the full one once the caches sync (server.daemon.tune_gc)
    # would traverse them again (70 ms at 1000 nodes on two loaded cores; 1 ms without them). So
    # none until they are built; then they leave the collector's view, with the few hundred objects
    # of cyclic garbage the imports leave (817 measured, well under 1 MB).
    gc.disable()
    try:
        daemon = _daemon(args)
    finally:
        gc.freeze()
        from custom_scheduler.server.daemon import GC_THRESHOLD

        gc.set_threshold(*GC_THRESHOLD)  # the initial LISTs too (see there)
        gc.enable()
    return daemon if isinstance(daemon, int) else daemon()


def _prefetch(args: argparse.Namespace) -> tuple[Any, str] | None:
    """The Node and Pod LISTs, started before the daemon is imported and built (see
    :mod:`custom_scheduler.kube.prefetch`), with the kubeconfig they used; None when the
    credentials cannot be read this early (the start that follows then says why)."""
    try:
        import yaml

        from custom_scheduler.kube.client import KubeClient, load_configuration
        from custom_scheduler.kube.prefetch import Prefetch

        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            with open(args.config, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
            kubeconfig = str(((doc or {}).get("clientConnection") or {}).get("kubeconfig") or "")
        credentials = load_configuration(kubeconfig, plain_only=True)  # no exec plugin run twice
        if credentials is None:
            return None
        return Prefetch(KubeClient(credentials, qps=0, burst=1, pool_maxsize=2)).start(), kubeconfig
    except Exception:
        return None


def _serving_certs(args: argparse.Namespace) -> Any:
    """``--tls-cert-file``/``--tls-private-key-file`` loaded, None without them (a self-signed
    certificate is served), or the exit code after a clear message."""
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        print("custom-scheduler: --tls-cert-file and --tls-private-key-file go together", file=sys.stderr)
        return EXIT_CONFIG
    if not args.tls_cert_file:
        return None
    from custom_scheduler.server.serving import ServingCerts

    try:
        return ServingCerts.from_files(args.tls_cert_file, args.tls_private_key_file)
    except ValueError as e:
        print(f"custom-scheduler: invalid serving certificate: {e}", file=sys.stderr)
        return EXIT_CONFIG


def _usable_prefetch(early: tuple[Any, str] | None, cfg: Any) -> Any:
    """The early LISTs when they are the ones the daemon needs now: the same kubeconfig, and
    informers that start at once (with ``delayCacheUntilActive`` they would be stale)."""
    if early is None:
        return None
    prefetched, kubeconfig = early
    if kubeconfig != cfg.client_connection.kubeconfig or cfg.delay_cache_until_active:
        prefetched.discard()
        return None
    return prefetched


def _daemon(args: argparse.Namespace) -> Callable[[], int] | int:
    """``run``'s daemon, built and ready to serve, or the exit code after a clear message."""
    from custom_scheduler.server import logs

    logs.setup(args.log_level)
    early = _prefetch(args)  # first: its LISTs run while the rest imports
    import dataclasses

    import structlog

    from custom_scheduler import config
    from custom_scheduler.kube import api_errors as kerrors
    from custom_scheduler.kube.client import KubeClient
    from custom_scheduler.plugins.builtin import full_registry
    from custom_scheduler.server.app import App
    from custom_scheduler.server.daemon import serve
    from custom_scheduler.server.metrics import Metrics

    log = structlog.get_logger("custom_scheduler.cli")
    # One registry for the config and the daemon: each build scans every installed distribution's
    # entry points (10-20 ms at start-up).
    registry = full_registry()
    cfg = _load(args.config, registry)
    assert isinstance(cfg, config.SchedulerConfig)

    def adjust(c: config.SchedulerConfig) -> config.SchedulerConfig:
        """The command line's overrides, for the file at start and at every reload."""
        if args.kubeconfig is None:
            return c
        conn = dataclasses.replace(c.client_connection, kubeconfig=args.kubeconfig)
        return dataclasses.replace(c, client_connection=conn)

    cfg = adjust(cfg)
    from pathlib import Path

    from custom_scheduler.config import advice
    from custom_scheduler.config.loading import parse_yaml

    for line in advice.warnings(parse_yaml(Path(args.config).read_text(encoding="utf-8")), cfg):
        log.warning("config_warning", warning=line)
    certs = _serving_certs(args)
    if isinstance(certs, int):
        return certs
    cc = cfg.client_connection
    try:
        client = KubeClient.from_kubeconfig(cc.kubeconfig, qps=cc.qps, burst=cc.burst)
    except Exception as e:
        print(f"custom-scheduler: cannot load cluster credentials: {e}", file=sys.stderr)
        return EXIT_CONFIG
    options = _run_options(args)
    if isinstance(options, int):
        return options
    record, gates = options
    metrics = Metrics()
    app = App(
        cfg,
        registry,
        client,
        dry_run=args.dry_run,
        metrics=metrics,
        decision_record=record,
        gates=gates,
        prefetched=_usable_prefetch(early, cfg),
    )
    app.install_signal_handlers()

    def run() -> int:
        try:
            return serve(app, metrics, config_path=args.config, dry_run=args.dry_run, certs=certs, adjust=adjust)
        except kerrors.KubeError as e:
            log.error("daemon_failed", error=str(e))
            return 1

    return run


def cmd_demo(args: argparse.Namespace) -> int:
    if args.scenario == "kueue":
        from custom_scheduler.devenv.kueue_demo import main as kueue_demo_main

        return kueue_demo_main(keep=args.keep)
    from custom_scheduler.devenv.demo import main as demo_main

    return demo_main(keep=args.keep)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Before any module that logs: importing it imports structlog without rich (see its docstring).
    from custom_scheduler.server import logs  # noqa: F401

    try:
        if args.command == "check-config":
            return cmd_check_config(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "demo":
            return cmd_demo(args)
        from custom_scheduler import tools

        if args.command in tools.COMMANDS:
            rc: int = args.func(args)
            return rc
    except KeyboardInterrupt:
        return 130
    return EXIT_CONFIG
