"""A budget report in words, for a terminal and for a TeamRun's status column."""

from __future__ import annotations

from oma.budget.state import BudgetReport


def budget_line(report: BudgetReport) -> str:
    """Spend against each limit, all attempts together (lost calls said apart)."""
    spent, limits = report.spent, report.limits
    parts = []
    if limits.tokens is not None:
        part = f"tokens {report.tokens}/{limits.tokens}"
        if spent.lost_model_calls:
            part += f" ({spent.lost_tokens} reserved by {spent.lost_model_calls} lost call(s))"
        parts.append(part)
    if limits.model_calls is not None:
        parts.append(f"model calls {spent.model_calls}/{limits.model_calls}")
    if limits.tool_calls is not None:
        parts.append(f"tool calls {spent.tool_calls}/{limits.tool_calls}")
    return "budget: " + " · ".join(parts)


def budget_column(report: BudgetReport) -> str:
    """The first limited kind as ``used/limit kind`` (tokens before model calls before tools)."""
    kind, used, limit = report.usage()[0]
    return f"{used}/{limit} {_WORDS[kind]}"


_WORDS = {"tokens": "tokens", "modelCalls": "model calls", "toolCalls": "tool calls"}
