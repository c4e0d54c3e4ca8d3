"""Tools a runner offers: the built-in ones plus any from installed packages.

A package contributes tools through the ``oma.tools`` entry-point group; each entry point
loads a ``Tool`` or a callable returning an iterable of ``Tool`` objects. A package whose entry
point cannot be loaded, or gives something else, is bad input (``ToolLoadError``): retrying the
attempt cannot help, so the runner reports it as a permanent failure, with the entry point named.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from oma.errors import OmaError
from oma.tools import AnyTool, Tool, builtin_tools

GROUP = "oma.tools"


class ToolLoadError(OmaError):
    code = "TOOL_LOAD"


def available_tools() -> dict[str, AnyTool]:
    tools = builtin_tools()
    for entry in entry_points(group=GROUP):
        try:
            loaded = entry.load()
            found = [loaded] if isinstance(loaded, Tool) else list(loaded())
        except Exception as exc:  # a third-party package's import or factory failed
            raise ToolLoadError(
                f"cannot load entry point {entry.name!r} ({entry.value}) of {GROUP}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        for tool in found:
            if not isinstance(tool, Tool):
                raise ToolLoadError(
                    f"entry point {entry.name!r} of {GROUP} gave {tool!r}, not a Tool"
                )
            tools[tool.name] = tool
    return tools
