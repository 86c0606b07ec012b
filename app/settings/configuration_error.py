"""A bad setting: one line that names it the way its reader sets it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigurationError(RuntimeError):
    """A setting is missing or invalid: one line that names it and says what to do.

    `problem` may name settings as `{KEY}`; they are written as the reader sets them:
    `KEY` in the environment, `app.config["KEY"]` for an embedded blueprint.
    """

    def __init__(self, key: str, problem: str, *, environment: bool = False) -> None:
        self.key, self.problem, self.environment = key, problem, environment
        names = _SettingNames(environment)
        super().__init__(f"{names[key]} {problem.format_map(names)}")

    def from_environment(self) -> ConfigurationError:
        """The same error, naming environment variables."""
        return ConfigurationError(self.key, self.problem, environment=True)


class _SettingNames(dict):
    def __init__(self, environment: bool) -> None:
        super().__init__()
        self.environment = environment

    def __missing__(self, key: str) -> str:
        return key if self.environment else f'app.config["{key}"]'


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells, if one is close."""
    closest = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return closest[0] if closest else None
