"""The Flower versions this project supports, and the one place it touches Flower's private modules.

Flower may move a private module in any release, and its ClientApp/ServerApp processes must match
the SuperLink's and SuperNode's major.minor version. So the supported range is the ``flwr``
specifier of pyproject.toml (`SUPPORTED`), checked by `check_version` wherever a run starts
(``run_simulation.py``, ``deploy.launch``, the ServerApp, every ClientApp), and every private
name the project needs is imported here, lazily, by `_private`: a Flower release that moved it
raises `FlowerVersionError`, one line naming the installed version and the supported range, not a
traceback. tests/flower_compat/test_flower_compat.py fails if a private Flower module is imported
anywhere else.

Each private import below says why no public API serves. CI checks both ends of the range
(`checked_on`): the whole suite on the newest release pip resolves, then the tests that touch
Flower (compatibility, simulation, a deployed run, the site worker) on the lowest allowed
(`lowest_supported`, installed by .ci/run).
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


class FlowerVersionError(ValueError):
    """The installed Flower (or a peer's) is outside the supported range, or lacks a name we need.
    A ValueError, as a bad setting is (`settings.ConfigError`): this package imports nothing of the
    project, so the apps name both where they turn a bad setting into one line."""


@cache
def supported() -> SpecifierSet:
    """The ``flwr`` specifier of pyproject.toml's dependencies, e.g. ``>=1.41,<1.43``."""
    with open(PYPROJECT, "rb") as fh:
        dependencies = tomllib.load(fh)["project"]["dependencies"]
    for requirement in dependencies:
        found = re.fullmatch(r"flwr(\[[^\]]*\])?\s*([^;]*)", requirement.strip())
        if found:
            return SpecifierSet(found.group(2).strip())
    raise FlowerVersionError(f"{PYPROJECT}: no flwr requirement in [project] dependencies")


def lowest_supported() -> str:
    """The lowest release the range allows (its ``>=`` bound as X.Y.Z), which .ci/run installs."""
    lows = [Version(s.version) for s in supported() if s.operator == ">="]
    if len(lows) != 1:
        raise FlowerVersionError(f"{PYPROJECT}: the flwr requirement needs one '>=' bound, got {supported()}")
    return ".".join(map(str, (*lows[0].release, 0, 0)[:3]))


def checked_on() -> str:
    """What CI checks: the two ends of the range."""
    return f"{lowest_supported()} and the newest release in flwr{supported()}"


@cache
def flower_version() -> str:
    """The installed Flower release (``importlib.metadata``, so Flower itself is not imported)."""
    try:
        return version("flwr")
    except PackageNotFoundError:
        raise FlowerVersionError(f"Flower (flwr) is not installed; this project supports "
                                 f"flwr{supported()}") from None


def check_version(installed: str | None = None, what: str = "installed") -> str:
    """Raise `FlowerVersionError` unless ``installed`` (default: this environment's) is supported."""
    installed = installed or flower_version()
    try:
        ok = Version(installed) in supported()
    except InvalidVersion:
        ok = False
    if not ok:
        raise FlowerVersionError(
            f"Flower {installed} is {what}, but this project supports flwr{supported()} "
            f"(pyproject.toml): pip install 'flwr[simulation]{supported()}'")
    return installed


def release_mismatch(local: str, peer: str, local_name: str, peer_name: str) -> str | None:
    """One line if two Flower versions differ in major.minor (Flower's own rule for a SuperLink,
    SuperNode and their apps), else None."""
    try:
        same = Version(local).release[:2] == Version(peer).release[:2]
    except InvalidVersion:
        same = False
    if same:
        return None
    return (f"{peer_name} runs Flower {peer}, {local_name} runs Flower {local}: both must be the "
            f"same major.minor release, within flwr{supported()}")


def _private(module: str, *names: str) -> Any:
    """``names`` from Flower's private ``module``; a release that moved them is a one-line error."""
    try:
        found = importlib.import_module(module)
        values = tuple(getattr(found, name) for name in names)
    except (ImportError, AttributeError) as err:
        raise FlowerVersionError(
            f"Flower {flower_version()} has no {module}.{'/'.join(names)} ({type(err).__name__}), "
            f"which this project needs; it supports flwr{supported()}, checked on {checked_on()}") from None
    return values[0] if len(values) == 1 else values


def parse_config_args(texts: Sequence[str]) -> dict[str, Any]:
    """Flower's ``key=value ...`` syntax of ``--run-config``/``--node-config``, parsed as the
    ``flwr`` CLI and ``flower-supernode`` parse it. Private (``flwr.common.config``): Flower exports
    no parser, and a copy could drift from the syntax its own CLI accepts."""
    return dict(_private("flwr.common.config", "parse_config_args")(list(texts)))


def client_app_error_code() -> int:
    """The code of a ClientApp's error reply that says "the ClientApp raised an exception" (what
    Flower's own runner sends). Private (``flwr.common.constant.ErrorCode``): ``flwr.app.Error``
    takes a code, but no public module names the codes."""
    return int(_private("flwr.common.constant", "ErrorCode").CLIENT_APP_RAISED_EXCEPTION)


def task_identity() -> tuple[int, int, int]:
    """(run id, task id, node id) of the task this process serves, which a site's worker process
    must adopt before the ClientApp builds its reply. Private (``flwr.supercore.task_identity``):
    ``flwr.app.Message(content, reply_to=...)`` reads it from there and no public API sets it."""
    identity = _private("flwr.supercore.task_identity", "TaskIdentity")
    return identity.run_id, identity.task_id, identity.node_id


def set_task_identity(identity: Sequence[int]) -> None:
    """Adopt another process's `task_identity` (see there)."""
    holder = _private("flwr.supercore.task_identity", "TaskIdentity")
    holder.run_id, holder.task_id, holder.node_id = identity


def simulate(server_app: str, client_app: str, app_dir: Path, run_config: Mapping[str, Any],
             num_supernodes: int, backend_config: Mapping[str, Any]) -> None:
    """Run an app in this process on the Simulation Engine exactly as ``flwr run`` does in its
    simulation process: both apps see ``run_config`` as ``context.run_config``.

    Private (``flwr.simulation.run_simulation._run_simulation`` and the ``Run``/task identity it
    needs): the public ``flwr.simulation.run_simulation`` (deprecated since 1.42 in favour of
    ``flwr run``) takes app objects and no run config, so every ClientApp and the ServerApp would
    see an empty ``context.run_config``; ``flwr run`` starts a SuperLink and a process per run.
    """
    from flwr.app import Context, RecordDict

    run_sim = _private("flwr.simulation.run_simulation", "_run_simulation")
    run_bytes, superlink_node, task_bytes = _private(
        "flwr.common.constant", "RUN_ID_NUM_BYTES", "SUPERLINK_NODE_ID", "TASK_ID_NUM_BYTES")
    random_id = _private("flwr.server.superlink.linkstate.utils", "generate_rand_int_from_bytes")
    no_federation = _private("flwr.supercore.constant", "NOOP_FEDERATION_ID")
    run_class = _private("flwr.supercore.run", "Run")
    events = _private("flwr.supercore.telemetry", "EventType")

    values = dict(run_config)
    run = run_class.create_empty(random_id(run_bytes))
    run.override_config = values
    run.primary_task_id = random_id(task_bytes)
    run.federation_id = no_federation
    set_task_identity((run.run_id, run.primary_task_id, superlink_node))
    context = Context(run_id=run.run_id, node_id=0, node_config={}, state=RecordDict(),
                      run_config=values)
    run_sim(num_supernodes=num_supernodes, exit_event=events.FLWR_SIMULATION_RUN_LEAVE,
            server_app_attr=server_app, client_app_attr=client_app, backend_config=dict(backend_config),
            app_dir=str(app_dir), run=run, server_app_context=context, is_app=True)
