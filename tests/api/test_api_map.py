"""docs/api-map.md lists every action of the three official SDKs and says truly whether this server
serves it: each action's method and path, as the SDK's own client sends them, is routed here."""

import re
from pathlib import Path

import pytest
from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parents[2]
SDKS = {"alibabacloud_pai_dlc20201203": "DLC", "alibabacloud_paistudio20220112": "PaiStudio",
        "alibabacloud_aiworkspace20210204": "AIWorkspace"}
ACTION = re.compile(r"action = '(\w+)',.*?pathname = f'([^']+)',\s*method = '(\w+)'", re.S)
ROW = re.compile(r"^\| (\w+) \| `(\w+)` \| `(\w+) ([^`]+)` \| (served|not served) \|", re.M)


def sdk_actions() -> dict[tuple[str, str], tuple[str, str]]:
    """(SDK, action) -> (method, path with its parameters as `{name}`), from each installed client."""
    import importlib.util

    found = {}
    for sdk in SDKS:
        client = Path(importlib.util.find_spec(sdk).origin).with_name("client.py").read_text()
        for action, path, method in ACTION.findall(client):
            path = re.sub(r"\{OpenApiUtilClient\.get_encode_param\((?:request\.)?(\w+)\)\}|\{DaraURL\.percent_encode\((?:request\.)?(\w+)\)\}",
                          lambda m: "{" + (m.group(1) or m.group(2)) + "}", path)
            found[SDKS[sdk], action] = (method, path)
    return found


def served(method: str, path: str, action: str) -> bool:
    try:
        match = resolve(re.sub(r"\{\w+\}", "x", path))
    except Resolver404:
        return False
    view = getattr(match.func, "view_class", None)
    # A path two SDKs share is served for the actions its view names (told apart by x-acs-action).
    only = getattr(view, "only_actions", None)
    return view is not None and hasattr(view, method.lower()) and (only is None or action in only)


def test_the_api_map_lists_every_sdk_action_and_whether_it_is_served():
    actions = sdk_actions()
    listed = {(sdk, action): (method, path, state) for sdk, action, method, path, state in ROW.findall(
        (ROOT / "docs/api-map.md").read_text())}
    assert sorted(listed) == sorted(actions), "docs/api-map.md's table of actions differs from the SDKs'"
    assert [key for key, (method, path, _) in listed.items() if actions[key] != (method, path)] == []
    wrong = [f"{sdk} {action}: listed {listed[sdk, action][2]}" for (sdk, action), (method, path) in actions.items()
             if (listed[sdk, action][2] == "served") != served(method, path, action)]
    assert wrong == []


@pytest.mark.parametrize("sdk", SDKS.values())
def test_every_sdk_is_read(sdk):
    assert any(name == sdk for name, _ in sdk_actions())


def table() -> str:
    """The table docs/api-map.md holds (`python tests/api/test_api_map.py` writes it anew)."""
    return "\n".join(f"| {sdk} | `{action}` | `{method} {path}` | {'served' if served(method, path, action) else 'not served'} |"
                     for (sdk, action), (method, path) in sorted(sdk_actions().items()))


if __name__ == "__main__":  # rewrite docs/api-map.md's table from the installed SDKs and the routes
    import os
    import sys

    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    django.setup()
    doc = ROOT / "docs/api-map.md"
    text = doc.read_text()
    start = text.index("| SDK | action | request | here |")
    end = text.index("\n\n", start)
    doc.write_text(text[:start] + "| SDK | action | request | here |\n|---|---|---|---|\n" + table() + text[end:])
