"""Adapters to services outside the package: :mod:`.llm_judge`, EMBER's judge on an OpenAI-compatible
endpoint."""
