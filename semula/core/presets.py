"""Named `normalize` rules for the volatile text known agents put in their prompts and tool output.

A project turns one on with a rule `{"preset": NAME}` in its `normalize` setting, in order among its
own rules (docs/agents/). Each preset rewrites what changes between two runs of the same task, or from
one day to the next, into a fixed placeholder, so a recorded agent run replays: the timings and ids in
Codex's tool output, the date lines each agent writes into its prompt. Pure data; semula/core/fingerprint.py
expands the rules where it applies normalize.
"""

from __future__ import annotations

PRESETS: dict[str, tuple[dict[str, str], ...]] = {
    # Codex (npm @openai/codex): its shell tool's output header and its exec tool's JSON result, in
    # both model families' forms; the <current_date> of its environment context.
    "codex": (
        {"pattern": r"Chunk ID: [0-9a-f]+", "replacement": "Chunk ID: <id>"},
        {"pattern": r"Wall time:? [0-9.]+ seconds", "replacement": "Wall time: <t> seconds"},
        {"pattern": r'"chunk_id":"[0-9a-f]+"', "replacement": '"chunk_id":"<id>"'},
        {"pattern": r'"wall_time_seconds":[0-9.eE+-]+', "replacement": '"wall_time_seconds":0'},
        {
            "pattern": r"<current_date>[0-9-]+</current_date>",
            "replacement": "<current_date>DATE</current_date>",
        },
    ),
    # Claude Code (npm @anthropic-ai/claude-code): the date of its environment block and the client
    # version in its billing line, which a new Claude Code changes.
    "claude-code": (
        {"pattern": r"Today's date is [0-9]{4}-[0-9]{2}-[0-9]{2}", "replacement": "Today's date is DATE"},
        {"pattern": r"cc_version=[0-9A-Za-z.]+", "replacement": "cc_version=VERSION"},
    ),
    # Gemini CLI (npm @google/gemini-cli): the date of its session context.
    "gemini-cli": (
        {
            "pattern": r"Today's date is [A-Za-z]+, [A-Za-z]+ [0-9]{1,2}, [0-9]{4}",
            "replacement": "Today's date is DATE",
        },
    ),
}


def expand(rules: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rules with each {"preset": NAME} replaced by that preset's rules (unknown names: none)."""
    if not any("preset" in rule for rule in rules):
        return rules
    out: list[dict[str, str]] = []
    for rule in rules:
        out.extend(PRESETS.get(rule["preset"], ()) if "preset" in rule else (rule,))
    return out
