"""The command line: ``obliviate <command>`` (:mod:`obliviate.cli.main`), one module per command."""
