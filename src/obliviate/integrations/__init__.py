"""Adapters to outside services: :mod:`.llm_judge`, EMBER's judge on an OpenAI-compatible endpoint."""
