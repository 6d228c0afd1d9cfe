"""Mendpoint's agent side: act on the gateway's recovery envelope without the model guessing.

`decide(result)` reads any shape the gateway emits (docs/spec.md, Shapes; docs/mcp.md) and
returns a `Decision`; the adapters (`mendpoint_agents.pydantic_ai`, `.openai_agents`,
`.langchain`, `.httpx`) follow it on each framework's own extension point. This module
imports no framework: `decide` needs nothing beyond the standard library.
"""

from mendpoint_agents.decide import decide
from mendpoint_agents.decision import Action, Decision, Source
from mendpoint_agents.errors import (
    CorrectableFailure,
    MendpointFailure,
    TerminalFailure,
    TransientFailure,
)
from mendpoint_agents.fixes import allowing, run_fix_command
from mendpoint_agents.http_answers import HttpAnswer
from mendpoint_agents.ladder import Policy
from mendpoint_agents.mcp_results import decide_text

__all__ = [
    "Action",
    "CorrectableFailure",
    "Decision",
    "HttpAnswer",
    "MendpointFailure",
    "Policy",
    "Source",
    "TerminalFailure",
    "TransientFailure",
    "allowing",
    "decide",
    "decide_text",
    "run_fix_command",
]
