"""The attack tests' small world, its tokenizer and a tiny Llama (tests/_tiny_world.py, shared with
tests/evidence)."""

from _tiny_world import (_one_thread, cut_forget, small_world, unchanged, world_model,  # noqa: F401
                         world_tokenizer)
