"""A bad setting: one line that names it the way its reader sets it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

#: A setting named in a problem: `{PLANTS_STORE_URL}`.
_SETTING_NAME = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")


class ConfigurationError(RuntimeError):
    """A setting is missing or invalid: one line that names it and says what to do.

    `problem` may name settings as `{KEY}`; they are written as the reader sets them:
    `KEY` in the environment, `app.config["KEY"]` for an embedded blueprint. Nothing else in it
    is a template: a value it quotes (`'{'`, a path `/run/{x}`) is written as it is.
    """

    def __init__(self, key: str, problem: str, *, environment: bool = False) -> None:
        self.key, self.problem, self.environment = key, problem, environment
        names = _SettingNames(environment)
        named = _SETTING_NAME.sub(lambda match: names[match[1]], problem)
        super().__init__(f"{names[key]} {named}")

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
