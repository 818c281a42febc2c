"""Reading the extender's config: the YAML file named by ``--config`` and the environment.

The I/O half of ``config`` (the shell's): ``config.build_config`` validates what is read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from extender.core.config import Config, ConfigError, build_config


def load_config(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    exempt_namespaces: frozenset[str] = frozenset(),
) -> Config:
    """The config from a YAML file (or only defaults and environment when None)."""
    env = os.environ if environ is None else environ
    document: Any = None
    if path is not None:
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as error:
            raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {path} is not valid YAML: {error}") from None
    return build_config(document, env, exempt_namespaces)
