"""Tools a runner offers: the built-in ones plus any from installed packages.

A package contributes tools through the ``oma.tools`` entry-point group; each entry point
loads a ``Tool`` or a callable returning an iterable of ``Tool`` objects.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from oma.tools import AnyTool, Tool, builtin_tools

GROUP = "oma.tools"


def available_tools() -> dict[str, AnyTool]:
    tools = builtin_tools()
    for entry in entry_points(group=GROUP):
        loaded = entry.load()
        found = [loaded] if isinstance(loaded, Tool) else list(loaded())
        for tool in found:
            if not isinstance(tool, Tool):
                raise TypeError(f"entry point {entry.name!r} of {GROUP} gave {tool!r}, not a Tool")
            tools[tool.name] = tool
    return tools
