"""Configuration: a ``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``) file.

A kube-scheduler user's file loads here unchanged, as long as it names plugins we have: the same
fields, the same defaults (except the scheduler and lease names, ``custom-scheduler``), the same
``enabled``/``disabled``/``multiPoint`` merge rules, strict decoding. Loading reports every problem
at once, each with its field path::

    from custom_scheduler import config
    cfg = config.load_config_file("scheduler-config.yaml", registry)
    print(config.render_effective(cfg))     # what `custom-scheduler check-config` prints

Modules: :mod:`.schema` (the dataclasses), :mod:`.defaults` (the default profile),
:mod:`.loading` (YAML → dataclasses), :mod:`.decoding` (strict typed reads with paths),
:mod:`.merging` (plugin merge rules), :mod:`.validation` (cross-field checks), :mod:`.render`
(dataclasses → YAML), :mod:`.durations` (Go duration strings).
"""

from custom_scheduler.config.defaults import DEFAULT_MULTI_POINT, default_profile_plugins
from custom_scheduler.config.durations import format_duration, parse_duration
from custom_scheduler.config.loading import from_dict, load_config, load_config_file
from custom_scheduler.config.render import render_effective, to_dict
from custom_scheduler.config.schema import (
    API_VERSION,
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINTS,
    KIND,
    ClientConnectionConfig,
    LeaderElectionConfig,
    PluginRef,
    Profile,
    SchedulerConfig,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_MULTI_POINT",
    "DEFAULT_SCHEDULER_NAME",
    "EXTENSION_POINTS",
    "KIND",
    "ClientConnectionConfig",
    "LeaderElectionConfig",
    "PluginRef",
    "Profile",
    "SchedulerConfig",
    "default_profile_plugins",
    "format_duration",
    "from_dict",
    "load_config",
    "load_config_file",
    "parse_duration",
    "render_effective",
    "to_dict",
]
