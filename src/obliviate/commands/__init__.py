"""CLI commands, one module per group; each defines ``register(subparsers)``."""
