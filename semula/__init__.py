"""semula: an OpenAI-compatible server that records and replays LLM calls."""

__version__ = "0.1.0"
