"""Every field of an SDK request model, as the paths of the keys its `to_map` sends
(`JobSpecs[].ResourceConfig.GPU`), found from the model classes' own type hints, so a field a new
SDK version adds shows up without anyone listing it.

Also a script, for an SDK installed in another virtualenv: `python sdk_fields.py MODULE CLASS`
prints the paths as JSON.
"""

from __future__ import annotations

import importlib
import json
import sys
import typing

SAMPLES = {str: "s", int: 1, bool: True, float: 1.5}
MAX_DEPTH = 8


def field_paths(model: type) -> list[str]:
    return sorted(_paths(_filled(model, 0).to_map()))


def _filled(model: type, depth: int):
    """An instance of the model with every field set: nested models filled too."""
    package = importlib.import_module(model.__module__.split(".models")[0] + ".models")
    hints = typing.get_type_hints(model.__init__, {**vars(sys.modules[model.__module__]), "main_models": package})
    return model(**{name: _sample(hint, depth) for name, hint in hints.items() if name != "return"})


def _sample(hint, depth: int):
    origin = typing.get_origin(hint)
    if origin is list:
        return [_sample(typing.get_args(hint)[0], depth)]
    if origin is dict:
        return {"K": _sample(typing.get_args(hint)[1], depth)}
    if isinstance(hint, type) and hasattr(hint, "to_map") and depth < MAX_DEPTH:
        return _filled(hint, depth + 1)
    return SAMPLES.get(hint, "s")


def _paths(value, prefix: str = "") -> list[str]:
    """The keys of a to_map dict as paths; a map's own keys (K) are the caller's, not fields."""
    out = []
    if isinstance(value, dict) and "K" not in value:
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            out += [path, *_paths(item, path)]
    elif isinstance(value, list) and value:
        out += _paths(value[0], prefix + "[]")
    return out


if __name__ == "__main__":
    module = importlib.import_module(sys.argv[1])
    print(json.dumps(field_paths(getattr(module, sys.argv[2]))))
