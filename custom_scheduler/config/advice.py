"""Warnings about a configuration that loads but probably does not do what its author means.

``check-config`` prints them (and the daemon logs them at start). Each is legal for kube-scheduler
too, which is why they are warnings and not errors:

- a profile named ``default-scheduler``: this scheduler would then place every ordinary pod,
  competing with kube-scheduler for each of them (two schedulers binding from stale views is how
  nodes get over-committed); run it under its own name unless kube-scheduler is gone;
- a ``pluginConfig`` entry for a plugin the profile does not enable: its args are validated and
  then never used (upstream accepts this silently);
- the fields accepted without effect (:mod:`custom_scheduler.config.ineffective`).
"""

from __future__ import annotations

from collections.abc import Mapping

from custom_scheduler.config import schema
from custom_scheduler.config.ineffective import ineffective_fields

__all__ = ["DEFAULT_SCHEDULER_NAME", "summary", "warnings"]

#: kube-scheduler's profile name, which every pod without ``spec.schedulerName`` gets.
DEFAULT_SCHEDULER_NAME = "default-scheduler"


def warnings(raw: object, config: schema.SchedulerConfig) -> list[str]:
    """The warnings for ``config``, loaded from the parsed document ``raw`` (paths as in the file)."""
    out: list[str] = []
    raw_profiles = raw.get("profiles") if isinstance(raw, Mapping) else None
    raw_list = raw_profiles if isinstance(raw_profiles, list) else []
    for i, profile in enumerate(config.profiles):
        if profile.scheduler_name == DEFAULT_SCHEDULER_NAME:
            out.append(
                f"profiles[{i}].schedulerName: {DEFAULT_SCHEDULER_NAME!r} makes this scheduler place every pod "
                "that names no scheduler, competing with kube-scheduler for each one; use another name "
                "unless kube-scheduler is not running"
            )
        entries = raw_list[i].get("pluginConfig") if i < len(raw_list) and isinstance(raw_list[i], Mapping) else None
        enabled = set(profile.plugin_names())
        for j, entry in enumerate(entries if isinstance(entries, list) else ()):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if isinstance(name, str) and name not in enabled:
                out.append(
                    f"profiles[{i}].pluginConfig[{j}]: plugin {name!r} is not enabled in profile "
                    f"{profile.scheduler_name!r}: its args are never used"
                )
    out.extend(str(f) for f in ineffective_fields(raw))
    return out


def summary(path: str, config: schema.SchedulerConfig, num_warnings: int) -> str:
    """One line saying the file is valid and what it configures."""
    names = ", ".join(p.scheduler_name for p in config.profiles)
    ext = f", {len(config.extenders)} extender(s)" if config.extenders else ""
    warned = f", {num_warnings} warning(s)" if num_warnings else ""
    return f"{path}: valid: {len(config.profiles)} profile(s) ({names}){ext}{warned}"
