"""obliviate: remove targeted knowledge and capabilities from language models, and prove that they are gone."""

__version__ = "0.1.0"
